"""Figure: the command line, as a person or a script meets it (issue 13).

Each command is a fresh process, timed from spawn to exit, at least 20 times
(interleaved run by run with the baseline, so load drifts alike):

- ``new -d`` (a new detached ``sleep 1000``), ``ls``, ``peek NAME``, ``kill
  NAME`` (a session the same run's ``new -d`` made), and ``attach NAME``
  timed from spawn to raw mode (the outer PTY's termios lose ICANON and
  ECHO: the client is ready for keys), then stopped by pid;
- with the daemon holding 1 session, then 1,000 (the ratio of the two is
  the figure: a command must not grow with the sessions it does not touch);
- 200 ``new -d`` in a shell loop, as a script makes sessions;
- the peers in the same run, where they have the command: dtach (``-n``,
  ``-a`` to raw mode), tmux (``new-session -d``, ``ls``, ``capture-pane -p``,
  ``attach`` to raw mode, ``kill-session``).

Baseline: ``python -c pass`` with the same interpreter (the floor of any
Python command). Target: each at most 3x; at 1,000 sessions at most 1.3x
the same command at 1; the 200 in a loop at most a quarter of the issue's
figure, 100 in 28 s with ``python -c pass`` at 20 ms (14x pass each), so
3.5x pass each.
"""

from __future__ import annotations

import os
import sys
import termios
import time
from collections.abc import Callable, Sequence

import trio

from benchmarks.common import (
    MEASURE_TIMEOUT,
    SESSION_ARGV,
    Scratch,
    daemon_client,
    run_command,
    scratch,
)
from benchmarks.peers import peer
from benchmarks.results import Limit, Row, Settings, median, spread
from benchmarks.terminal import Outer, multiserver_bin

NAME = "commands"
BASELINE = "python -c pass (same interpreter)"
AT_MOST_PASS = 3.0
AT_MOST_GROWTH = 1.3
LOOP = 200
LOOP_AT_MOST_PASS = 3.5
MIN_RUNS = 20
QUICK_RUNS = 5
# Past this, a loaded machine gets fewer runs of a figure (5 at least).
SECONDS = 90.0


def _timed(argv: Sequence[str], env: dict[str, str], timeout: float = 10.0) -> float:
    t0 = time.perf_counter()
    code = run_command(argv, env, timeout)
    elapsed = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}... exited with {code}")
    return elapsed


def _to_raw(argv: Sequence[str], env: dict[str, str]) -> float:
    """Spawn ``argv`` on a fresh PTY; seconds until it has put that
    terminal in raw mode. The client is then stopped by pid."""
    t0 = time.perf_counter()
    outer = Outer.spawn(argv, env, echo=False)
    try:
        deadline = time.monotonic() + MEASURE_TIMEOUT
        while termios.tcgetattr(outer.master)[3] & termios.ICANON:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} never set raw mode")
            time.sleep(0.0002)
        return time.perf_counter() - t0
    finally:
        outer.close()


Probe = Callable[[int], float]  # run number -> seconds
Samples = tuple[dict[str, list[float]], list[float]]  # per probe, and the baseline (ms)


def _multiserver_probes(sc: Scratch) -> dict[str, Probe]:
    ms = multiserver_bin()
    env = sc.env(HOME=str(sc.root), TMPDIR=str(sc.root))
    made: list[str] = []

    def new(i: int) -> float:
        name = f"n{os.getpid()}-{len(made)}"
        made.append(name)
        return _timed([ms, "new", "-d", "-n", name, "--", *SESSION_ARGV], env)

    def kill(i: int) -> float:
        return _timed([ms, "kill", made.pop()], env)

    return {
        "new -d": new,
        "ls": lambda i: _timed([ms, "ls"], env),
        "peek": lambda i: _timed([ms, "peek", "s1"], env),
        "attach (to raw mode)": lambda i: _to_raw([ms, "attach", "-r", "none", "s1"], env),
        "kill": kill,
    }


def _tmux_probes(sc: Scratch) -> dict[str, Probe]:
    tm = peer("tmux")
    env = tm.env(sc)
    base = tm.new_argv(sc.root, "s1", SESSION_ARGV)[:5]  # tmux -S SOCK -f /dev/null
    made: list[str] = []

    def new(i: int) -> float:
        name = f"n{len(made)}"
        made.append(name)
        return _timed(tm.new_argv(sc.root, name, SESSION_ARGV), env)

    return {
        "new -d": new,
        "ls": lambda i: _timed([*base, "ls"], env),
        "peek": lambda i: _timed([*base, "capture-pane", "-p", "-t", "s1"], env),
        "attach (to raw mode)": lambda i: _to_raw(tm.attach_argv(sc.root, "s1"), env),
        "kill": lambda i: _timed([*base, "kill-session", "-t", made.pop()], env),
    }


def _dtach_probes(sc: Scratch) -> dict[str, Probe]:
    dt = peer("dtach")
    env = dt.env(sc)
    made: list[str] = []

    def new(i: int) -> float:
        name = f"n{len(made)}"
        made.append(name)
        return _timed(dt.new_argv(sc.root, name, SESSION_ARGV), env)

    return {
        "new -d": new,
        "attach (to raw mode)": lambda i: _to_raw(dt.attach_argv(sc.root, "s1"), env),
    }


