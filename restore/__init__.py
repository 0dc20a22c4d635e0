"""restore: the saved arrangement of sessions and bringing it back.

Public API (everything else is private and may change)::

    store, warning = ArrangementStore.open_or_quarantine()
    store.add_session(SessionLeaf("build", ["make"], "/src"), window="main")
    arrangement = store.load()
"""

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
from restore._store import (
    ArrangementStore,
    PendingClose,
    StoreCorrupt,
    StoreError,
    StoreTooNew,
)

__all__ = [
    "SCROLLBACK_LIMIT",
    "Arrangement",
    "ArrangementStore",
    "PendingClose",
    "RestorationRef",
    "SessionLeaf",
    "Split",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "Tab",
    "Window",
    "bounded_scrollback",
]
