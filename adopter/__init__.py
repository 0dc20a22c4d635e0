"""adopter: processes that survived but that no restored session claimed.

- ``sweep(sink)``: one idempotent pass over every daemon socket: stale
  sockets removed, unresponsive daemons reported, orphans adopted into the
  ``orphans`` window (``adopt=False``: only say what it would do).
- ``adopt_late(attachment, sink)``: a restore's late arrival, adopted the same
  way.
- Sinks: ``StoreSink`` (the saved arrangement) or ``MemorySink``.

See docs/adopter.md.
"""

from adopter._adopt import MemorySink, OrphanSink, StoreSink, orphan_leaf
from adopter._policy import (
    ORPHAN_NOTICE,
    ORPHAN_WINDOW,
    classify,
    orphan_name,
    orphans,
    referenced,
)
from adopter._sweep import SWEEP_BOUND, SweepReport, SweepRow, adopt_late, sweep

__all__ = [
    "ORPHAN_NOTICE",
    "ORPHAN_WINDOW",
    "SWEEP_BOUND",
    "MemorySink",
    "OrphanSink",
    "StoreSink",
    "SweepReport",
    "SweepRow",
    "adopt_late",
    "classify",
    "orphan_leaf",
    "orphan_name",
    "orphans",
    "referenced",
    "sweep",
]
