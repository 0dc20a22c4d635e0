"""Figure: ``multiserver restore`` at login, 100 saved sessions on 3
daemons (issue 22).

Each run, untimed: daemons 1, 2 and 3 started in the scratch dirs with
34, 33 and 33 detached ``sleep 1000`` sessions, and an arrangement (one
window, one tab per session, each referring to its child) saved in the
scratch state dir's store. Then, timed from spawn to exit, the command a
login hook runs, ``multiserver restore --json`` (the wheel install of
``benchmarks/installed.py``), twice:

- daemons alive: every session is still running, so the restore claims
  it where it is, checks it, gives it back and sweeps for orphans; all
  100 must come back ``attached``;
- after a reboot: every daemon and session program is SIGKILLed by pid
  and the runtime dir emptied (as a reboot empties ``/run/user/UID``;
  the state dir, with the store, stays). The restore finds no daemon,
  starts one (daemon 1, the relaunch daemon) and starts the 100 programs
  again from their saved command and cwd; all 100 must come back
  ``relaunched``. What it started is then SIGKILLed by pid (untimed).

Baseline, same run: ``python -c pass`` with the installed venv's
interpreter. Target: each under 0.3 s. The command's own figure (its
JSON ``seconds``: the restore inside the process, without start-up,
release and sweep) is in the detail column.
"""

from __future__ import annotations

import json
import subprocess
import time

import attrs
import trio

from benchmarks.common import COMMAND_TIMEOUT, Scratch, reboot, run_command, scratch
from benchmarks.installed import installed
from benchmarks.restoring import launch_saved, save_arrangement
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread
from benchmarks.terminal import MULTISERVER, multiserver_bin
from multiserver import DaemonConfig, DaemonPaths, open_client
from restore import Arrangement, SessionLeaf, Tab, Window

NAME = "login"
SESSIONS = (34, 33, 33)  # per daemon: 100 on 3
TARGET_S = 0.3
SECONDS = 60.0
BASELINE = "python -c pass (same interpreter)"


@attrs.define
class Samples:
    passes: list[float] = attrs.Factory(list)
    alive: list[float] = attrs.Factory(list)
    alive_inner: list[float] = attrs.Factory(list)
    rebooted: list[float] = attrs.Factory(list)
    rebooted_inner: list[float] = attrs.Factory(list)


async def _saved_sessions() -> None:
    """The daemons, their sessions and the saved arrangement (untimed)."""
    leaves: list[SessionLeaf] = []
    for number, count in enumerate(SESSIONS, 1):
        paths = DaemonPaths.for_number(number)
        async with open_client(paths, start=True, config=DaemonConfig()) as client:
            leaves += (await launch_saved(client, number, count))[1]
    if len(leaves) != sum(SESSIONS):
        raise RuntimeError(f"launched {len(leaves)} of {sum(SESSIONS)} sessions")
    save_arrangement(Arrangement([Window("main", [Tab(leaf) for leaf in leaves])]))


def _restore(sc: Scratch, outcome: str) -> tuple[float, float]:
    """(wall seconds, the seconds the command reports) of ``multiserver
    restore --json``; every saved session must come back ``outcome``."""
    argv = [multiserver_bin(), "restore", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv,
        env=MULTISERVER.env(sc),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=COMMAND_TIMEOUT * 3,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"multiserver restore exited {proc.returncode}: {proc.stderr[-300:]!r}")
    out = json.loads(proc.stdout)
    got = sum(s["outcome"] == outcome for s in out["sessions"])
    if got != sum(SESSIONS):
        outcomes = {s["outcome"] for s in out["sessions"]}
        raise RuntimeError(f"restore: {got} {outcome} of {sum(SESSIONS)}; {outcomes}")
    return elapsed, float(out["seconds"])


def _pass(sc: Scratch) -> float:
    t0 = time.perf_counter()
    if run_command([installed().python, "-c", "pass"], sc.env()) != 0:
        raise RuntimeError("python -c pass failed")
    return time.perf_counter() - t0


def _measure(settings: Settings, sc: Scratch) -> Samples:
    out = Samples()
    for _ in settings.runs_within(SECONDS):
        trio.run(_saved_sessions)
        out.passes.append(_pass(sc))
        wall, inner = _restore(sc, "attached")
        out.alive.append(wall)
        out.alive_inner.append(inner)
        reboot(sc)
        wall, inner = _restore(sc, "relaunched")
        out.rebooted.append(wall)
        out.rebooted_inner.append(inner)
        reboot(sc)
    return out


def run(settings: Settings) -> list[Row]:
    with scratch("login") as sc:
        s = _measure(settings, sc)
    return _rows(s)


def _rows(s: Samples) -> list[Row]:
    figure = f"restore at login: {sum(SESSIONS)} saved sessions on {len(SESSIONS)} daemons (ms)"
    base = [x * 1000 for x in s.passes]
    rows = []
    for subject, wall, inner in (
        (
            "multiserver restore, after a reboot: daemons and programs SIGKILLed, all relaunched",
            s.rebooted,
            s.rebooted_inner,
        ),
        (
            "multiserver restore, daemons alive: all reattached (claimed, checked, given back)",
            s.alive,
            s.alive_inner,
        ),
    ):
        ms = [x * 1000 for x in wall]
        rows.append(
            Row.against(
                Limit("<", TARGET_S * 1000, median(ms), "ms"),
                figure=figure,
                subject=subject,
                value=median(ms),
                unit="ms",
                runs=len(ms),
                baseline=BASELINE,
                baseline_value=median(base),
                detail=(
                    f"range {spread(ms)} ms; {paired_ratio(ms, base):.1f}x python -c pass; the "
                    f"command's own figure (the restore inside it) {median(inner) * 1000:.0f} ms"
                ),
                samples=tuple(ms),
                baseline_samples=tuple(base),
            )
        )
    return rows
