"""``multiserver restore`` (run it at login): bring back every saved
session within one deadline (``--timeout``): those still running are
claimed where they are, those gone are started again from their saved
command and cwd, other hosts' sessions included; then what no saved
session claimed is adopted; and ``--open`` opens the saved layout in kitty
or tmux. On trio.

The procedure is the library's, the one a terminal app runs at its launch
(``adopter.open_login``: the restore lock, the restore, late arrivals, the
sweep, the claims given back); this command shows its events as they come
and then the outcomes. One restore at a time: a second one waits (within
its own ``--timeout``) for the first, then reports the first's outcomes as
its own (``restore._restore_lock`` says why).
"""

from __future__ import annotations

import os
import sys
from argparse import ArgumentParser, Namespace

from multiserver.internal import printable
from multiserver_cli import _args
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from adopter import Arrived, LoginEvent
    from restore import ArrangementStore

NAME = "restore"
HELP = "bring back every saved session (run it at login)"
EXAMPLE = "multiserver restore --timeout 5"
# What config.toml decides (_settings.apply: the flag's attribute, or None:
# through its environment variable).
SETTINGS = {
    "restore_timeout": "timeout",
    "buffer_limit": None,
    "share_size": None,
    "strip_env": None,
    "keep_env": None,
}


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        action=_args.SettingFlag,
        setting="restore_timeout",
        default=None,  # config.toml's restore_timeout, else 10
        metavar="S",
        help="the whole restore's deadline, in seconds (default 10, or config.toml's"
        " restore_timeout)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="the report as one JSON object (sessions, sweep, seconds, ok)",
    )
    p.add_argument(
        "--no-relaunch",
        action="store_true",
        help="report sessions whose program is gone (outcome expired); start nothing",
    )
    p.add_argument(
        "--relaunch-ended",
        action="store_true",
        help="start sessions whose program had exited again",
    )
    p.add_argument(
        "--open",
        choices=["kitty", "tmux", "print"],
        help="then open the saved layout (windows, tabs, splits) in kitty or tmux, each pane"
        " attached to its session; print: print it as WezTerm commands",
    )
    p.add_argument(
        "--steal",
        action="store_true",
        help="--open: give sessions a client holds a pane too (attaching takes them)",
    )
    _args.to_option(p)
    _args.env_options(p)


async def run(args: Namespace) -> int:
    """The login procedure (``adopter.open_login``), its events shown as
    they come; then ``--open``, still under the restore lock, and the
    outcomes (see the module's docstring)."""
    from adopter import Done, LockTimedOut, StoreUnavailable, open_login
    from multiserver import launch_env
    from multiserver_cli import _state
    from multiserver_cli.commands import _report
    from restore import Options

    options = Options(relaunch=not args.no_relaunch, relaunch_ended=args.relaunch_ended)
    env = launch_env(os.environ, args.strip_env, args.keep_env)
    status = 1
    last: LoginEvent | None = None
    async with open_login(
        timeout=args.timeout, options=options, env=env, before_restore=_finish_closes
    ) as events:
        async for event in events:
            _show(event, args.json)
            last = event
        if isinstance(last, Done):
            if not last.ran_here:
                _state.warn("another restore ran meanwhile; these are its outcomes")
            out = await _opened(last.report.as_json(), args)
            # Each session's outcome was said as it came (if restored here):
            # at a terminal, once.
            status = _report.show(out, args.json, args.open == "print", said=last.ran_here)
    if isinstance(last, LockTimedOut):
        raise CliError(
            f"another multiserver restore{_pid(last.holder)} is still running after"
            f" {last.timeout:g} s (--timeout); it brings the sessions back (see: multiserver"
            " ls); not restoring"
        )
    assert isinstance(last, Done | StoreUnavailable)
    return status


def quick(args: Namespace) -> int | None:
    """``restore`` with nothing to do, without trio and the store's
    converter (at login, every time, on a machine that keeps no session):
    no session saved, no close pending and no daemon socket for the sweep.
    None when there is something to do (or another restore runs, or
    ``--open``): ``run`` does it."""
    import time

    from multiserver.internal import (
        LockBusy,
        ensure_private_dir,
        find_sockets,
        state_dir,
        unsafe_socket_dirs,
    )
    from multiserver_cli.commands import _report
    from restore import keep_restore_report, read_saved, take_restore_lock

    if args.open is not None:
        return None
    started = time.perf_counter()
    state = ensure_private_dir(state_dir())
    try:
        lock_fd = take_restore_lock(state)
    except LockBusy:
        return None
    try:
        if read_saved(state) != [] or find_sockets():
            return None
        if unsafe_socket_dirs():
            return None  # the sweep's to report
        if not args.json:
            print(_restoring(0, 0, 0, 0, args.timeout), file=sys.stderr)
        seconds = round(time.perf_counter() - started, 4)
        out = {"sessions": [], "sweep": [], "seconds": seconds, "ok": True, "saved": True}
        try:
            keep_restore_report(state, out)
        except OSError as exc:
            _report.not_kept(exc)
        return _report.show(out, args.json)
    finally:
        os.close(lock_fd)


