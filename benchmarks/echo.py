"""Figure: keystroke echo round trip, p50 and p99 (issue 3; issue 6,
figure 2).

The program, the same for every subject, echoes what it reads, as a shell
at its prompt does (the PTY itself does not echo)::

    sh -c 'stty raw -echo; echo $$ > PIDFILE; exec cat'

The benchmark plays the user's terminal (an outer 24x80 PTY): it writes one
byte (``#``) to the outer master and times until a read of the master
brings it back; then waits 2 ms and sends the next. KEYS keystrokes per
run; p50 and p99 per run; the row gives the median over runs of each.

- raw PTY (the baseline): the program runs directly on the outer PTY: the
  byte goes PTY -> cat -> PTY.
- multiserver: ``multiserver new -d`` starts the program; ``multiserver
  attach -r none NAME`` runs on the outer PTY: outer PTY -> attach client
  -> session PTY -> cat -> session PTY -> attach client -> outer PTY.
- peers: dtach, abduco, screen, tmux, attached the same way (see
  ``attached``); screen and tmux draw the byte on their own screen, and
  the read that brings a ``#`` back ends the round trip.

Before timing, a probe byte is sent until it comes back (the client is
attached and in raw mode) and the client's first screen is drained.
"""

from __future__ import annotations

import time
from pathlib import Path

import attrs

from benchmarks.common import (
    Scratch,
    run_command,
    scratch,
    wait_for,
)
from benchmarks.peers import PEERS
from benchmarks.results import (
    Limit,
    Row,
    Settings,
    median,
    paired_ratio,
    spread,
)
from benchmarks.terminal import Keeper, Outer, keepers

NAME = "echo"
KEYS = 300
GAP = 0.002
KEY = b"#"
BASELINE = "raw PTY: the program on the outer PTY"
TARGET_P50 = 1.2  # x raw PTY (issue 3)
SECONDS = 30.0
SESSION = "echo"


@attrs.frozen
class Sample:
    p50: float  # ms
    p99: float


def _program(sc: Scratch) -> tuple[list[str], Path]:
    pidfile = sc.root / "prog.pid"
    return ["sh", "-c", f"stty raw -echo; echo $$ > {pidfile}; exec cat"], pidfile


def _wait_program(pidfile: Path) -> None:
    if not wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "", 10.0):
        raise RuntimeError("the program did not start")


def _type(outer: Outer, keys: int) -> Sample:
    outer.wait_echo(KEY)
    outer.drain_quiet()
    times = []
    for _ in range(keys):
        times.append(outer.round_trip(KEY) * 1000)
        time.sleep(GAP)
    times.sort()
    return Sample(times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))])


def _raw(keys: int) -> Sample:
    with scratch("echo-raw") as sc:
        argv, pidfile = _program(sc)
        outer = Outer.spawn(argv, sc.env(), echo=True)
        try:
            _wait_program(pidfile)
            return _type(outer, keys)
        finally:
            outer.close()


def _keeper(keeper: Keeper, keys: int) -> Sample:
    with scratch(f"echo-{keeper.name}") as sc:
        env = keeper.env(sc)
        argv, pidfile = _program(sc)
        code = run_command(keeper.new_argv(sc, SESSION, argv), env)
        if code != 0:
            raise RuntimeError(f"{keeper.name}: starting the session exited with {code}")
        _wait_program(pidfile)
        outer = Outer.spawn(keeper.attach_argv(sc, SESSION), env, echo=False)
        try:
            return _type(outer, keys)
        finally:
            outer.close()


def run(settings: Settings) -> list[Row]:
    keys = KEYS if not settings.quick else KEYS // 3
    subjects = keepers(PEERS)
    raw: list[Sample] = []
    got: dict[str, list[Sample]] = {k.name: [] for k in subjects if k.installed()}
    _raw(20)  # warm up
    for _ in settings.runs_within(SECONDS):
        raw.append(_raw(keys))
        for k in subjects:
            if k.name in got:
                got[k.name].append(_keeper(k, keys))

    rows: list[Row] = []
    for which in ("p50", "p99"):
        figure = f"keystroke echo round trip, {which} of {keys} keys (lower is better)"
        base = [getattr(s, which) for s in raw]
        for k in subjects:
            samples = got.get(k.name)
            if not samples:
                rows.append(
                    Row(
                        figure,
                        k.name,
                        None,
                        "ms",
                        0,
                        BASELINE,
                        median(base),
                        detail="not installed",
                    )
                )
                continue
            values = [getattr(s, which) for s in samples]
            ours = k.name == "multiserver" and which == "p50"
            rows.append(
                Row.against(
                    Limit("<=", TARGET_P50, paired_ratio(values, base), "x raw PTY")
                    if ours
                    else None,
                    figure=figure,
                    subject=f"multiserver: `{k.shape}`" if k.name == "multiserver" else k.name,
                    value=median(values),
                    unit="ms",
                    runs=len(values),
                    baseline=BASELINE,
                    baseline_value=median(base),
                    detail=f"range over runs {spread(values, 1, '{:.3f}')} ms; `{k.shape}`",
                    samples=tuple(values),
                    baseline_samples=tuple(base),
                )
            )
    return rows
