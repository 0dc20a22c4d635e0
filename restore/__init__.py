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

from multiserver import lazy_exports

# The public names, by the module that defines them. Each loads on first
# use: the command line's fast path reads the store without importing the
# restore machinery (and trio). Type checkers read __init__.pyi, generated
# from this table.
EXPORTS = {
    "restore._build": ("RestoredSession",),
    "restore._held": ("Hold", "HoldRecord", "live_holds", "pid_alive"),
    "restore._kitty": ("Kitty",),
    "restore._layout": (
        "Op",
        "OpenTab",
        "PaneCommand",
        "SeenTab",
        "SplitPane",
        "kitty_pairs",
        "merge_layout",
        "open_plan",
        "parse_tmux_layout",
        "tab_size",
        "without_sessions",
    ),
    "restore._model": (
        "SCROLLBACK_LIMIT",
        "Arrangement",
        "PendingLaunch",
        "RestorationRef",
        "SavedOutput",
        "SessionLeaf",
        "Split",
        "Tab",
        "Window",
        "bounded_scrollback",
        "ref_key",
    ),
    "restore._partial": ("DaemonAttachment", "PhaseResult"),
    "restore._plan": (
        "ATTACH_SHARE",
        "OUTCOMES",
        "Decision",
        "HostAnswer",
        "HostChild",
        "Options",
        "Outcome",
        "decide_remote",
        "relaunch_notice",
    ),
    "restore._restore": ("RestoreResult", "close_late", "release_claims", "restore_arrangement"),
    "restore._errors": ("StoreCorrupt", "StoreError", "StoreTooNew"),
    "restore._schema": ("PendingClose",),
    "restore._store": ("ArrangementStore",),
    "restore._terminals": ("ReadPane", "ReadTab", "TerminalError"),
    "restore._tmux": ("Tmux",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS, globals())
