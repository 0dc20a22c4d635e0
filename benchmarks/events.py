"""Figure: events a second (issue 38), and what a watcher costs the daemon.

- events a second: a fresh daemon; LAUNCHES ``true`` sessions launched
  detached through one connection, all in flight at once, each exiting at
  once: two events each (created, exited). Timed from the first launch to
  the moment the watcher has read the last of them: how many events a
  watcher receives a second, with one watcher and with WATCHERS (the
  slowest of them). Baseline: the same launches unwatched, timed until
  the launching client has every exit notice (``ChildExited``): the events
  the daemon records a second. Target: one watcher receives them at 0.8x
  that pace at least (it reads them as they happen, slowing nobody).
- memory: the daemon's anonymous memory (``smaps_rollup``) once WATCHERS
  connections watch, less before they did, a connection each (beside
  what a connection costs); and what the ring holds when full (4,096
  events, kept whoever watches), by tracemalloc in this process.
"""

from __future__ import annotations

import contextlib
import time

import trio

from benchmarks.common import MEASURE_TIMEOUT, daemon_client, scratch, smaps_rollup
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread
from multiserver import ChildExited, Client, DaemonPaths, SessionEvent, open_client
from multiserver.daemon._events import RING, EventLog
from multiserver.protocol._codec import encode_body

NAME = "events"
LAUNCHES = 500
WATCHERS = 50
SECONDS = 60.0
TARGET_RATIO = 0.8
ARGV = ["true"]
# How long the daemon's memory is left to settle before it is read.
SETTLE = 0.5


async def _launch_all(client: Client) -> None:
    async def one() -> None:
        await client.launch(ARGV, hold=False)

    async with trio.open_nursery() as nursery:
        for _ in range(LAUNCHES):
            nursery.start_soon(one)


async def _read_all(watcher: Client, count: int) -> float:
    """When ``watcher`` has read ``count`` events (perf_counter)."""
    seen = 0
    async for item in watcher.events():
        if isinstance(item, SessionEvent):
            seen += 1
        if seen == count:
            return time.perf_counter()
    raise RuntimeError("the watcher's events ended")


async def _watched(watchers: int) -> float:
    """Events a second the slowest of ``watchers`` watchers receives."""
    paths = DaemonPaths.for_number(1)
    async with daemon_client() as client, contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(open_client(paths)) for _ in range(watchers)]
        for watcher in clients:
            await watcher.watch()
        done: list[float] = []

        async def read(watcher: Client) -> None:
            done.append(await _read_all(watcher, 2 * LAUNCHES))

        with trio.fail_after(MEASURE_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for watcher in clients:
                    nursery.start_soon(read, watcher)
                t0 = time.perf_counter()
                await _launch_all(client)
        return 2 * LAUNCHES / (max(done) - t0)


async def _unwatched() -> float:
    """Events a second the daemon records with nobody watching: launches
    and exits, until the launching client has every exit notice."""
    async with daemon_client() as client:
        with trio.fail_after(MEASURE_TIMEOUT):
            t0 = time.perf_counter()
            await _launch_all(client)
            exits = 0
            async for notice in client.notices:
                exits += isinstance(notice, ChildExited)
                if exits == LAUNCHES:
                    break
            return 2 * LAUNCHES / (time.perf_counter() - t0)


async def _memory() -> tuple[float, float]:
    """(KiB a connection costs the daemon, KiB more once it watches), each
    the mean over WATCHERS connections."""
    paths = DaemonPaths.for_number(1)

    async def anonymous(pid: int) -> int:
        await trio.sleep(SETTLE)
        return smaps_rollup(pid).get("Anonymous", 0)

    async with daemon_client() as client, contextlib.AsyncExitStack() as stack:
        pid = client.daemon_pid
        before = await anonymous(pid)
        clients = [
            await stack.enter_async_context(open_client(paths, children=False))
            for _ in range(WATCHERS)
        ]
        plain = await anonymous(pid)
        for watcher in clients:
            await watcher.watch()
        watching = await anonymous(pid)
        return (plain - before) / WATCHERS, (watching - plain) / WATCHERS


def _ring() -> float:
    """KiB the daemon's ring holds when full, each event read by a watcher
    once (which gives its record a dict of its own), by tracemalloc."""
    import gc
    import tracemalloc

    log = EventLog()
    gc.collect()
    gc.disable()  # what is collected meanwhile is no part of the ring
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(RING):
            encode_body(log.record("joined", 1, "build", client=2))  # as a watcher reads it
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
        gc.enable()
    return sum(d.size_diff for d in after.compare_to(before, "filename")) / 1024


def run(settings: Settings) -> list[Row]:
    one: list[float] = []
    many: list[float] = []
    base: list[float] = []
    with scratch("events"):
        for _ in settings.runs_within(SECONDS):
            base.append(trio.run(_unwatched))
            one.append(trio.run(_watched, 1))
            many.append(trio.run(_watched, WATCHERS))
        connection, per_watcher = trio.run(_memory)
    ring = _ring()
    figure = f"events a second ({LAUNCHES} sessions launched at once, each exiting at once)"
    baseline = "the same, unwatched: events the daemon records a second (exit notices read)"
    ratio = paired_ratio(one, base)
    rows = [
        Row.against(
            Limit(">=", TARGET_RATIO, ratio, "x unwatched"),
            figure=figure,
            subject="multiserver: what one watcher receives",
            value=median(one),
            unit="events/s",
            runs=len(one),
            baseline=baseline,
            baseline_value=median(base),
            detail=f"range {spread(one)} events/s; {ratio:.2f}x unwatched",
            samples=tuple(one),
            baseline_samples=tuple(base),
        ),
        Row(
            figure,
            f"multiserver: what each of {WATCHERS} watchers receives (the slowest)",
            median(many),
            "events/s",
            len(many),
            baseline,
            median(base),
            detail=f"range {spread(many)} events/s; the {WATCHERS} read in this one process,"
            " which decodes them all beside the daemon",
            samples=tuple(many),
            baseline_samples=tuple(base),
        ),
        Row(
            "the daemon's memory for events",
            f"a connection's watch (of {WATCHERS} idle watchers): what it adds",
            per_watcher,
            "KiB",
            1,
            "a connection (the same, before it watches)",
            connection,
            detail=f"the daemon's anonymous memory, the mean of {WATCHERS}; the ring full"
            f" ({RING:,} events, kept whoever watches): {ring:.0f} KiB",
        ),
    ]
    return rows
