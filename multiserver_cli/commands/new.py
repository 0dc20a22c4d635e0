"""The subcommands that need a daemon round trip or two and no concurrency:
``daemon``, ``stop``, ``new``, ``attach``, ``ls``, ``peek``, ``kill``, ``save``. Each is
``def cmd_X(args) -> exit status``, blocking, on the blocking client: they
import no trio, so they start in a fraction of the time. Errors are raised as
CliError (or the library's MultiserverError) and turned into one line by
``main``. Every wait on a daemon is bounded (REQUEST_TIMEOUT), except being
attached. Each command opens the saved arrangement once, if it needs it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import signal
import sys
import time
from argparse import Namespace
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from multiserver import (
    ChildInfo,
    DaemonNotRunning,
    DaemonPaths,
    LaunchResult,
    RequestFailed,
    SyncClient,
    TimedOut,
    describe_exit,
    dial_blocking,
    escaped,
    exit_status,
    launch_env,
    read_origin,
)
from multiserver_cli import _scrollback, _shown, _state
from multiserver_cli._errors import CliError
from multiserver_cli._format import ls_table, print_json, save_summary
from multiserver_cli._names import (
    NAME_TRIES,
    Create,
    Found,
    Refused,
    Resolution,
    SavedOnly,
    Session,
    Survey,
    pick_default,
    plan_new,
    sessions,
    split_target,
)
from multiserver_cli._sessions import (
    REQUEST_TIMEOUT,
    Located,
    check_name,
    live_or_fail,
    located,
    lookup,
    scope_of,
    survey,
)
from multiserver_cli._state import end_child, open_store
from multiserver_cli.attach._tty import is_terminal, say, terminal_size
from restore import ArrangementStore, SessionLeaf, StoreError

if TYPE_CHECKING:
    from multiserver_cli.attach._attached import CloseExited
    from restore import RemoteSession


def user_shell() -> list[str]:
    shell = os.environ.get("SHELL")
    if not shell:
        try:
            shell = pwd.getpwuid(os.getuid()).pw_shell
        except KeyError:
            shell = ""
    return [shell or "/bin/sh"]


def deadline() -> float:
    """The bound of a command's talk with its daemon, from now."""
    return time.monotonic() + REQUEST_TIMEOUT


@contextlib.contextmanager
def bounded(what: str) -> Iterator[None]:
    """TimedOut as one line: the daemon took longer than REQUEST_TIMEOUT."""
    try:
        yield
    except TimedOut:
        raise CliError(f"{what}: the daemon did not answer within {REQUEST_TIMEOUT:g} s") from None


def _paths(args: Namespace) -> DaemonPaths:
    return DaemonPaths.for_number(args.daemon)


def _number(args: Namespace) -> int | None:
    return args.daemon if args.daemon_given else None


# --- daemon, stop --------------------------------------------------------------


def cmd_daemon(args: Namespace) -> int:
    """The socket on stdout (for scripts), and how the daemon was started on
    stderr (for a person)."""
    with (
        bounded("daemon"),
        dial_blocking(_paths(args), start=True, children=False, deadline=deadline()) as client,
    ):
        print(client.socket_path, flush=True)
        print(describe_daemon(client), file=sys.stderr)
    return 0


def describe_daemon(client: SyncClient) -> str:
    """ "daemon 1 (pid 42) at PATH, started by the service (stays up)": what
    the daemon wrote in its lock file, if this daemon wrote it (``_origin``)."""
    paths = DaemonPaths.for_socket(client.socket_path)
    origin = read_origin(paths.lock)
    head = f"daemon {paths.number} (pid {client.daemon_pid}) at {client.socket_path}"
    if origin is None or origin.instance_id != client.instance_id:
        return f"{head}; how it was started is not known (its lock file does not say)"
    return f"{head}, {origin.lifetime()}"


def cmd_stop(args: Namespace) -> int:
    paths = _paths(args)
    try:
        with bounded("stop"), dial_blocking(paths.socket, deadline=deadline()) as client:
            try:
                client.shutdown(force=args.force)
            except RequestFailed as exc:
                raise CliError(exc.message) from None
    except DaemonNotRunning:
        print(f"no daemon running at {paths.socket}", file=sys.stderr)
        return 0
    print(f"stopped the daemon at {paths.socket}", file=sys.stderr)
    return 0


# --- new, attach ------------------------------------------------------------------


