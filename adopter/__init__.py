"""adopter: processes that survived but that no restored session claimed.

- ``sweep(sink)``: one idempotent pass over every daemon socket: stale
  sockets removed, unresponsive daemons reported, orphans adopted into the
  ``orphans`` window (``adopt=False``: only say what it would do).
- ``adopt_late(attachment, sink)``: a restore's late arrival, adopted the same
  way.
- ``late_host(arrangement, host, answer, options)``: what a host that
  answered restore after its timeout makes of its sessions (pure); its
  orphans are recorded with ``sink.record_host``.
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
from adopter._late_host import (
    LateHost as LateHost,
    late_host as late_host,
)
from adopter._policy import (
    ORPHAN_NOTICE as ORPHAN_NOTICE,
    ORPHAN_WINDOW as ORPHAN_WINDOW,
    classify as classify,
    host_orphan as host_orphan,
    orphan_name as orphan_name,
    orphans as orphans,
    referenced as referenced,
)
from adopter._sweep import (
    SWEEP_BOUND as SWEEP_BOUND,
    SweepReport as SweepReport,
    SweepRow as SweepRow,
    adopt_late as adopt_late,
    sweep as sweep,
)
