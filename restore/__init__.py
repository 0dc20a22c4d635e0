"""restore: the saved arrangement of sessions and bringing it back.

Public API (everything else is private and may change)::

    store, warning = ArrangementStore.open_or_quarantine()
    store.add_session(SessionLeaf("build", ["make"], "/src"), window="main")
    arrangement = store.load()

    async with trio.open_nursery() as nursery:
        result = await restore_arrangement(arrangement, nursery=nursery, timeout=10)

Opening the arrangement in a terminal (docs/layouts.md)::

    ops = open_plan(arrangement, lambda leaf: ("multiserver", "attach", leaf.name))
    Tmux().open(ops, env={})

See docs/restore.md.
"""

from typing import TYPE_CHECKING

from multiserver._lazy import lazy_exports

if TYPE_CHECKING:
    from restore._build import RestoredSession
    from restore._held import Hold, HoldRecord, live_holds, pid_alive
    from restore._kitty import Kitty
    from restore._layout import (
        OpenTab,
        PaneCommand,
        SeenTab,
        SplitPane,
        kitty_pairs,
        merge_layout,
        open_plan,
        parse_tmux_layout,
    )
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
    from restore._plan import (
        ATTACH_SHARE,
        OUTCOMES,
        Decision,
        HostAnswer,
        HostChild,
        Options,
        Outcome,
        decide_remote,
    )
    from restore._restore import RestoreResult, close_late, release_claims, restore_arrangement
    from restore._store import (
        ArrangementStore,
        PendingClose,
        StoreCorrupt,
        StoreError,
        StoreTooNew,
    )
    from restore._terminals import ReadPane, ReadTab, TerminalError
    from restore._tmux import Tmux

# Names load on first use: the command line's fast path reads the store
# without importing the restore machinery (and trio).
_HOMES: dict[str, str] = {
    "Kitty": "restore._kitty",
    "OpenTab": "restore._layout",
    "PaneCommand": "restore._layout",
    "SeenTab": "restore._layout",
    "SplitPane": "restore._layout",
    "kitty_pairs": "restore._layout",
    "merge_layout": "restore._layout",
    "open_plan": "restore._layout",
    "parse_tmux_layout": "restore._layout",
    "ReadPane": "restore._terminals",
    "ReadTab": "restore._terminals",
    "TerminalError": "restore._terminals",
    "Tmux": "restore._tmux",
    "ATTACH_SHARE": "restore._plan",
    "Arrangement": "restore._model",
    "ArrangementStore": "restore._store",
    "DaemonAttachment": "restore._partial",
    "Decision": "restore._plan",
    "HostAnswer": "restore._plan",
    "HostChild": "restore._plan",
    "decide_remote": "restore._plan",
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
    "Decision",
    "Hold",
    "HoldRecord",
    "HostAnswer",
    "HostChild",
    "Kitty",
    "OpenTab",
    "Options",
    "Outcome",
    "PaneCommand",
    "PendingClose",
    "PendingLaunch",
    "PhaseResult",
    "ReadPane",
    "ReadTab",
    "RestorationRef",
    "RestoreResult",
    "RestoredSession",
    "SavedOutput",
    "SeenTab",
    "SessionLeaf",
    "Split",
    "SplitPane",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "Tab",
    "TerminalError",
    "Tmux",
    "Window",
    "bounded_scrollback",
    "close_late",
    "decide_remote",
    "kitty_pairs",
    "live_holds",
    "merge_layout",
    "open_plan",
    "parse_tmux_layout",
    "pid_alive",
    "release_claims",
    "restore_arrangement",
]
