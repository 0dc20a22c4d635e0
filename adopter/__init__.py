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
- ``open_login(timeout=...)``: what a terminal app runs at its launch (and
  ``multiserver restore`` at login): the restore lock, the restore, late
  arrivals adopted, the sweep, every claim given back; an event per step
  (``WaitingForLock`` ... ``Done``). It is here, not in ``restore``,
  because it uses both (docs/restore.md, "Login at an app's launch").

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
from adopter._login import (
    open_login as open_login,
)
from adopter._login_events import (
    Arrived as Arrived,
    ClaimsReleased as ClaimsReleased,
    Done as Done,
    LateAdopted as LateAdopted,
    LockTaken as LockTaken,
    LockTimedOut as LockTimedOut,
    LoginEvent as LoginEvent,
    LoginReport as LoginReport,
    ReportNotKept as ReportNotKept,
    Restoring as Restoring,
    SessionRestored as SessionRestored,
    SessionRow as SessionRow,
    StoreUnavailable as StoreUnavailable,
    StoreWarning as StoreWarning,
    Swept as Swept,
    WaitingForLock as WaitingForLock,
    Warned as Warned,
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