def cmd_new(args: Namespace) -> int:
    if args.host is not None:
        from multiserver_cli.commands.host import remote_new

        return remote_new(args.host, args)
    name = None if args.name is None else check_name(args.name, new=not args.attach_existing)
    if args.attach_existing and name is None:
        raise CliError("-A needs a session name (-n NAME)", 2)
    if not args.detach and not os.isatty(0):
        # Checked before launching: else the session would be left running, held by nobody.
        raise CliError("attach needs a terminal: stdin is not a tty (use -d to start detached)")
    with open_store() as store:
        # Every daemon, whatever --daemon says: a name is one session's across them all.
        view = survey(store)
        plan = plan_new(
            view, name, attach_existing=args.attach_existing, scope=scope_of(_number(args))
        )
        if isinstance(plan, Refused):
            raise CliError(plan.message)
        if isinstance(plan, Found):
            return _attach_found(args, located(plan.session), store)
        _refuse_held(plan)
        from multiserver_cli.attach import _attached  # only a command that attaches loads it

        saved = plan.saved
        argv = args.command or (list(saved.argv) if saved is not None else user_shell())
        if args.cwd:
            cwd = os.path.abspath(args.cwd)
        elif saved is not None:
            cwd = saved.cwd if os.path.isdir(saved.cwd) else os.path.expanduser("~")
        else:
            cwd = os.getcwd()
        size = terminal_size(0) or (24, 80)
        with (
            bounded("new"),
            dial_blocking(_paths(args), start=True, children=False, deadline=deadline()) as client,
        ):
            launched = _launch(
                client,
                plan,
                view,
                argv,
                env=launch_env(os.environ, args.strip_env, args.keep_env),
                cwd=cwd,
                rows=size[0],
                cols=size[1],
                linger=args.linger,
                hold=not args.detach,
            )
            _state.record_new(
                store, launched.child, client.socket_path, client.instance_id, args.window, argv
            )
            if args.detach:
                print(launched.child.name)
                return 0
            assert launched.master is not None
            _track(launched.child.name)
            return _attached.run_attached(
                client,
                launched.child,
                launched.master,
                replay=b"",
                detach_key=args.detach_key,
                redraw=args.redraw,
                say=say,
                close_exited=_closer(store),
                save_screen=_scrollback.screen_saver(
                    store, client.socket_path, client.instance_id, launched.child.id
                ),
            )


def _refuse_held(plan: Create) -> None:
    """A saved session that ``new -A`` would start again, whose daemon died
    under a client that still shows it (``restore.live_holds``): starting
    it would make a second copy."""
    ref = plan.saved.ref if plan.saved is not None else None
    if ref is None:
        return
    from restore import live_holds

    hold = live_holds().get((ref.instance_id, ref.child_id))
    if hold is not None:
        raise CliError(
            f"{plan.name} is held by a client whose daemon died (pid {hold.client_pid}), in"
            " another terminal: detach there (it then ends), then start it again"
        )


def _launch(
    client: SyncClient, plan: Create, view: Survey, argv: list[str], **launch: Any
) -> LaunchResult:
    """Launch under the plan's name. A default name the daemon refuses as
    taken (another ``new`` took it meanwhile) gives way to the next free one,
    NAME_TRIES times at most; an explicit one is the user's and is refused."""
    name = plan.name
    refused: list[str] = []
    while True:
        try:
            return client.launch(argv, name=name, **launch)
        except RequestFailed as exc:
            if exc.errno != errno.EEXIST or plan.explicit or len(refused) + 1 >= NAME_TRIES:
                raise CliError(exc.message) from None
            refused.append(name)
            name = pick_default(view, refused)


def _track(name: str) -> None:
    """In a tmux pane or a kitty window, the layout is saved with this
    session where it is shown (``_layouts.track_pane``, in the background)."""
    if os.environ.get("TMUX") or os.environ.get("KITTY_WINDOW_ID"):
        from multiserver_cli import _layouts

        _layouts.track_pane(name)


def _closer(store: ArrangementStore | None) -> CloseExited:
    return lambda client, child: _state.close_exited(store, client, child)


