"""``multiserver restore`` (run it at login): bring back every saved
session within one deadline (``--timeout``): those still running are
claimed where they are, those gone are started again from their saved
command and cwd (``restore``'s engine, other hosts' sessions included);
then what no saved session claimed is adopted (the sweep, ``adopter``),
and ``--open`` opens the saved layout in kitty or tmux. On trio.

One restore at a time: a second one waits (within its own ``--timeout``)
for the first, then reports the first's outcomes as its own. Run after it, it would find
every session attached and report none as relaunched; run at the same
moment, the two would both claim and relaunch the same sessions (the
cause of two logins both failing).
"""

from __future__ import annotations

import contextlib
import os
import sys
from argparse import ArgumentParser, Namespace

from multiserver.internal import printable
from multiserver_cli import _args
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from adopter import SweepRow
    from restore import Arrangement, ArrangementStore, DaemonAttachment, RestoreResult

NAME = "restore"
HELP = "bring back every saved session (run it at login)"
EXAMPLE = "multiserver restore --timeout 5"
# What config.toml decides (_settings.apply: the flag's attribute, or None:
# through its environment variable).
SETTINGS = {
    "restore_timeout": "timeout",
    "buffer_limit": None,
    "strip_env": None,
    "keep_env": None,
}

# A restore that waited for another one (two terminals opening at login run
# two) and must then restore itself (the other left no report: it crashed)
# has what is left of its --timeout, and at least this share of it.
AFTER_WAIT_SHARE = 0.1
RESTORE_LOCK = "restore.lock"
LOCK_POLL = 0.05  # how often a waiting restore tries the lock


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
    """The restore under the restore lock, or, after waiting for another
    one, that one's outcomes (see the module's docstring)."""
    import trio

    from multiserver.internal import LockBusy, ensure_private_dir, state_dir, try_lock
    from multiserver_cli import _state
    from multiserver_cli.commands import _report

    state = ensure_private_dir(state_dir())
    report = state / _report.RESTORE_REPORT
    before = _report.identity(report)
    waited = False
    # --timeout is the whole restore's deadline, a wait for another included.
    bound = args.timeout
    started = trio.current_time()
    lock = state / RESTORE_LOCK
    with trio.move_on_after(bound) as scope:
        while True:
            try:
                lock_fd = try_lock(lock)
                break
            except LockBusy:
                if not waited:
                    _state.warn(f"waiting for another restore{_holder(lock)} to finish")
                waited = True
                await trio.sleep(LOCK_POLL)
    if scope.cancelled_caught:
        raise CliError(
            f"another multiserver restore{_holder(lock)} is still running after {bound:g} s"
            " (--timeout); it brings the sessions back (see: multiserver ls); not restoring"
        )
    if waited:
        left = args.timeout - (trio.current_time() - started)
        args.timeout = max(left, AFTER_WAIT_SHARE * args.timeout)
    try:
        _say_holder(lock_fd)
        if waited and _report.identity(report) != before:
            out = _report.read_report(report)
            if out is not None:
                _state.warn("another restore ran meanwhile; these are its outcomes")
                return _report.show(await _opened(out, args), args.json, args.open == "print")
        out = await _restore(args)
        if out is None:
            return 1
        _report.write_report(report, out)
        # Each session's outcome was said as it came: at a terminal, once.
        return _report.show(await _opened(out, args), args.json, args.open == "print", said=True)
    finally:
        os.close(lock_fd)


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
        try_lock,
        unsafe_socket_dirs,
    )
    from multiserver_cli.commands import _report
    from restore import read_saved

    if args.open is not None:
        return None
    started = time.perf_counter()
    state = ensure_private_dir(state_dir())
    try:
        lock_fd = try_lock(state / RESTORE_LOCK)
    except LockBusy:
        return None
    try:
        if read_saved(state) != [] or find_sockets():
            return None
        if unsafe_socket_dirs():
            return None  # the sweep's to report
        _say_holder(lock_fd)
        if not args.json:
            print(f"restoring 0 sessions of 0 daemons within {args.timeout:g} s", file=sys.stderr)
        seconds = round(time.perf_counter() - started, 4)
        out = {"sessions": [], "sweep": [], "seconds": seconds, "ok": True, "saved": True}
        _report.write_report(state / _report.RESTORE_REPORT, out)
        return _report.show(out, args.json)
    finally:
        os.close(lock_fd)


def _say_holder(lock_fd: int) -> None:
    with contextlib.suppress(OSError):  # who holds it, for one that waits
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, str(os.getpid()).encode(), 0)


def _holder(lock: Path) -> str:
    try:
        pid = int(lock.read_text().strip())
    except (OSError, ValueError):
        return ""
    return f" (pid {pid})"


