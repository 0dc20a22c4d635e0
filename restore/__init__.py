"""restore: the saved arrangement of sessions and bringing it back.

Public API (everything else is private and may change)::

    store, warning = ArrangementStore.open_or_quarantine()
    store.add_session(SessionLeaf("build", ["make"], "/src"), window="main")
    arrangement = store.load()

    async with trio.open_nursery() as nursery:
        result = await restore_arrangement(arrangement, nursery=nursery, timeout=10)

See docs/restore.md.
"""

from typing import TYPE_CHECKING

from multiserver._lazy import lazy_exports

if TYPE_CHECKING:
    from restore._build import RestoredSession
    from restore._held import Hold, HoldRecord, live_holds, pid_alive
    from restore._model import (
        SCROLLBACK_LIMIT,
        Arrangement,
        PendingLaunch,
        RestorationRef,
        SavedOutput,
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

# Names load on first use: the command line's fast path reads the store
# without importing the restore machinery (and trio).
_HOMES: dict[str, str] = {
    "ATTACH_SHARE": "restore._plan",
    "Arrangement": "restore._model",
    "ArrangementStore": "restore._store",
    "DaemonAttachment": "restore._partial",
    "Hold": "restore._held",
    "HoldRecord": "restore._held",
    "OUTCOMES": "restore._plan",
    "Options": "restore._plan",
    "Outcome": "restore._plan",
    "PendingClose": "restore._store",
    "PendingLaunch": "restore._model",
    "PhaseResult": "restore._partial",
    "RestorationRef": "restore._model",
    "RestoreResult": "restore._restore",
    "RestoredSession": "restore._build",
    "SCROLLBACK_LIMIT": "restore._model",
    "SavedOutput": "restore._model",
    "SessionLeaf": "restore._model",
    "Split": "restore._model",
    "StoreCorrupt": "restore._store",
    "StoreError": "restore._store",
    "StoreTooNew": "restore._store",
    "Tab": "restore._model",
    "Window": "restore._model",
    "bounded_scrollback": "restore._model",
    "close_late": "restore._restore",
    "live_holds": "restore._held",
    "pid_alive": "restore._held",
    "release_claims": "restore._restore",
    "restore_arrangement": "restore._restore",
}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())

__all__ = [
    "ATTACH_SHARE",
    "OUTCOMES",
    "SCROLLBACK_LIMIT",
    "Arrangement",
    "ArrangementStore",
    "DaemonAttachment",
    "Hold",
    "HoldRecord",
    "Options",
    "Outcome",
    "PendingClose",
    "PendingLaunch",
    "PhaseResult",
    "RestorationRef",
    "RestoreResult",
    "RestoredSession",
    "SavedOutput",
    "SessionLeaf",
    "Split",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "Tab",
    "Window",
    "bounded_scrollback",
    "close_late",
    "live_holds",
    "pid_alive",
    "release_claims",
    "restore_arrangement",
]
