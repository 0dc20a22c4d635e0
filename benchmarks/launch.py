"""Figure: start 200 and 1,000 sessions running ``sleep 1000`` (issue 6,
figure 4).

- multiserver: 200 ``Client.launch(..., hold=False)`` through one connection
  to a fresh daemon, awaited one after another, and all 200 in flight at once;
  timed from the first request to the last reply (the daemon's own start-up
  is not counted).
- each installed peer: 200 of its "new detached session" commands run one
  after another, timed until the last command exits; every session is then
  checked to be running (untimed).
- baseline: 200 x ``os.openpty`` + ``posix_spawn`` (setsid, the slave as
  controlling terminal) in this process.
- 1,000 sessions: multiserver with all launches in flight, and the
  baseline, only (the peers' 1,000 commands in turn do not fit the time
  budget; their rows say so).
"""

from __future__ import annotations

import os
import shutil
import time

import trio

from benchmarks.common import (
    MEASURE_TIMEOUT,
    SESSION_ARGV,
    daemon_client,
    scratch,
    session_pids,
    spawn_on_pty,
    stop_pids,
)
from benchmarks.peers import PEERS, start_sessions, wait_sessions
from benchmarks.results import (
    Limit,
    Row,
    Settings,
    median,
    spread,
)

NAME = "launch"
TARGET_SECONDS = 0.3
BASELINE = "raw: openpty + posix_spawn in-process"
# Past these (from the first run), a loaded machine gets fewer runs (3 at least).
SECONDS = 40.0
SECONDS_MANY = 20.0


def _raw(count: int) -> float:
    with scratch("raw") as sc:
        exe = shutil.which(SESSION_ARGV[0])
        assert exe is not None
        env = sc.env()
        pids: list[int] = []
        masters: list[int] = []
        try:
            t0 = time.perf_counter()
            for _ in range(count):
                pid, master = spawn_on_pty(exe, SESSION_ARGV, env)
                pids.append(pid)
                masters.append(master)
            return time.perf_counter() - t0
        finally:
            for fd in masters:
                os.close(fd)
            stop_pids(pids)


async def _multiserver_launch(count: int, concurrent: bool, marker: str) -> float:
    with trio.fail_after(MEASURE_TIMEOUT):
        async with daemon_client() as client:
            ids: list[int] = []

            async def one() -> None:
                launched = await client.launch(SESSION_ARGV, hold=False)
                ids.append(launched.child.id)

            t0 = time.perf_counter()
            if concurrent:
                async with trio.open_nursery() as nursery:
                    for _ in range(count):
                        nursery.start_soon(one)
            else:
                for _ in range(count):
                    await one()
            elapsed = time.perf_counter() - t0
            running = len(session_pids(marker))
            if len(set(ids)) != count or running != count:
                raise RuntimeError(f"launched {len(set(ids))} ids, {running} running, of {count}")
            return elapsed


def _multiserver(count: int, concurrent: bool) -> float:
    with scratch("ms") as sc:
        return trio.run(_multiserver_launch, count, concurrent, sc.marker)


def _peer(peer_index: int, count: int) -> float:
    peer = PEERS[peer_index]
    with scratch(peer.name) as sc:
        elapsed = start_sessions(peer, sc, count)
        running = wait_sessions(sc, count)
        if running != count:
            raise RuntimeError(f"{peer.name}: {running} of {count} sessions running")
        return elapsed


def run(settings: Settings) -> list[Row]:
    return [*_run_some(settings), *_run_many(settings)]


def _run_some(settings: Settings) -> list[Row]:
    k = settings.sessions
    installed = [i for i, p in enumerate(PEERS) if p.installed()]
    raw: list[float] = []
    seq: list[float] = []
    conc: list[float] = []
    peers: dict[int, list[float]] = {i: [] for i in installed}
    # Interleaved, so that drift in the machine's load hits every subject alike.
    for _ in settings.runs_within(SECONDS):
        raw.append(_raw(k))
        seq.append(_multiserver(k, concurrent=False))
        conc.append(_multiserver(k, concurrent=True))
        for i in installed:
            peers[i].append(_peer(i, k))

    figure = f"start {k} sessions"
    rows = [
        _row(
            figure,
            raw,
            "multiserver, one connection, launches awaited in turn",
            seq,
            "daemon start-up not counted",
        ),
        _row(
            figure,
            raw,
            "multiserver, one connection, all launches in flight",
            conc,
            f"{k} concurrent requests on one client",
        ),
    ]
    for i, p in enumerate(PEERS):
        if i in peers:
            rows.append(
                _row(figure, raw, p.name, peers[i], f"{k} x `{p.shape}` in turn", target=False)
            )
        else:
            rows.append(
                Row(figure, p.name, None, "s", 0, BASELINE, median(raw), detail="not installed")
            )
    return rows


def _run_many(settings: Settings) -> list[Row]:
    k = settings.many
    raw: list[float] = []
    conc: list[float] = []
    for _ in settings.runs_within(SECONDS_MANY):
        raw.append(_raw(k))
        conc.append(_multiserver(k, concurrent=True))
    figure = f"start {k} sessions"
    rows = [
        _row(
            figure,
            raw,
            "multiserver, one connection, all launches in flight",
            conc,
            f"{k} concurrent requests on one client",
            target=False,
        )
    ]
    for p in PEERS:
        why = "not installed" if not p.installed() else f"not measured at {k} (time budget)"
        rows.append(Row(figure, p.name, None, "s", 0, BASELINE, median(raw), detail=why))
    return rows


def _row(
    figure: str,
    raw: list[float],
    subject: str,
    samples: list[float],
    detail: str,
    target: bool = True,
) -> Row:
    value = median(samples)
    return Row.against(
        Limit("<", TARGET_SECONDS, value, "s") if target else None,
        figure=figure,
        subject=subject,
        value=value,
        unit="s",
        runs=len(samples),
        baseline=BASELINE,
        baseline_value=median(raw),
        detail=f"range {spread(samples, 1, '{:.3f}')} s; {detail}",
        samples=tuple(samples),
        baseline_samples=tuple(raw),
    )
