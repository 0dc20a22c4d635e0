"""Figure: ``multiserver restore`` after a reboot at 100, 300 and 1,000
saved sessions, beside the daemon launching as many programs (issue 23).

Each run, for each size N:

- baseline, timed: daemon 1 started in the scratch dirs (its start not
  timed), then N detached ``sleep 1000`` sessions launched through one
  connection, all in flight at once, from the first request to the last
  reply: what a relaunch of N sessions sits on.
- set-up, untimed: an arrangement of those N sessions (one window, one
  tab each, each referring to its child), each with its own
  ``SCROLLBACK`` bytes of saved scrollback, saved in the scratch store.
  Then a reboot: every daemon and program SIGKILLed by pid and the
  runtime dir emptied (the state dir, with the store, stays).
- timed, spawn to exit: ``multiserver restore --json --timeout 60`` (the
  wheel install of ``benchmarks/installed.py``). It finds no daemon,
  starts one and relaunches all N from their saved command and cwd; all
  N must come back ``relaunched``, and each saved leaf must then hold a
  new ref and a notice that shows that session's own saved scrollback
  (checked untimed). The long deadline keeps the figure about the work:
  a restore slower than 10 s would otherwise be cut off, not measured.
  What it started is then SIGKILLed by pid (untimed).

Targets: 300 sessions under 1 s, 1,000 under 3 s. The detail column gives
the command's own figure (its JSON ``seconds``: the restore inside the
process, without start-up, release and sweep) and its CPU time.
"""

from __future__ import annotations

import json
import resource
import subprocess
import time

import attrs
import trio

from benchmarks.common import (
    COMMAND_TIMEOUT,
    MEASURE_TIMEOUT,
    SESSION_ARGV,
    Scratch,
    reboot,
    scratch,
)
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread
from benchmarks.terminal import MULTISERVER, multiserver_bin
from multiserver import DaemonConfig, DaemonPaths, open_client
from restore import Arrangement, ArrangementStore, RestorationRef, SessionLeaf, Tab, Window

NAME = "rebooted"
SIZES = (100, 300, 1000)
TARGET_S = {300: 1.0, 1000: 3.0}
# Seconds each size may take, from its first run (3 runs at least).
SECONDS = {100: 15.0, 300: 20.0, 1000: 45.0}
SCROLLBACK = 16 * 1024  # bytes of saved scrollback per session
RESTORE_TIMEOUT = 60.0


@attrs.define
class Samples:
    launch: list[float] = attrs.Factory(list)
    restore: list[float] = attrs.Factory(list)
    inner: list[float] = attrs.Factory(list)
    cpu: list[float] = attrs.Factory(list)