def _measure(settings: Settings, probes: dict[str, Probe], runs: int) -> Samples:
    """Each probe and the baseline, interleaved run by run (ms)."""
    py = [sys.executable, "-c", "pass"]
    env = dict(os.environ)
    samples: dict[str, list[float]] = {k: [] for k in probes}
    base: list[float] = []
    t0 = time.monotonic()
    for i in range(runs):
        # A loaded machine stops early (QUICK_RUNS at least), not past its share.
        spent = time.monotonic() - t0
        if i >= QUICK_RUNS and spent + spent / i > SECONDS:
            break
        base.append(_timed(py, env) * 1000)
        for what, probe in probes.items():
            samples[what].append(probe(i) * 1000)
    return samples, base


async def _add_sessions(count: int) -> None:
    """``count`` more detached sessions on the scratch daemon, all in flight."""
    from multiserver import open_client
    from multiserver._paths import DaemonPaths

    async with open_client(DaemonPaths.for_number(1)) as client, trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(lambda: client.launch(list(SESSION_ARGV), hold=False))


async def _with_daemon(
    settings: Settings, runs: int, sc: Scratch
) -> tuple[Samples, Samples, float]:
    """multiserver at 1 session, then at 1,000; then 200 new -d in a loop."""
    async with daemon_client():
        # Made as a person makes it: saved, so commands find it where it lives.
        env = sc.env(HOME=str(sc.root), TMPDIR=str(sc.root))
        _timed([multiserver_bin(), "new", "-d", "-n", "s1", "--", *SESSION_ARGV], env)
        one = await trio.to_thread.run_sync(_measure, settings, _multiserver_probes(sc), runs)
        await _add_sessions(settings.many - 1)
        many = await trio.to_thread.run_sync(_measure, settings, _multiserver_probes(sc), runs)
    async with daemon_client():
        loop = await trio.to_thread.run_sync(_loop, sc)
    return one, many, loop


def _loop(sc: Scratch) -> float:
    script = (
        f'i=0; while [ "$i" -lt {LOOP} ]; do '
        f'"{multiserver_bin()}" new -d -- {" ".join(SESSION_ARGV)} >/dev/null || exit 1; '
        "i=$((i+1)); done"
    )
    env = sc.env(HOME=str(sc.root), TMPDIR=str(sc.root))
    return _timed(["sh", "-c", script], env, timeout=MEASURE_TIMEOUT * 3)


def _peer(settings: Settings, name: str, runs: int) -> Samples:
    p = peer(name)
    with scratch(name) as sc:
        env = p.env(sc)
        if run_command(p.new_argv(sc.root, "s1", SESSION_ARGV), env) != 0:
            raise RuntimeError(f"{name}: could not start a session")
        probes = _tmux_probes(sc) if name == "tmux" else _dtach_probes(sc)
        return _measure(settings, probes, runs)


def run(settings: Settings) -> list[Row]:
    runs = QUICK_RUNS if settings.quick else max(MIN_RUNS, settings.runs)
    with scratch("commands") as sc:
        (one, one_base), (many, _), loop_seconds = trio.run(_with_daemon, settings, runs, sc)
    peers: dict[str, Samples] = {}
    for name in ("dtach", "tmux"):
        if peer(name).installed():
            peers[name] = _peer(settings, name, runs)
    rows: list[Row] = []
    for what, samples in one.items():
        ratio = median([a / b for a, b in zip(samples, one_base, strict=False)])
        grown = median(many[what]) / median(samples)
        beside = [
            f"{name} {median(s[what]):.1f} ms ({median([a / b for a, b in zip(s[what], b_, strict=False)]):.2f}x)"
            for name, (s, b_) in peers.items()
            if what in s
        ]
        rows.append(
            Row.against(
                [
                    Limit("<=", AT_MOST_PASS, ratio, "x python -c pass"),
                    Limit("<=", AT_MOST_GROWTH, grown, "x at 1 session"),
                ],
                figure=f"`multiserver {what}`, a fresh process (ms)",
                subject="multiserver, daemon with 1 session",
                value=median(samples),
                unit="ms",
                runs=len(samples),
                baseline=BASELINE,
                baseline_value=median(one_base),
                detail=(
                    f"range {spread(samples, 1, '{:.0f}')} ms; with 1,000 sessions "
                    f"{median(many[what]):.1f} ms ({grown:.2f}x); "
                    + ("; ".join(beside) if beside else "no peer has this command")
                ),
                samples=tuple(samples),
                baseline_samples=tuple(one_base),
            )
        )
    per_new = loop_seconds / LOOP * 1000
    pass_ms = median(one_base)
    rows.append(
        Row.against(
            Limit("<=", LOOP_AT_MOST_PASS, per_new / pass_ms, "x python -c pass each"),
            figure=f"{LOOP} `multiserver new -d` in a shell loop (s)",
            subject="multiserver, sh while-loop, fresh daemon",
            value=loop_seconds,
            unit="s",
            runs=1,
            baseline=BASELINE,
            baseline_value=pass_ms * LOOP / 1000,
            detail=f"{per_new:.1f} ms each; the issue's figure: 100 in 28 s",
        )
    )
    return rows
