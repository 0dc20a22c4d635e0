"""``multiserver restore`` (run it at login) and ``multiserver orphans``: the
commands that talk to many daemons at once, on trio."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import trio

from adopter import SWEEP_BOUND, StoreSink, SweepRow, adopt_late, sweep
from multiserver import LockBusy, ensure_private_dir, launch_env, state_dir, try_lock
from multiserver_cli import _state
from multiserver_cli._errors import CliError
from multiserver_cli._format import plural, print_json, table
from multiserver_cli._sessions import scan
from restore import (
    ArrangementStore,
    DaemonAttachment,
    LateArrival,
    Options,
    RestoredSession,
    release_claims,
    restore_arrangement,
)


def _row(s: RestoredSession) -> dict[str, object]:
    return {
        "name": s.leaf.name,
        "outcome": s.outcome,
        "daemon": s.daemon,
        "detail": s.detail,
        "exit_code": s.exit_code,
        "seconds": round(s.elapsed, 4),
    }


def _sweep_row(r: SweepRow) -> dict[str, object]:
    return {
        "socket": r.socket,
        "state": r.state,
        "action": r.action,
        "name": r.name,
        "detail": r.detail,
        "exit_code": r.exit_code,
    }


def _arrival_line(att: DaemonAttachment) -> str:
    """One daemon's answer to the partial attach, for the live progress."""
    n = len(att.target.leaves)
    what = f"{Path(att.target.socket).name} ({n} session{'' if n == 1 else 's'})"
    if att.client is None:  # not reached: every leaf has the same reason
        why = att.gone[0].reason if att.gone else (att.error or "not reached")
        return f"{what}: {why}"
    if att.error is not None:
        return f"{what}: answered, then failed: {att.error}"
    return f"{what}: answered in {att.elapsed:.3f} s"


# How long a restore waits for another one to finish, at least (and three
# times its own --timeout): two terminals opening at login run two.
RESTORE_WAIT = 60.0
RESTORE_LOCK = "restore.lock"
# The outcomes of the last restore, for one that waited for it.
RESTORE_REPORT = "restore-report.json"
LOCK_POLL = 0.05  # how often a waiting restore tries the lock


async def cmd_restore(args: Namespace) -> int:
    """One restore at a time: a second one waits (bounded) for the first,
    then reports the first's outcomes as its own. Run after it, it would
    find every session attached and report none as relaunched, and run at
    the same moment, the two would both claim and relaunch the same
    sessions (the cause of two logins both failing)."""
    if args.timeout <= 0:
        raise CliError("--timeout must be > 0", 2)
    state = ensure_private_dir(state_dir())
    report = state / RESTORE_REPORT
    before = _identity(report)
    waited = False
    bound = max(RESTORE_WAIT, 3 * args.timeout)
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
            f"another multiserver restore is still running after {bound:g} s; not restoring"
        )
    try:
        with contextlib.suppress(OSError):  # who holds it, for one that waits
            os.ftruncate(lock_fd, 0)
            os.pwrite(lock_fd, str(os.getpid()).encode(), 0)
        if waited and _identity(report) != before:
            out = _read_report(report)
            if out is not None:
                _state.warn("another restore ran meanwhile; these are its outcomes")
                return _show(await _opened(out, args), args)
        out = await _restore(args)
        if out is None:
            return 1
        _write_report(report, out)
        return _show(await _opened(out, args), args)
    finally:
        os.close(lock_fd)