def _scrollback(name: str) -> bytes:
    """A session's own saved screen: lines that name it, SCROLLBACK bytes."""
    line = f"{name}: output line of the session before the reboot\r\n".encode()
    return (line * (SCROLLBACK // len(line) + 1))[-SCROLLBACK:]


async def _launched(count: int) -> tuple[float, list[SessionLeaf]]:
    """Daemon 1 started (untimed), then ``count`` sessions launched at once
    on it: (seconds from the first request to the last reply, a saved leaf
    for each, with its scrollback)."""
    paths = DaemonPaths.for_number(1)
    leaves: list[SessionLeaf | None] = [None] * count
    with trio.fail_after(MEASURE_TIMEOUT):
        async with open_client(paths, start=True, config=DaemonConfig()) as client:
            sock = str(client.socket_path)

            async def one(i: int) -> None:
                r = await client.launch(SESSION_ARGV, name=f"s{i}", hold=False)
                ref = RestorationRef(sock, client.instance_id, r.child.id, r.child.pid)
                name = r.child.name
                leaves[i] = SessionLeaf(
                    name, list(SESSION_ARGV), "/", ref=ref, scrollback=_scrollback(name)
                )

            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(count):
                    nursery.start_soon(one, i)
            elapsed = time.perf_counter() - t0
    made = [leaf for leaf in leaves if leaf is not None]
    if len(made) != count:
        raise RuntimeError(f"launched {len(made)} of {count} sessions")
    return elapsed, made


def _save(leaves: list[SessionLeaf]) -> None:
    store, warning = ArrangementStore.open_or_quarantine()
    if warning:
        raise RuntimeError(warning)
    with store:
        store.save(Arrangement([Window("main", [Tab(leaf) for leaf in leaves])]))


def _restore(sc: Scratch, count: int) -> tuple[float, float, float]:
    """(wall seconds, the seconds the command reports, its CPU seconds) of
    ``multiserver restore --json``; all ``count`` must come back relaunched."""
    argv = [multiserver_bin(), "restore", "--json", "--timeout", f"{RESTORE_TIMEOUT:g}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv,
        env=MULTISERVER.env(sc),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=RESTORE_TIMEOUT + COMMAND_TIMEOUT,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"multiserver restore exited {proc.returncode}: {proc.stderr[-300:]!r}")
    out = json.loads(proc.stdout)
    got = sum(s["outcome"] == "relaunched" for s in out["sessions"])
    if got != count:
        outcomes = {s["outcome"] for s in out["sessions"]}
        raise RuntimeError(f"restore: {got} relaunched of {count}; {outcomes}")
    return elapsed, float(out["seconds"]), cpu


def _check_saved(was: list[SessionLeaf]) -> None:
    """Every session saved with a new ref and its own scrollback in its notice."""
    old = {leaf.name: leaf.ref for leaf in was}
    with ArrangementStore.open() as store:
        leaves = store.load().leaves()
    if len(leaves) != len(was):
        raise RuntimeError(f"{len(leaves)} sessions saved after the restore, of {len(was)}")
    for leaf in leaves:
        if leaf.ref is None or leaf.ref == old[leaf.name] or leaf.pending_launch is not None:
            raise RuntimeError(f"{leaf.name}: relaunch not recorded ({leaf.ref})")
        if leaf.notice is None or _scrollback(leaf.name) not in leaf.notice:
            raise RuntimeError(f"{leaf.name}: its saved scrollback is not in its notice")


def _measure(settings: Settings, sc: Scratch, count: int) -> Samples:
    out = Samples()
    for _ in settings.runs_within(SECONDS[count]):
        launch, leaves = trio.run(_launched, count)
        out.launch.append(launch)
        reboot(sc)
        _save(leaves)
        wall, inner, cpu = _restore(sc, count)
        out.restore.append(wall)
        out.inner.append(inner)
        out.cpu.append(cpu)
        _check_saved(leaves)
        reboot(sc)
    return out


def run(settings: Settings) -> list[Row]:
    rows = []
    for count in SIZES:
        with scratch(f"reboot{count}") as sc:
            s = _measure(settings, sc, count)
        rows.append(_row(count, s))
    return rows


def _row(count: int, s: Samples) -> Row:
    target = TARGET_S.get(count)
    ms = [x * 1000 for x in s.restore]
    base = [x * 1000 for x in s.launch]
    return Row.against(
        None if target is None else Limit("<", target * 1000, median(ms), "ms"),
        figure="restore after a reboot: all relaunched, with their scrollback (ms)",
        subject=f"multiserver restore --json, {count} sessions (daemon and programs SIGKILLed)",
        value=median(ms),
        unit="ms",
        runs=len(ms),
        baseline=f"the daemon launching {count} programs, all in flight",
        baseline_value=median(base),
        detail=(
            f"range {spread(ms)} ms; {paired_ratio(ms, base):.1f}x the launches; the command's"
            f" own figure (the restore inside it) {median(s.inner) * 1000:.0f} ms; its CPU"
            f" {median(s.cpu):.2f} s; {SCROLLBACK // 1024} KiB of scrollback a session"
        ),
        samples=tuple(ms),
        baseline_samples=tuple(base),
    )
