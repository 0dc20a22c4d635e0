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
    launch_env,
)
from multiserver_cli import _shown, _state
from multiserver_cli._errors import CliError
from multiserver_cli._format import ls_table, print_json, save_summary
from multiserver_cli._hosts import split_target
from multiserver_cli._names import (
    NAME_TRIES,
    Create,
    Found,
    Refused,
    SavedOnly,
    Session,
    Survey,
    pick_default,
    plan_new,
    sessions,
)
from multiserver_cli._sessions import (
    REQUEST_TIMEOUT,
    Located,
    check_name,
    find_session,
    live_or_fail,
    located,
    lookup,
    scan,
    scope_of,
    survey,
)
from multiserver_cli._state import end_child, open_store
from restore import ArrangementStore, RestorationRef

if TYPE_CHECKING:
    from multiserver_cli._attach import CloseExited
    from multiserver_cli._remote import RemoteSession


def say(line: str, at_line_start: bool = False) -> None:
    """A status line for the person at the terminal, on a line of its own
    (a new line first unless the output shown last ended one)."""
    if not os.isatty(1):
        os.write(sys.stdout.fileno(), f"{line}\n".encode())
        return
    lead = "\r" if at_line_start else "\r\n"
    os.write(sys.stdout.fileno(), (lead + line + "\r\n").encode())


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
    with bounded("daemon"), dial_blocking(_paths(args), start=True, deadline=deadline()) as client:
        print(client.socket_path)
    return 0


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
        from multiserver_cli._remote_cmd import remote_new

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
        from multiserver_cli import _attach  # only a command that attaches loads it

        saved = plan.saved
        argv = args.command or (list(saved.argv) if saved is not None else user_shell())
        if args.cwd:
            cwd = os.path.abspath(args.cwd)
        elif saved is not None:
            cwd = saved.cwd if os.path.isdir(saved.cwd) else os.path.expanduser("~")
        else:
            cwd = os.getcwd()
        size = _attach.terminal_size(0) or (24, 80)
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
            return _attach.run_attached(
                client,
                launched.child,
                launched.master,
                replay=b"",
                detach_key=args.detach_key,
                redraw=args.redraw,
                say=say,
                close_exited=_closer(store),
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
        from multiserver_cli._remote_cmd import remote_attach

        return remote_attach(host, remote_name, args)
    name = check_name(args.name)
    if not os.isatty(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    with open_store() as store:
        return _attach_found(args, find_session(name, _number(args), "attach", store), store)


def _attach_found(args: Namespace, found: Located, store: ArrangementStore | None) -> int:
    """Attach this terminal to the live session ``found``."""
    from multiserver_cli import _attach

    if not os.isatty(0):
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
            return _attach.attach_exited(client, child, replay, say, _closer(store))
        _track(name)
        return _attach.run_attached(
            client,
            child,
            result.master,
            replay=replay,
            detach_key=args.detach_key,
            redraw=args.redraw,
            say=say,
            close_exited=_closer(store),
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
    rows = [s for s in sessions(view) if s.child is not None]
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
            + [{**r.raw, "host": r.host} for r in remote]
        )
    elif rows or remote:
        daemons = [s.daemon for s in rows] + [r.host for r in remote]
        print(
            ls_table(
                [s.child for s in rows if s.child is not None] + [r.child for r in remote],
                time.time(),
                daemons=daemons if len(set(daemons)) > 1 else None,
                waiting=waiting + [r.waiting for r in remote],
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
    from multiserver_cli._hosts import load_hosts

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


def _session_json(s: Session, waiting: tuple[int, int] | None) -> dict[str, object]:
    assert s.child is not None
    out = child_json(s.child, s.socket, s.instance_id, saved=s.saved)
    out["waiting_bytes"], out["waiting_dropped_bytes"] = waiting or (0, 0)
    return out


def cmd_peek(args: Namespace) -> int:
    host, name = split_target(args.name)
    if host is not None:
        from multiserver_cli._remote_cmd import remote_peek

        return remote_peek(host, name, args)
    if args.bytes is not None and args.bytes < 0:
        raise CliError("--bytes must be >= 0", 2)
    with open_store() as store:
        found = find_session(args.name, _number(args), "peek", store)
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
        from multiserver_cli._remote_cmd import remote_kill

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
        staged = (
            None
            if only_signal
            else _state.stage_close(store, found.socket, found.instance_id, child)
        )
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
                staged = _state.stage_close(store, found.socket, found.instance_id, child)
            with contextlib.suppress(RequestFailed):
                client.collect(child.id)
        if staged is not None:
            _state.complete_close(store, staged.name, staged.ref)
    # The kill did what was asked: its status is 0 whatever the signal.
    print(f"{child.name}: {describe_exit(code)}", file=sys.stderr)
    return 0


def _forget_saved(store: ArrangementStore | None, session: Session) -> int:
    """``kill NAME`` of a saved session with no live child: forget it (a
    durable close, which also ends its child should its daemon answer after all)."""
    name = session.name
    if _state.stage_close_named(store, name) is None:
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


@attrs.frozen
class _Refresh:
    cwd: str | None
    title: str | None


def cmd_save(args: Namespace) -> int:
    """Refresh every live session's cwd (the foreground process's, where the
    OS tells it) and title (its foreground command) in the arrangement;
    ``--from kitty|tmux``: save that terminal's layout (``_layouts``)."""
    if args.from_terminal is not None:
        from multiserver_cli import _layouts

        return _layouts.cmd_save_from(args)
    refresh: dict[tuple[str, str, int], _Refresh] = {}
    for d in scan(_number(args), foreground=True).daemons:
        for c in d.children:
            title = " ".join(map(escaped, c.fg_argv)) if c.fg_argv else None
            refresh[(str(d.socket), d.instance_id, c.id)] = _Refresh(c.fg_cwd, title)
    changed = live = total = 0
    with _state.open_store() as store:
        if store is None:
            return 1
        arrangement = store.load()
        for leaf in arrangement.leaves():
            total += 1
            ref: RestorationRef | None = leaf.ref
            if ref is None:
                continue
            r = refresh.get((ref.socket, ref.instance_id, ref.child_id))
            if r is None:
                continue
            live += 1
            new = attrs.evolve(leaf, cwd=r.cwd or leaf.cwd, title=r.title or leaf.title)
            if new != leaf:
                store.update_session(new)
                changed += 1
    print(save_summary(total, live, changed), file=sys.stderr)
    return 0
