"""``multiserver restore`` (run it at login) and ``multiserver orphans``: the
commands that talk to many daemons at once, on trio."""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from pathlib import Path

import trio

from adopter import SWEEP_BOUND, StoreSink, SweepRow, adopt_late, sweep
from multiserver import launch_env
from multiserver_cli import _state
from multiserver_cli._errors import CliError
from multiserver_cli._format import plural, print_json, table
from multiserver_cli._sessions import scan
from restore._build import RestoredSession
from restore._partial import DaemonAttachment
from restore._plan import Options
from restore._restore import release_claims, restore_arrangement
from restore._store import ArrangementStore


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


async def cmd_restore(args: Namespace) -> int:
    if args.timeout <= 0:
        raise CliError("--timeout must be > 0", 2)
    late_rows: list[SweepRow] = []
    with _state.open_store() as store:
        if store is None:
            return 1
        _state.finish_pending_closes(store)
        arrangement = store.load()
        total = len(arrangement.leaves())
        sink = StoreSink(store)
        daemons = len({leaf.ref.socket for leaf in arrangement.leaves() if leaf.ref is not None})
        if not args.json:
            print(
                f"restoring {plural(total, 'session')} of {plural(daemons, 'daemon')}"
                f" within {args.timeout:g} s",
                file=sys.stderr,
            )

        def progress(s: RestoredSession) -> None:
            if not args.json:
                print(f"  {s.leaf.name}: {s.outcome} ({s.detail})", file=sys.stderr)

        def arrived(att: DaemonAttachment) -> None:
            if not args.json:
                print(f"  {_arrival_line(att)}", file=sys.stderr)

        options = Options(relaunch=not args.no_relaunch, relaunch_ended=args.relaunch_ended)
        async with trio.open_nursery() as nursery:
            # Late arrivals wait until every session is built: until then a
            # leaf may still reference the late child (its relaunch is not
            # saved yet), and adopting it would be refused.
            late: list[DaemonAttachment] = []
            built = False

            async def adopt(att: DaemonAttachment) -> None:
                late_rows.extend(await adopt_late(att, sink))

            def on_late(att: DaemonAttachment) -> None:
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
        opened: list[str] = []
        if args.open is not None:
            # Every session is built and its claim given back: open the
            # layout, each pane attaching to its session.
            opened = await trio.to_thread.run_sync(_open_layout, store, args)
    rows = [_row(s) for s in result.sessions]
    opened_ok = not any(line.startswith("layout not opened") for line in opened)
    if args.open is not None and not args.json:
        for line in opened:
            print(f"  {line}", file=sys.stderr)
    extra = [r for r in [*late_rows, *swept.rows] if r.action != "none"]
    if args.json:
        out: dict[str, object] = {
            "sessions": rows,
            "sweep": [_sweep_row(r) for r in extra],
            "seconds": round(result.elapsed, 4),
            "ok": result.ok,
        }
        if args.open is not None:
            out["opened"] = opened
        print_json(out)
        return 0 if result.ok and opened_ok else 1
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
        [r.name or "-", f"sweep: {r.action}", Path(r.socket).name, r.detail, ""] for r in extra
    ]
    if table_rows:
        print(table(["NAME", "OUTCOME", "DAEMON", "DETAIL", "TIME"], table_rows))
    else:
        print("nothing to restore", file=sys.stderr)
    return 0 if result.ok and opened_ok else 1


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


def _open_layout(store: ArrangementStore, args: Namespace) -> list[str]:
    """``restore --open``: the saved layout opened in a terminal; a line for
    what was opened and for each session left out."""
    from multiserver_cli import _layouts

    arrangement = store.load()
    try:
        ops, lines = _layouts.open_layout(arrangement, args.open, _held(store), args)
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
