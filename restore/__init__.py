"""restore: the saved arrangement of sessions and bringing it back.

Its rooms: ``store/`` (the saved arrangement: model, schema, the SQLite
store, holds), the engine here (``_plan`` pure, ``_partial``, ``_build``,
``_restore``, ``_intents``), ``remote/`` (hosts reached through ssh, and
their part of the restore), ``layout/`` (windows, tabs and splits, read
from and opened in tmux and kitty). This face is the one import surface
for ``adopter`` and the command line.

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

from multiserver.internal import lazy_exports

# The public names, by the module that defines them, room by room. Each
# loads on first use: the command line's fast path reads the store without
# importing the restore machinery (and trio). Type checkers read
# __init__.pyi, generated from this table.
EXPORTS = {
    # store/: the saved arrangement
    "restore.store._errors": ("StoreCorrupt", "StoreError", "StoreTooNew"),
    "restore.store._held": ("Hold", "HoldRecord", "live_holds", "pid_alive"),
    "restore.store._model": (
        "Arrangement",
        "PendingLaunch",
        "RestorationRef",
        "SavedOutput",
        "SessionLeaf",
        "Split",
        "Tab",
        "Window",
        "ref_key",
    ),
    "restore.store._rules": ("SCROLLBACK_LIMIT", "bounded_scrollback"),
    "restore._kept": ("forget_kept", "kept_fields", "kept_scrollback", "with_kept_state"),
    "restore.store._schema": ("PendingClose",),
    "restore.store._outline": ("add_saved", "read_about", "read_saved"),
    # A saved session as read_saved gives it and add_saved takes it.
    "restore.store._light_model": ("LightRestorationRef", "LightSessionLeaf"),
    "restore.store._store": ("ArrangementStore",),
    # the engine
    "restore._build": ("RestoredSession",),
    "restore._owner": ("LATE_SUFFIX", "late_family", "late_name", "norm_socket", "relaunch_of"),
    "restore._partial": ("DaemonAttachment", "PhaseResult"),
    "restore._plan": (
        "ATTACH_SHARE",
        "GONE_THERE",
        "OUTCOMES",
        "RELAUNCH_MARKER",
        "Decision",
        "HostAnswer",
        "HostChild",
        "Options",
        "Outcome",
        "decide_remote",
        "relaunch_notice",
    ),
    "restore._restore_lock": (
        "RESTORE_LOCK",
        "RESTORE_REPORT",
        "keep_restore_report",
        "read_restore_report",
        "restore_lock_holder",
        "restore_report_identity",
        "take_restore_lock",
    ),
    "restore._restore": (
        "LateArrival",
        "RestoreResult",
        "close_late",
        "release_claims",
        "restore_arrangement",
    ),
    # remote/: sessions on other hosts
    "restore.remote._answers": (
        "RemoteSession",
        "failed_answer",
        "host_answer",
        "leaf_there",
        "listing_of",
        "remote_sessions",
        "start_request",
        "started_again",
    ),
    # What a host answers (its ls --json): written there, read here.
    "restore.remote._listing": ("ListedSession", "listing_json"),
    "restore.remote._errors": ("FailureKind", "HostFailure", "HostSettingError", "HostsFileError"),
    "restore.remote._hosts": (
        "Host",
        "config_dir",
        "check_command",
        "check_dest",
        "check_host_name",
        "load_hosts",
        "parse_grace",
        "parse_timeout",
        "save_hosts",
    ),
    "restore.remote._restore": ("Carried", "HostAttachment", "carry_out", "restore_hosts"),
    "restore.remote._ssh": (
        "SSH_FAILED",
        "exit_argv",
        "remote_json",
        "run_remote",
        "ssh_argv",
        "succeeded",
    ),
    # layout/: windows, tabs and splits in a terminal
    "restore.layout._capture": ("Capture", "Saved", "SessionOf", "save_layout", "seen_tabs"),
    "restore.layout._kitty": ("Kitty",),
    "restore.layout._layout": (
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
    "restore.layout._terminals": ("ReadPane", "ReadTab", "TerminalError"),
    "restore.layout._tmux": ("Tmux",),
    "restore.layout._window_names": ("window_name_for", "window_name_problem"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS, globals())
