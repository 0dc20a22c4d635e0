"""adopter: processes that survived but that no restored session claimed.

- ``sweep(sink)``: one idempotent pass over every daemon socket: stale
  sockets removed, unresponsive daemons reported, orphans adopted into the
  ``orphans`` window (``adopt=False``: only say what it would do).
- ``adopt_late(arrival, sink)``: a restore's late arrival (a daemon's
  partial attach, or a host's answer), adopted the same way.
- ``late_host(arrangement, host, answer, options)``: what a host that
  answered restore after its timeout makes of its sessions (pure);
  ``adopt_late_host`` carries it out.
- Sinks: ``StoreSink`` (the saved arrangement) or ``MemorySink``.

See docs/adopter.md.
"""

from adopter._adopt import (
    MemorySink as MemorySink,
    OrphanSink as OrphanSink,
    StoreSink as StoreSink,
    host_orphan_leaf as host_orphan_leaf,
    orphan_leaf as orphan_leaf,
)
from adopter._late import (
    adopt_late as adopt_late,
)
from adopter._late_host import (
    LateHost as LateHost,
    adopt_late_host as adopt_late_host,
    late_host as late_host,
)
from adopter._policy import (
    ORPHAN_NOTICE as ORPHAN_NOTICE,
    ORPHAN_WINDOW as ORPHAN_WINDOW,
    classify as classify,
    host_orphan as host_orphan,
    late_notice as late_notice,
    orphans as orphans,
    referenced as referenced,
)
from adopter._sweep import (
    SWEEP_BOUND as SWEEP_BOUND,
    SweepReport as SweepReport,
    SweepRow as SweepRow,
    adopt_late_daemon as adopt_late_daemon,
    sweep as sweep,
)
