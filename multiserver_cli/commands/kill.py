"""``multiserver kill NAME``: end a session (SIGHUP, then SIGKILL after
3 s) and forget its saved session, a durable close that a crash half-way
cannot undo (``_state``); ``-s SIGNAL`` sends that signal only. A saved
session with no live child is forgotten; ``HOST:NAME`` through ssh."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver.internal import printable
from multiserver_cli import _args
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver import ChildInfo, SyncClient
    from multiserver_cli._names import Session
    from multiserver_cli._sessions import Located
    from restore import ArrangementStore, Host, SessionLeaf

NAME = "kill"
HELP = "end a session (SIGHUP, then SIGKILL after 3 s) and forget it"
EXAMPLE = "multiserver kill -s INT build"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "-s", "--signal", metavar="SIGNAL", help="send this signal only (e.g. INT, TERM, 9)"
    )
    p.add_argument("name", metavar="NAME")


def parse_signal(spec: str) -> int:
    """``INT``, ``SIGINT`` or ``2`` -> the signal's number; CliError (status
    2) for one this system does not have."""
    import signal

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


def run(args: Namespace) -> int:
    from multiserver_cli._names import split_target

    host, name = split_target(args.name)
    if host is not None:
        return _kill_there(host, name, args)
    import contextlib
    import signal

    from multiserver import RequestFailed, describe_exit
    from multiserver_cli import _saved, _state
    from multiserver_cli._dial import dial
    from multiserver_cli._names import SavedOnly
    from multiserver_cli._sessions import bounded, deadline, live_or_fail, lookup

    signum = parse_signal(args.signal) if args.signal else signal.SIGHUP
    only_signal = args.signal is not None
    with _saved.open_saved() as saved:
        # A kill changes the store: open it (which finishes closes a crash
        # left pending) before looking the name up.
        store = saved.store()
        _state.finish_pending_closes(store)
        resolution = lookup(args.name, _args.only_daemon(args), "kill", saved)
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
            dial(found.socket, children=False, deadline=deadline()) as client,
        ):
            code = _end(client, child, signum, only_signal)
            if code is None:
                print(
                    printable(
                        f"sent {signal.Signals(signum).name} to {child.name}; it is still running"
                    ),
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
    print(printable(f"{child.name}: {describe_exit(code)}"), file=sys.stderr)
    return 0


def _kill_there(host_name: str, name: str, args: Namespace) -> int:
    """``kill HOST:NAME``: the host's own kill, its output passed on; its
    saved session here goes too, unless only a signal was sent."""
    from multiserver_cli._remote import forget_made, host_of, passed
    from multiserver_cli._sessions import check_name
    from restore import run_remote

    host = host_of(host_name)
    extra = [] if args.signal is None else ["-s", str(args.signal)]
    done = run_remote(host, ["kill", *extra, check_name(name)], timeout=host.timeout)
    if done.returncode != 0 and args.signal is None and _gone_there(host, name):
        # Saved here, gone there (its grace window elapsed): forgotten, as
        # `kill NAME` forgets a saved session whose program is gone.
        forget_made(f"{host_name}:{name}")
        print(
            printable(f"{host_name}:{name}: forgot the saved session (gone from {host_name})"),
            file=sys.stderr,
        )
        return 0
    status = passed(done, host_name)
    if status == 0 and args.signal is None:
        forget_made(f"{host_name}:{name}")
    return status


def _gone_there(host: Host, name: str) -> bool:
    """Whether ``HOST:NAME`` is saved here and its host, asked, does not
    have it."""
    from multiserver_cli import _saved
    from multiserver_cli._remote import ask_host

    with _saved.open_saved() as saved:
        if saved.find(f"{host.name}:{name}") is None:
            return False
    answer = ask_host(host, host.timeout)
    return answer.kind == "listed" and name not in answer.sessions


def _staged(
    store: ArrangementStore | None, found: Located, child: ChildInfo, what: str
) -> SessionLeaf | None:
    """``_state.stage_close``; a store that cannot take the close (or none
    at all) is a CliError that says ``what`` was done."""
    from multiserver_cli import _state
    from restore import StoreError

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
    from multiserver_cli import _state
    from restore import StoreError

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
    print(
        printable(f"{name}: forgot the saved session ({session.why_not_running})"), file=sys.stderr
    )
    return 0


def _end(client: SyncClient, child: ChildInfo, signum: int, only_signal: bool) -> int | None:
    from multiserver_cli._state import end_child

    if child.state != "running":
        return child.exit_code
    # The signal, then the wait for its notice: SIGKILL 3 s later at worst.
    client.deadline = None
    return end_child(client, child.id, signum, escalate=not only_signal)
