"""restore: the saved arrangement of sessions and bringing it back.

Public API (everything else is private and may change)::

    store, warning = ArrangementStore.open_or_quarantine()
    store.add_session(SessionLeaf("build", ["make"], "/src"), window="main")
    arrangement = store.load()

    async with trio.open_nursery() as nursery:
        result = await restore_arrangement(arrangement, nursery=nursery, timeout=10)

See docs/restore.md.
"""

from restore._build import RestoredSession
from restore._model import (
    SCROLLBACK_LIMIT,
    Arrangement,
    RestorationRef,
    SessionLeaf,
    Split,
    Tab,
    Window,
    bounded_scrollback,
)
from restore._partial import DaemonAttachment, PhaseResult
from restore._plan import ATTACH_SHARE, OUTCOMES, Options, Outcome
from restore._restore import RestoreResult, close_late, release_claims, restore_arrangement
from restore._store import (
    ArrangementStore,
    PendingClose,
    StoreCorrupt,
    StoreError,
    StoreTooNew,
)

__all__ = [
    "ATTACH_SHARE",
    "OUTCOMES",
    "SCROLLBACK_LIMIT",
    "Arrangement",
    "ArrangementStore",
    "DaemonAttachment",
    "Options",
    "Outcome",
    "PendingClose",
    "PhaseResult",
    "RestorationRef",
    "RestoreResult",
    "RestoredSession",
    "SessionLeaf",
    "Split",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "Tab",
    "Window",
    "bounded_scrollback",
    "close_late",
    "release_claims",
    "restore_arrangement",
]
