"""Run the benchmarks: ``python -m benchmarks [--only NAME ...] [--quick]``.

A full run writes docs/benchmarks.md (and docs/benchmarks.png when
matplotlib is installed); a partial or quick run writes into
benchmarks/out/ instead, so it never replaces the full table. Every run also
writes benchmarks/out/results.json with each sample (``--redraw`` draws the
chart again from it, running nothing). The table is printed.
Exits non-zero if a benchmark failed (its rows then say why).
"""

from __future__ import annotations

import argparse
import compileall
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType, ModuleType

from benchmarks import (
    attached,
    capturing,
    claim,
    commands,
    drain,
    echo,
    events,
    launch,
    login,
    memory,
    reattach,
    rebooted,
    remote,
    replaying,
    restoring,
    scrollback,
    shared,
    simrestore,
    switch,
    throughput,
    upgrade,
    upgrade_memory,
)
from benchmarks.chart import draw
from benchmarks.installed import installed
from benchmarks.report import (
    REPO,
    RunInfo,
    heading,
    machine,
    markdown,
    now,
    read_json,
    table,
    verdicts,
    write_json,
)
from benchmarks.results import (
    Row,
    Settings,
)

MODULES: tuple[ModuleType, ...] = (
    throughput,
    attached,
    echo,
    launch,
    claim,
    memory,
    reattach,
    restoring,
    simrestore,
    login,
    rebooted,
    drain,
    commands,
    scrollback,
    replaying,
    capturing,
    remote,
    upgrade,
    upgrade_memory,
    events,
    # Issue 38's, last: the whole run is near its budget, and a figure
    # that starts late gets one run rather than pushing others out.
    shared,
    switch,
)
RUNS = 7
QUICK_RUNS = 3
# The whole run must end within 10 minutes; past this, stop (cleaning up).
BUDGET = 9 * 60
LATE = 0.7


class BudgetExceeded(Exception):
    pass


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    raise BudgetExceeded(f"the benchmarks ran past {BUDGET} s")


def _parser(names: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=names,
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(names)}",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"at most {QUICK_RUNS} runs instead of {RUNS}"
    )
    parser.add_argument("--runs", type=int, help="runs per figure (overrides --quick)")
    parser.add_argument(
        "--redraw",
        action="store_true",
        help="run nothing: draw benchmarks/out/benchmarks.png again from benchmarks/out/results.json",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser([m.NAME for m in MODULES])
    args = parser.parse_args(argv)
    if args.redraw:
        return _redraw()

    runs = args.runs if args.runs is not None else (QUICK_RUNS if args.quick else RUNS)
    if runs < 1:
        parser.error("--runs must be at least 1")
    # Past LATE of the budget, every figure does one run only.
    settings = Settings(runs=runs, quick=args.quick, late=time.monotonic() + LATE * BUDGET)
    selected = [m for m in MODULES if not args.only or m.NAME in args.only]
    partial = bool(args.only) or args.quick or args.runs is not None
    out_dir = REPO / "benchmarks" / "out"
    out_dir.mkdir(exist_ok=True)
    doc_dir = out_dir if partial else REPO / "docs"

    # Daemons and peers this process starts run the checkout's code: give
    # them the bytecode an install has (under PYTHONDONTWRITEBYTECODE, set
    # on some machines, every start would compile every module).
    for package in ("multiserver", "restore", "adopter", "multiserver_cli"):
        compileall.compile_dir(REPO / package, quiet=1)
    # The timed `multiserver` processes run an install from a wheel, made
    # (or reused) here, before any clock starts.
    print(f"[install] multiserver: {installed().describe()}", file=sys.stderr, flush=True)

    load_start = os.getloadavg()[0]
    started = time.monotonic()
    rows, failed = _run_all(selected, settings)
    seconds = time.monotonic() - started
    info = RunInfo(
        date=now(),
        seconds=seconds,
        runs=runs,
        quick=args.quick,
        only=tuple(args.only or ()),
        machine=machine(),
        load=(load_start, os.getloadavg()[0]),
    )
    # The samples first: a chart that fails to draw must not lose them.
    write_json(out_dir / "results.json", rows, info)
    png = doc_dir / "benchmarks.png"
    chart_note = draw(rows, png, heading(info))
    doc = markdown(rows, info, selected, None if chart_note else png.name, chart_note)
    md_path = doc_dir / "benchmarks.md"
    md_path.write_text(doc)

    print(table(rows))
    for line in verdicts(rows):
        print(line)
    print(f"\n{len(rows)} rows in {seconds:.0f} s; wrote {_rel(md_path)}", file=sys.stderr)
    return 1 if failed else 0


def _skipped(after: list[ModuleType]) -> list[Row]:
    return [
        Row(m.NAME, "skipped", None, "", 0, "", None, detail="time budget spent") for m in after
    ]


def _run_all(selected: list[ModuleType], settings: Settings) -> tuple[list[Row], bool]:
    """Each selected figure in turn, under the whole run's budget (an
    alarm); its rows, and whether one failed. A figure that fails is a row
    saying why; once the budget is spent, the rest are rows saying so."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(BUDGET)
    started = time.monotonic()
    rows: list[Row] = []
    failed = False
    try:
        for n, mod in enumerate(selected):
            t0 = time.monotonic()
            print(f"[{mod.NAME}] up to {settings.runs} runs ...", file=sys.stderr, flush=True)
            try:
                rows.extend(mod.run(settings))
            except BudgetExceeded as exc:
                # The report is still written: this figure and the ones
                # after it say they were cut short.
                failed = True
                rows.append(Row(mod.NAME, "failed", None, "", 0, "", None, detail=str(exc)))
                rows.extend(_skipped(selected[n + 1 :]))
                break
            except Exception as exc:
                failed = True
                traceback.print_exc()
                rows.append(
                    Row(mod.NAME, "failed", None, "", 0, "", None, detail=f"failed: {exc!r}")
                )
                if time.monotonic() - started >= BUDGET:  # the alarm, wrapped by trio
                    rows.extend(_skipped(selected[n + 1 :]))
                    break
            print(f"[{mod.NAME}] {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    finally:
        signal.alarm(0)
    return rows, failed


def _redraw() -> int:
    out_dir = REPO / "benchmarks" / "out"
    png = out_dir / "benchmarks.png"
    rows, info = read_json(out_dir / "results.json")
    note = draw(rows, png, heading(info))
    print(note or f"wrote {_rel(png)}", file=sys.stderr)
    return 1 if note else 0


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