def _holder(lock: Path) -> str:
    try:
        pid = int(lock.read_text().strip())
    except (OSError, ValueError):
        return ""
    return f" (pid {pid})"


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _write_report(path: Path, out: dict[str, object]) -> None:
    """Whole or not at all (another restore may read it the moment the lock
    is free); a report that cannot be written costs only the waiter's copy."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with open(fd, "w") as f:
            json.dump(out, f)
        os.replace(tmp, path)
    except OSError as exc:
        _state.warn(f"could not keep the restore's report for a restore that waits: {exc}")
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _read_report(path: Path) -> dict[str, object] | None:
    try:
        with open(path) as f:
            out = json.load(f)
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) and isinstance(out.get("sessions"), list) else None


async def _restore(args: Namespace) -> dict[str, object] | None:
    """The restore itself; its outcomes as ``--json`` prints them (None: the
    store cannot be used, said already)."""
    late_rows: list[SweepRow] = []
    with _state.open_store() as store:
        if store is None:
            return None
        _state.finish_pending_closes(store)
        arrangement = store.load()
        local = [leaf for leaf in arrangement.leaves() if leaf.host is None]
        remote = [leaf for leaf in arrangement.leaves() if leaf.host is not None]
        sink = StoreSink(store)
        daemons = len({leaf.ref.socket for leaf in local if leaf.ref is not None})
        if not args.json:
            hosts = {leaf.host for leaf in remote}
            elsewhere = f" and {plural(len(remote), 'session')} of {plural(len(hosts), 'host')}"
            print(
                f"restoring {plural(len(local), 'session')} of {plural(daemons, 'daemon')}"
                f"{elsewhere if remote else ''} within {args.timeout:g} s",
                file=sys.stderr,
            )
        options = Options(relaunch=not args.no_relaunch, relaunch_ended=args.relaunch_ended)

        def progress(s: RestoredSession) -> None:
            if not args.json:
                print(f"  {s.leaf.name}: {s.outcome} ({s.detail})", file=sys.stderr)

        def arrived(att: DaemonAttachment) -> None:
            if not args.json:
                print(f"  {_arrival_line(att)}", file=sys.stderr)

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
    extra = [r for r in [*late_rows, *swept.rows] if r.action != "none"]
    return {
        "sessions": [_row(s) for s in result.sessions],
        "sweep": [_sweep_row(r) for r in extra],
        "seconds": round(result.elapsed, 4),
        "ok": result.ok,
        "saved": result.saved,
    }


async def _opened(out: dict[str, Any], args: Namespace) -> dict[str, Any]:
    """``--open``: every session is built and its claim given back; the
    layout is opened, each pane attaching to its session. ``out`` with what
    was opened (``opened``: a line each) and whether it could be."""
    if args.open is None:
        return out
    with _state.open_store() as store:
        if store is None:
            lines = ["layout not opened: the saved arrangement cannot be read"]
        else:
            # Held: by a client now, or (its daemon dead) by the restore's word.
            held = {str(r["name"]) for r in out["sessions"] if r["outcome"] == "held"}
            lines = await trio.to_thread.run_sync(_open_layout, store, args, held)
    ok = not any(line.startswith("layout not opened") for line in lines)
    return {**out, "opened": lines, "opened_ok": ok}


def _show(out: dict[str, Any], args: Namespace) -> int:
    """Print a restore's outcomes; its exit status."""
    status = 0 if out.get("ok") and out.get("saved", True) and out.get("opened_ok", True) else 1
    if not args.json:
        for line in out.get("opened", []):
            print(f"  {line}", file=sys.stderr)
    if not out.get("saved", True):
        _state.warn(
            "the store did not take every outcome (see each session's detail);"
            " the next restore settles them"
        )
    if args.json:
        print_json(out)
        return status
    rows = out["sessions"]
    table_rows = [
        [
            str(r["name"]),
            str(r["outcome"]),
            Path(str(r["daemon"])).name or "-",
            str(r["detail"]),
            f"{r['seconds']:.3f}s",
        ]
        for r in rows
    ]
    table_rows += [
        [
            str(r["name"] or "-"),
            f"sweep: {r['action']}",
            _daemon_label(str(r["socket"])),
            str(r["detail"]),
            "",
        ]
        for r in out["sweep"]
    ]
    if table_rows:
        print(table(["NAME", "OUTCOME", "DAEMON", "DETAIL", "TIME"], table_rows))
    else:
        print("nothing to restore", file=sys.stderr)
    return status


def _daemon_label(socket: str) -> str:
    """A sweep row's daemon for a person: its socket's file name, after
    ``HOST:`` for a daemon on another host (``db1:multiserver-daemon-1.socket``)."""
    host, sep, path = socket.partition(":")
    if sep and not socket.startswith("/"):
        return f"{host}:{Path(path).name}"
    return Path(socket).name


def _held(store: ArrangementStore) -> set[str]:
    """The saved sessions a client holds now (their daemons say so)."""
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

    arrangement = store.load()
    try:
        ops, lines = _layouts.open_layout(arrangement, args.open, held | _held(store), args)
    except CliError as exc:
        # The sessions are restored all the same: say it, report them.
        return [f"layout not opened: {exc}"]
    return [*lines, f"opened {plural(len(ops), 'pane')} in {args.open}"]


async def cmd_orphans(args: Namespace) -> int:
    """What a sweep would do (``--adopt``: do it)."""
    with _state.open_store() as store:
        if store is None:
            return 1
        report = await sweep(StoreSink(store), adopt=args.adopt, bound=SWEEP_BOUND)
    if args.json:
        print_json([_sweep_row(r) for r in report.rows])
    elif report.rows:
        print(
            table(
                ["SOCKET", "STATE", "ACTION", "NAME", "DETAIL"],
                [
                    [Path(r.socket).name, r.state, r.action, r.name or "-", r.detail]
                    for r in report.rows
                ],
            )
        )
    else:
        print("no daemons found", file=sys.stderr)
    return 0