def _finish_closes(store: ArrangementStore) -> list[str]:
    """The closes a crash left pending, finished before the restore (the
    login's ``before_restore``); the lines to say."""
    from multiserver_cli import _state

    lines: list[str] = []
    _state.finish_pending_closes(store, say=lines.append)
    return lines


def _show(event: LoginEvent, as_json: bool) -> None:
    """One step of the login for a person, on stderr: what could not be done
    always; the progress unless ``--json``."""
    from adopter import (
        Arrived,
        ReportNotKept,
        Restoring,
        SessionRestored,
        StoreUnavailable,
        StoreWarning,
        WaitingForLock,
        Warned,
    )
    from multiserver_cli import _state
    from multiserver_cli.commands import _report

    if isinstance(event, WaitingForLock):
        _state.warn(f"waiting for another restore{_pid(event.holder)} to finish")
    elif isinstance(event, StoreWarning | Warned):
        _state.warn(event.text)
    elif isinstance(event, StoreUnavailable):
        _state.warn(f"saved arrangement unavailable: {event.error}")
    elif isinstance(event, ReportNotKept):
        _report.not_kept(event.error)
    elif as_json:
        return
    elif isinstance(event, Restoring):
        e = event
        print(_restoring(e.sessions, e.daemons, e.remote, e.hosts, e.timeout), file=sys.stderr)
    elif isinstance(event, Arrived):
        print(f"  {printable(_arrival_line(event))}", file=sys.stderr)
    elif isinstance(event, SessionRestored):
        r = event.row
        print(printable(f"  {r.name}: {r.outcome} ({r.detail})"), file=sys.stderr)


def _pid(holder: int | None) -> str:
    return "" if holder is None else f" (pid {holder})"


def _restoring(sessions: int, daemons: int, remote: int, hosts: int, timeout: float) -> str:
    """What is about to be restored, and within how long, for a person."""
    from multiserver_cli._format import plural

    elsewhere = f" and {plural(remote, 'session')} of {plural(hosts, 'host')}" if remote else ""
    return (
        f"restoring {plural(sessions, 'session')} of {plural(daemons, 'daemon')}"
        f"{elsewhere} within {timeout:g} s"
    )


def _arrival_line(event: Arrived) -> str:
    """One daemon's answer to the partial attach, for the live progress."""
    n = event.sessions
    what = f"{os.path.basename(event.socket)} ({n} session{'' if n == 1 else 's'})"
    if not event.reached:  # every leaf has the same reason
        return f"{what}: {event.error}"
    if event.error is not None:
        return f"{what}: answered, then failed: {event.error}"
    return f"{what}: answered in {event.elapsed:.3f} s"


async def _opened(out: dict[str, Any], args: Namespace) -> dict[str, Any]:
    """``--open``: every session is built and its claim given back; the
    layout is opened, each pane attaching to its session. ``out`` with what
    was opened (``opened``: a line each) and whether it could be."""
    if args.open is None:
        return out
    import trio

    from multiserver_cli import _state

    with _state.open_store() as store:
        if store is None:
            lines = ["layout not opened: the saved arrangement cannot be read"]
        else:
            # Held: by a client now, or (its daemon dead) by the restore's word.
            held = {str(r["name"]) for r in out["sessions"] if r["outcome"] == "held"}
            lines = await trio.to_thread.run_sync(_open_layout, store, args, held)
    ok = not any(line.startswith("layout not opened") for line in lines)
    return {**out, "opened": lines, "opened_ok": ok}


def _held(store: ArrangementStore) -> set[str]:
    """The saved sessions a client holds now (their daemons say so)."""
    from multiserver_cli._sessions import scan

    where = {
        (leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id): leaf.name
        for leaf in store.load().leaves()
        if leaf.ref is not None
    }
    return {
        where[key]
        for d in scan().daemons
        for c in d.children
        if c.held and (key := (str(d.socket), d.instance_id, c.id)) in where
    }


def _open_layout(store: ArrangementStore, args: Namespace, held: set[str]) -> list[str]:
    """``restore --open``: the saved layout opened in a terminal; a line for
    what was opened and for each session left out (``held``, and those a
    client holds now)."""
    from multiserver_cli import _layouts
    from multiserver_cli._format import plural

    arrangement = store.load()
    try:
        ops, lines = _layouts.open_layout(arrangement, args.open, held | _held(store), args)
    except CliError as exc:
        # The sessions are restored all the same: say it, report them.
        return [f"layout not opened: {exc}"]
    if args.open == "print":  # nothing opened: the commands are printed, for a person to run
        return [*lines, f"printed the commands for {plural(len(ops), 'pane')}"]
    return [*lines, f"opened {plural(len(ops), 'pane')} in {args.open}"]
