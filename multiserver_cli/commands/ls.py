"""``multiserver ls``: the sessions of every daemon (``--daemon N``: of
daemon N) and of every configured host, each under the name ``attach``
takes, with what it wrote since its last detach (WAITING, ``_shown``);
saved sessions with no program running too (one that ended unseen, its
daemon gone; one a reboot or ``stop --force`` took, for restore). A daemon or
a host that could not be read is said, and fails the command."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli import _args

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver_cli._names import Session
    from restore import ListedSession, RemoteSession, SessionLeaf

NAME = "ls"
HELP = "list the sessions of every daemon"
EXAMPLE = "multiserver ls --json"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help="for scripts: one JSON array with an object per session (one line when piped)",
    )
    p.add_argument(
        "--names",
        action="store_true",
        help="only the names, one a line (what completion offers): this machine's sessions and"
        " the saved sessions of hosts, as HOST:NAME; no host is asked",
    )


def run(args: Namespace) -> int:
    import time

    from multiserver_cli import _saved, _shown, _state
    from multiserver_cli._format import ls_table, print_json
    from multiserver_cli._names import sessions
    from multiserver_cli._sessions import as_kept, survey

    with _saved.open_saved() as saved:
        # Where each program is now (its foreground process's cwd), as tmux
        # shows a pane's path, not where it started (issue 36).
        view = survey(saved, _args.only_daemon(args), foreground=not args.names)
        theirs = [leaf for leaf in saved.leaves() if leaf.host is not None]
    from multiserver.internal import printable

    if args.names:
        names = [s.name for s in sessions(view)] + [leaf.name for leaf in theirs]
        sys.stdout.write("".join(f"{printable(n)}\n" for n in dict.fromkeys(names)))
        return 0
    for problem in view.problems:
        _state.warn(problem)
    # Each child under the name `attach` takes: its saved session's, if any.
    every = [_where_now(s) for s in sessions(view)]
    rows = [s for s in every if s.child is not None]
    # Saved sessions with no live child: programs that ended unseen, their
    # daemon gone (kept until seen: attach, peek), and programs gone (a
    # reboot, `stop --force`), which restore starts again. Their names are
    # taken: ls lists them, so as never to say "no sessions" meanwhile.
    holds = _holds(every)
    kept = [
        (leaf, *_saved_state(s, leaf, holds))
        for s in every
        if s.child is None and s.leaf is not None
        for leaf in [as_kept(s.leaf)]
    ]
    records = _shown.load()
    waiting = [_waiting(s, records) for s in rows]
    _shown.prune(
        records,
        {(s.instance_id, s.child.id) for s in rows if s.child is not None},
        {d.instance_id for d in view.daemons},
        all_seen=not args.daemon_given and not view.problems,
    )
    remote, remote_problems, gone = _remote_sessions(args, theirs)
    for problem in remote_problems:
        _state.warn(problem)
    if args.json:
        from multiserver.internal import replaced
        from restore import listing_json

        # What a host answers when asked for its sessions: one schema,
        # restore.remote._listing's, whoever reads it.
        print_json(
            listing_json(
                [_session_row(s, w) for s, w in zip(rows, waiting, strict=True)]
                + [_saved_row(leaf, why) for leaf, _, why in kept]
                + [replaced(r.row, host=r.host) for r in remote]
                + [_saved_there_row(leaf, why) for leaf, why in gone]
            )
        )
    elif rows or kept or remote or gone:
        daemons = [s.daemon for s in rows] + [r.host for r in remote]
        print(
            ls_table(
                [s.child for s in rows if s.child is not None] + [r.child for r in remote],
                time.time(),
                daemons=daemons if len(set(daemons)) > 1 or gone else None,
                waiting=waiting + [r.waiting for r in remote],
                notes=[_note(s) for s in rows] + [None] * len(remote),
                saved=[(leaf, short) for leaf, short, _ in kept]
                + [(leaf, "not running") for leaf, _ in gone],
            )
        )
        # Why each saved one is as it is: a line each, under the table.
        for leaf, why in [(leaf, why) for leaf, _, why in kept] + [
            (leaf, f"saved, not running: {why}") for leaf, why in gone
        ]:
            print(f"  {printable(leaf.name)}: {printable(why)}")
    elif not view.problems and not remote_problems:
        print("no sessions", file=sys.stderr)
    # A daemon or a host that could not be read is not "no sessions": say
    # so, and fail.
    return 1 if view.problems or remote_problems else 0


def _remote_sessions(
    args: Namespace, theirs: list[SessionLeaf]
) -> tuple[list[RemoteSession], list[str], list[tuple[SessionLeaf, str]]]:
    """The sessions of every configured host (none when ``--daemon N``
    narrows ls to a local daemon), the lines of those that could not be
    listed, and the saved sessions of hosts (``theirs``) that their host
    does not list, each with why (``_remote.not_listed``)."""
    if args.daemon_given:
        return [], [], []
    from restore import HostsFileError, load_hosts

    try:
        hosts = load_hosts()
    except HostsFileError as exc:
        # Said as a host that could not be listed is: the local sessions
        # are listed all the same.
        return [], [str(exc)], []
    if not hosts and not theirs:
        return [], [], []
    from multiserver_cli._remote import list_hosts, not_listed

    remote, problems, unanswered = list_hosts(list(hosts.values()))
    return remote, problems, not_listed(theirs, remote, list(hosts), unanswered)


def _saved_there_row(leaf: SessionLeaf, why: str) -> ListedSession:
    """A saved session of another host that it does not list, for ``ls
    --json``: as a host's row (its name there, ``host``), with no live
    child (``id`` null), state "not running" and why (``detail``), as a
    local one has them."""
    from multiserver.internal import replaced

    row = _saved_row(leaf, f"saved, not running: {why}")
    return replaced(row, name=leaf.name.partition(":")[2], host=leaf.host)


def _waiting(s: Session, records: dict[tuple[str, int], int]) -> tuple[int, int] | None:
    """WAITING of a live session: None while held; else what it wrote since
    its last detach (``_shown``)."""
    from multiserver_cli import _shown

    c = s.child
    assert c is not None
    if c.held:
        return None
    return _shown.unseen(c.buffered_bytes, c.dropped_bytes, records.get((s.instance_id, c.id), 0))


def _session_row(s: Session, waiting: tuple[int, int] | None) -> ListedSession:
    """A live session for ``ls --json``: its child (argv and cwd escaped
    as ``ls`` shows them: caf\\xe9), its daemon, whether a saved session
    refers to it, how many clients hold it and watch it, what it wrote
    since its last detach (0 while held)."""
    from multiserver.internal import escaped
    from multiserver_cli._format import holding
    from restore import ListedSession

    child = s.child
    assert child is not None
    waiting_bytes, waiting_dropped = waiting or (0, 0)
    holders, watchers = holding(child)
    return ListedSession(
        name=child.name,
        id=child.id,
        pid=child.pid,
        state=child.state,
        exit_code=child.exit_code,
        argv=tuple(escaped(a) for a in child.argv),
        cwd=escaped(child.cwd),
        tty=child.tty,
        held=child.held,
        holders=holders,
        watchers=watchers,
        buffered_bytes=child.buffered_bytes,
        dropped_bytes=child.dropped_bytes,
        started_at=child.started_at,
        exited_at=child.exited_at,
        linger=child.linger,
        socket=s.socket,
        daemon_instance=s.instance_id,
        saved=s.saved,
        waiting_bytes=waiting_bytes,
        waiting_dropped_bytes=waiting_dropped,
        late_of=s.late_of or None,
    )


def _where_now(s: Session) -> Session:
    """A session with its child's cwd where its foreground process is, when
    the daemon could tell."""
    from multiserver.internal import replaced

    if s.child is None or not s.child.fg_cwd or s.child.fg_cwd == s.child.cwd:
        return s
    return replaced(s, child=replaced(s.child, cwd=s.child.fg_cwd))


def _note(s: Session) -> str | None:
    """What STATE adds about a live session: whose late original it is."""
    return f"late original of {s.late_of}" if s.late_of else None


def _holds(every: list[Session]) -> dict[tuple[str, int], int]:
    """The clients still holding a session whose daemon died (restore's
    ``live_holds``: it leaves those alone), by (instance, child): their pids.
    Read only when some saved session has no live child."""
    if all(s.child is not None or s.leaf is None for s in every):
        return {}
    from restore import live_holds

    return {key: hold.client_pid for key, hold in live_holds().items()}


def _saved_state(
    s: Session, leaf: SessionLeaf, holds: dict[tuple[str, int], int]
) -> tuple[str, str]:
    """STATE of a saved session with no live child, short (the table's
    cell) and whole (``--json``'s detail, and the line under the table):
    how its program ended (kept until seen), held by a client whose daemon
    died (as restore says it), or why it is not running and what brings
    it back. ``leaf`` is its saved leaf as its daemon kept it (``as_kept``)."""
    from multiserver import describe_exit

    ref = leaf.ref
    client = None if ref is None else holds.get((ref.instance_id, ref.child_id))
    if client is not None:
        why = f"held by a client whose daemon died (pid {client}); restore leaves it alone"
        return "held", why
    if leaf.exit_code is not None:
        code = describe_exit(leaf.exit_code)
        return code, f"{code} (saved: its daemon is gone)"
    if s.unanswered:  # its program may well run there still
        why = f"saved, not seen: {s.why_not_running}; its program may run there still"
        return "not seen", why
    return "not running", f"saved, not running: {s.why_not_running}; restore starts it again"


def _saved_row(leaf: SessionLeaf, detail: str) -> ListedSession:
    """A saved session with no live child, for ``ls --json``: the fields of
    a live one (those only a live child has null), ``saved`` true, and
    ``state`` "exited" (its program ended unseen, its daemon gone) or "not
    running" (``detail`` says why, and what brings it back)."""
    from multiserver.internal import escaped
    from restore import ListedSession

    ref = leaf.ref
    kept = len(leaf.scrollback or b"")
    return ListedSession(
        name=leaf.name,
        id=None,
        pid=None,
        state="not running" if leaf.exit_code is None else "exited",
        exit_code=leaf.exit_code,
        argv=tuple(escaped(a) for a in leaf.argv),
        cwd=escaped(leaf.cwd),
        tty=None,
        held=False,
        holders=0,
        watchers=0,
        buffered_bytes=kept,
        dropped_bytes=0,
        started_at=leaf.created_at or None,
        exited_at=None,
        linger=None,
        socket=None if ref is None else ref.socket,
        daemon_instance=None if ref is None else ref.instance_id,
        saved=True,
        waiting_bytes=kept,
        waiting_dropped_bytes=0,
        detail=detail,
    )