def cmd_attach(args: Namespace) -> int:
    host, remote_name = split_target(args.name)
    if host is not None:
        from multiserver_cli.commands.host import remote_attach

        return remote_attach(host, remote_name, args)
    if args.relay:  # run through ssh by `attach HOST:NAME` elsewhere
        from multiserver_cli.attach._relay import serve_relayed

        serve_relayed()
    name = check_name(args.name)
    if not is_terminal(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    with open_store() as store:
        resolution = lookup(name, _number(args), "attach", store)
        ended = _saved_end(resolution)
        if ended is not None:
            return _attach_saved_end(store, ended)
        return _attach_found(args, live_or_fail(name, resolution), store)


def _saved_end(resolution: Resolution | Located) -> SessionLeaf | None:
    """The saved leaf of a session whose program had ended, unseen, and
    whose daemon is gone (restore reported it ``ended`` and kept it): its
    saved output is all there is to show."""
    if isinstance(resolution, SavedOnly):
        leaf = resolution.session.leaf
        if leaf is not None and leaf.exit_code is not None:
            return leaf
    return None


def _attach_saved_end(store: ArrangementStore | None, leaf: SessionLeaf) -> int:
    """Show what an ended session showed last, as an exited live one is
    shown, then forget it (a durable close, as ``kill NAME`` does): it has
    been seen."""
    from multiserver_cli.attach import _proxy

    assert leaf.exit_code is not None
    replay = (leaf.notice or b"") + (leaf.scrollback or b"")
    _proxy.show_exited(sys.stdin.fileno(), sys.stdout.fileno(), replay)
    if _state.stage_close_named(store, leaf.name) is not None:
        _state.finish_pending_closes(store)
    say(f"[{leaf.name} {describe_exit(leaf.exit_code)}]", not replay or replay.endswith(b"\n"))
    return exit_status(leaf.exit_code)


def _attach_found(args: Namespace, found: Located, store: ArrangementStore | None) -> int:
    """Attach this terminal to the live session ``found``."""
    from multiserver_cli.attach import _attached

    if not is_terminal(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    name = found.child.name  # the name the user knows it by
    with (
        bounded("attach"),
        dial_blocking(found.socket, children=False, deadline=deadline()) as client,
    ):
        # keep_output: if this client dies before it releases, the daemon
        # still has the output it was about to show.
        (result,) = client.claim([found.child.id], steal=True, keep_output=True)
        if result.error is not None:
            raise CliError(f"cannot attach to {name}: {result.error.message}")
        assert result.child is not None
        child = attrs.evolve(result.child, name=name)
        replay = _state.take_notice(store, name) + result.output
        if result.dropped:
            replay = (
                f"[multiserver: {result.dropped} earlier bytes of {name} were not kept]\r\n".encode()
                + replay
            )
        if result.master is None:
            return _attached.attach_exited(client, child, replay, say, _closer(store))
        _track(name)
        return _attached.run_attached(
            client,
            child,
            result.master,
            replay=replay,
            detach_key=args.detach_key,
            redraw=args.redraw,
            say=say,
            close_exited=_closer(store),
            save_screen=_scrollback.screen_saver(
                store, client.socket_path, client.instance_id, child.id
            ),
        )


# --- ls, peek, kill ------------------------------------------------------------------


def child_json(
    child: ChildInfo, socket: str, instance_id: str, *, saved: bool
) -> dict[str, object]:
    """A session for ``ls --json``; ``saved``: whether a saved session refers to it."""
    return {
        "name": child.name,
        "id": child.id,
        "pid": child.pid,
        "state": child.state,
        "exit_code": child.exit_code,
        # bytes: an argv or cwd that is not UTF-8 escaped (caf\xe9), as `ls` shows it.
        "argv": [escaped(a) for a in child.argv],
        "cwd": escaped(child.cwd),
        "tty": child.tty,
        "held": child.held,
        "buffered_bytes": child.buffered_bytes,
        "dropped_bytes": child.dropped_bytes,
        "started_at": child.started_at,
        "exited_at": child.exited_at,
        "linger": child.linger,
        "socket": socket,
        "daemon_instance": instance_id,
        "saved": saved,
    }


def cmd_ls(args: Namespace) -> int:
    with open_store() as store:
        view = survey(store, _number(args))
    for problem in view.problems:
        print(f"multiserver: {problem}", file=sys.stderr)
    # Each child under the name `attach` takes: its saved session's, if any.
    every = sessions(view)
    rows = [s for s in every if s.child is not None]
    # Programs that ended unseen, their daemon gone: kept until seen (attach, peek).
    ended = [e for s in every if s.child is None and (e := _saved_end(SavedOnly(s)))]
    records = _shown.load()
    waiting = [_waiting(s, records) for s in rows]
    _shown.prune(
        records,
        {(s.instance_id, s.child.id) for s in rows if s.child is not None},
        {d.instance_id for d in view.daemons},
        all_seen=not args.daemon_given and not view.problems,
    )
    remote, remote_problems = _remote_sessions(args)
    for problem in remote_problems:
        print(f"multiserver: {problem}", file=sys.stderr)
    if args.json:
        print_json(
            [_session_json(s, w) for s, w in zip(rows, waiting, strict=True)]
            + [_saved_end_json(leaf) for leaf in ended]
            + [{**r.raw, "host": r.host} for r in remote]
        )
    elif rows or ended or remote:
        daemons = [s.daemon for s in rows] + [r.host for r in remote]
        print(
            ls_table(
                [s.child for s in rows if s.child is not None] + [r.child for r in remote],
                time.time(),
                daemons=daemons if len(set(daemons)) > 1 else None,
                waiting=waiting + [r.waiting for r in remote],
                ended=ended,
            )
        )
    elif not view.problems and not remote_problems:
        print("no sessions", file=sys.stderr)
    # A daemon or a host that could not be read is not "no sessions": say
    # so, and fail.
    return 1 if view.problems or remote_problems else 0


def _remote_sessions(args: Namespace) -> tuple[list[RemoteSession], list[str]]:
    """The sessions of every configured host (none when ``--daemon N``
    narrows ls to a local daemon)."""
    if args.daemon_given:
        return [], []
    from restore import load_hosts

    hosts = load_hosts()
    if not hosts:
        return [], []
    from multiserver_cli._remote import list_hosts

    return list_hosts(list(hosts.values()))


def _waiting(s: Session, records: dict[tuple[str, int], int]) -> tuple[int, int] | None:
    """WAITING of a live session: None while held; else what it wrote since
    its last detach (``_shown``)."""
    c = s.child
    assert c is not None
    if c.held:
        return None
    return _shown.unseen(c.buffered_bytes, c.dropped_bytes, records.get((s.instance_id, c.id), 0))


def _saved_end_json(leaf: SessionLeaf) -> dict[str, object]:
    """An ended session whose daemon is gone, for ``ls --json``: the fields
    of a live one, those only a live child has null, ``saved`` true."""
    ref = leaf.ref
    return {
        "name": leaf.name,
        "id": None,
        "pid": None,
        "state": "exited",
        "exit_code": leaf.exit_code,
        "argv": [escaped(a) for a in leaf.argv],
        "cwd": escaped(leaf.cwd),
        "tty": None,
        "held": False,
        "buffered_bytes": len(leaf.scrollback or b""),
        "dropped_bytes": 0,
        "started_at": leaf.created_at or None,
        "exited_at": None,
        "linger": None,
        "socket": None if ref is None else ref.socket,
        "daemon_instance": None if ref is None else ref.instance_id,
        "saved": True,
        "waiting_bytes": len(leaf.scrollback or b""),
        "waiting_dropped_bytes": 0,
    }


def _session_json(s: Session, waiting: tuple[int, int] | None) -> dict[str, object]:
    assert s.child is not None
    out = child_json(s.child, s.socket, s.instance_id, saved=s.saved)
    out["waiting_bytes"], out["waiting_dropped_bytes"] = waiting or (0, 0)
    return out


def cmd_peek(args: Namespace) -> int:
    host, name = split_target(args.name)
    if host is not None:
        from multiserver_cli.commands.host import remote_peek

        return remote_peek(host, name, args)
    if args.bytes is not None and args.bytes < 0:
        raise CliError("--bytes must be >= 0", 2)
    with open_store() as store:
        resolution = lookup(args.name, _number(args), "peek", store)
        ended = _saved_end(resolution)
        if ended is not None:
            output = ended.scrollback or b""
            n = len(output) if args.bytes is None else min(args.bytes, len(output))
            sys.stdout.buffer.write(output[len(output) - n :])
            sys.stdout.buffer.flush()
            return 0
        found = live_or_fail(args.name, resolution)
    with (
        bounded("peek"),
        dial_blocking(found.socket, children=False, deadline=deadline()) as client,
    ):
        result = client.peek(found.child.id, args.bytes)
    sys.stdout.buffer.write(result.output)
    sys.stdout.buffer.flush()
    return 0


def parse_signal(spec: str) -> int:
    s = spec.upper()
    if s.isdigit():
        num = int(s)
    else:
        s = s if s.startswith("SIG") else "SIG" + s
        try:
            num = int(signal.Signals[s])
        except KeyError:
            raise CliError(f"unknown signal {spec!r}", 2) from None
    if num not in signal.valid_signals() or num == 0:
        raise CliError(f"unknown signal {spec!r}", 2)
    return num


def cmd_kill(args: Namespace) -> int:
    host, name = split_target(args.name)
    if host is not None:
        from multiserver_cli.commands.host import remote_kill

        return remote_kill(host, name, args)
    signum = parse_signal(args.signal) if args.signal else signal.SIGHUP
    only_signal = args.signal is not None
    with open_store() as store:
        _state.finish_pending_closes(store)
        resolution = lookup(args.name, _number(args), "kill", store)
        if isinstance(resolution, SavedOnly) and not only_signal:
            return _forget_saved(store, resolution.session)
        found = live_or_fail(args.name, resolution)
        child = found.child
        # The durable close: staged first, so a crash from here on is finished
        # by the next run (a bare signal closes nothing unless the child ends).
        # A close the store cannot take is not done: ended and unrecorded,
        # the session would be started again by the next restore.
        staged = None if only_signal else _staged(store, found, child, "not killed")
        with (
            bounded("kill"),
            dial_blocking(found.socket, children=False, deadline=deadline()) as client,
        ):
            code = _end(client, child, signum, only_signal)
            if code is None:
                print(
                    f"sent {signal.Signals(signum).name} to {child.name}; it is still running",
                    file=sys.stderr,
                )
                return 0
            if only_signal:
                # It ended of the signal: left uncollected, so a close that
                # cannot be saved now is found (ended) by the next restore.
                staged = _staged(store, found, child, describe_exit(code))
            with contextlib.suppress(RequestFailed):
                client.collect(child.id)
        if staged is not None:
            _state.complete_close(store, staged.name, staged.ref)
    # The kill did what was asked: its status is 0 whatever the signal.
    print(f"{child.name}: {describe_exit(code)}", file=sys.stderr)
    return 0


def _staged(
    store: ArrangementStore | None, found: Located, child: ChildInfo, what: str
) -> SessionLeaf | None:
    """``_state.stage_close``; a store that cannot take the close (or none
    at all) is a CliError that says ``what`` was done."""
    if store is None:
        raise CliError(
            f"{child.name}: {what}; its close cannot be saved (the saved arrangement is"
            " unavailable), and the next restore would start it again"
        )
    try:
        return _state.stage_close(store, found.socket, found.instance_id, child)
    except StoreError as exc:
        raise CliError(
            f"{child.name}: {what}; its close could not be saved ({exc}); the next"
            " restore would start it again"
        ) from None


def _forget_saved(store: ArrangementStore | None, session: Session) -> int:
    """``kill NAME`` of a saved session with no live child: forget it (a
    durable close, which also ends its child should its daemon answer after all)."""
    name = session.name
    try:
        staged = _state.stage_close_named(store, name)
    except StoreError as exc:
        raise CliError(f"{name}: not forgotten: the close could not be saved ({exc})") from None
    if staged is None:
        raise CliError(f"no session named {name!r}")  # forgotten meanwhile
    _state.finish_pending_closes(store)
    if _state.close_pending(store, name):
        raise CliError(
            f"{name}: forgotten, but its daemon did not answer: its program is ended"
            " when it does (by the next multiserver command)"
        )
    print(f"{name}: forgot the saved session ({session.why_not_running})", file=sys.stderr)
    return 0


def _end(client: SyncClient, child: ChildInfo, signum: int, only_signal: bool) -> int | None:
    if child.state != "running":
        return child.exit_code
    # The signal, then the wait for its notice: SIGKILL 3 s later at worst.
    client.deadline = None
    return end_child(client, child.id, signum, escalate=not only_signal)


# --- save -------------------------------------------------------------------------


def cmd_save(args: Namespace) -> int:
    """Refresh every live session's cwd (the foreground process's, where the
    OS tells it) and title (its foreground command) in the arrangement;
    with ``--scrollback``, keep what each session not held by a client
    shows as its scrollback; with ``--every S``, again every S seconds
    (``_saver``); ``--from kitty|tmux``: save that terminal's layout
    instead (``_layouts``)."""
    if args.from_terminal is not None:
        from multiserver_cli import _layouts

        return _layouts.cmd_save_from(args)
    from multiserver_cli import _saver

    saver = _saver.Saver(scrollback=args.scrollback, number=_number(args))
    if args.every is not None:
        if not _saver.MIN_EVERY <= args.every <= _saver.MAX_EVERY:
            raise CliError(
                f"--every must be from {_saver.MIN_EVERY:g} to {_saver.MAX_EVERY:g} seconds", 2
            )
        return _saver.run_every(args.every, saver)
    with _state.open_store() as store:
        if store is None:
            return 1
        report = saver.run_pass(store)
    for problem in report.problems:
        print(f"multiserver: {problem}", file=sys.stderr)
    print(save_summary(report.total, report.live, report.changed, report.outputs), file=sys.stderr)
    return 0
