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

from adopter._adopt import MemorySink, OrphanSink, StoreSink, host_orphan_leaf, orphan_leaf
from adopter._late_host import LateHost, late_host
from adopter._policy import (
    ORPHAN_NOTICE,
    ORPHAN_WINDOW,
    classify,
    host_orphan,
    orphan_name,
    orphans,
    referenced,
)
from adopter._sweep import SWEEP_BOUND, SweepReport, SweepRow, adopt_late, sweep

__all__ = [
    "ORPHAN_NOTICE",
    "ORPHAN_WINDOW",
    "SWEEP_BOUND",
    "LateHost",
    "MemorySink",
    "OrphanSink",
    "StoreSink",
    "SweepReport",
    "SweepRow",
    "adopt_late",
    "classify",
    "host_orphan",
    "host_orphan_leaf",
    "late_host",
    "orphan_leaf",
    "orphan_name",
    "orphans",
    "referenced",
    "sweep",
]