async def _restore(args: Namespace) -> dict[str, object] | None:
    """The restore itself; its outcomes as ``--json`` prints them (None: the
    store cannot be used, said already)."""
    from multiserver_cli import _state
    from multiserver_cli.commands._report import session_row, sweep_row

    with _state.open_store() as store:
        if store is None:
            return None
        _state.finish_pending_closes(store)
        arrangement = store.load()
        if not args.json:
            _say_restoring(arrangement, args.timeout)
        result, swept = await _restore_and_sweep(arrangement, store, args)
    return {
        "sessions": [session_row(s) for s in result.sessions],
        "sweep": [sweep_row(r) for r in swept if r.action != "none"],
        "seconds": round(result.elapsed, 4),
        "ok": result.ok,
        "saved": result.saved,
    }


def _say_restoring(arrangement: Arrangement, timeout: float) -> None:
    """What is about to be restored, and within how long, for a person."""
    from multiserver_cli._format import plural

    local = [leaf for leaf in arrangement.leaves() if leaf.host is None]
    remote = [leaf for leaf in arrangement.leaves() if leaf.host is not None]
    daemons = len({leaf.ref.socket for leaf in local if leaf.ref is not None})
    hosts = {leaf.host for leaf in remote}
    elsewhere = f" and {plural(len(remote), 'session')} of {plural(len(hosts), 'host')}"
    print(
        f"restoring {plural(len(local), 'session')} of {plural(daemons, 'daemon')}"
        f"{elsewhere if remote else ''} within {timeout:g} s",
        file=sys.stderr,
    )


async def _restore_and_sweep(
    arrangement: Arrangement, store: ArrangementStore, args: Namespace
) -> tuple[RestoreResult, list[SweepRow]]:
    """``arrangement`` restored within ``--timeout``, each outcome said as it
    comes (unless ``--json``); late arrivals adopted once every session is
    built; then the sweep of what nobody claimed, while the claims go back.
    The restore's result, and the rows of the late arrivals and the sweep."""
    import trio

    from adopter import SWEEP_BOUND, StoreSink, adopt_late, sweep
    from multiserver import launch_env
    from restore import LateArrival, Options, RestoredSession, release_claims, restore_arrangement

    sink = StoreSink(store)
    late_rows: list[SweepRow] = []
    options = Options(relaunch=not args.no_relaunch, relaunch_ended=args.relaunch_ended)

    def progress(s: RestoredSession) -> None:
        if not args.json:
            print(printable(f"  {s.leaf.name}: {s.outcome} ({s.detail})"), file=sys.stderr)

    def arrived(att: DaemonAttachment) -> None:
        if not args.json:
            print(f"  {printable(_arrival_line(att))}", file=sys.stderr)

    async with trio.open_nursery() as nursery:
        # Late arrivals (a daemon's partial attach, a host's answer)
        # wait until every session is built: until then a leaf may
        # still reference the late child (its relaunch is not saved
        # yet), and adopting it would be refused.
        late: list[LateArrival] = []
        built = False

        async def adopt(att: LateArrival) -> None:
            late_rows.extend(await adopt_late(att, sink))

        def on_late(att: LateArrival) -> None:
            if built:
                nursery.start_soon(adopt, att)
            else:
                late.append(att)

        result = await restore_arrangement(
            arrangement,
            nursery=nursery,
            timeout=args.timeout,
            options=options,
            store=store,
            hold=False,
            keep_output=True,
            env=launch_env(os.environ, args.strip_env, args.keep_env),
            progress=progress,
            on_arrival=arrived,
            on_late=on_late,
        )
        built = True
        for att in late:
            await adopt(att)
        # Only now, with the partial attach phase resolved and every
        # session built, may the sweep take what nobody claimed. Claims
        # go back meanwhile, so `multiserver attach NAME` works
        # afterwards (their output stays in the daemons: keep_output);
        # the sweep leaves them alone, as they are saved sessions.
        wedged = frozenset(t.socket for t in result.phase.timed_out)

        async def give_back() -> None:
            with trio.CancelScope(shield=True):
                await release_claims(result)

        async with trio.open_nursery() as both:
            both.start_soon(give_back)
            swept = await sweep(sink, adopt=True, bound=SWEEP_BOUND, skip=wedged)
        # Partial attaches to wedged daemons are abandoned here.
        nursery.cancel_scope.cancel()
    return result, [*late_rows, *swept.rows]


def _arrival_line(att: DaemonAttachment) -> str:
    """One daemon's answer to the partial attach, for the live progress."""
    n = len(att.target.leaves)
    what = f"{os.path.basename(att.target.socket)} ({n} session{'' if n == 1 else 's'})"
    if att.client is None:  # not reached: every leaf has the same reason
        why = att.gone[0].reason if att.gone else (att.error or "not reached")
        return f"{what}: {why}"
    if att.error is not None:
        return f"{what}: answered, then failed: {att.error}"
    return f"{what}: answered in {att.elapsed:.3f} s"


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
