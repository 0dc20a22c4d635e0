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
  - 1 connections watch, less before they did, a connection each (beside
  what a connection costs); and how much it grew while its ring filled
  (4,096 events, read by a watcher: the ring, and what the requests that
  made them left in the heap).
"""

from __future__ import annotations

import contextlib
import os
import time

import trio

from benchmarks.common import MEASURE_TIMEOUT, daemon_client, scratch, smaps_rollup
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread
from multiserver import ChildExited, Client, DaemonPaths, SessionEvent, open_client

NAME = "events"
LAUNCHES = 500
WATCHERS = 50
SECONDS = 60.0
TARGET_RATIO = 0.8
ARGV = ["true"]
# The events a daemon keeps (docs/events.md).
RING = 4096
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


async def _memory() -> tuple[float, float, float]:
    """(KiB a connection costs the daemon, KiB more once it watches, each
    the mean over WATCHERS - 1 connections; KiB the daemon grew by while
    its ring filled, RING events read by a watcher)."""
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
        for watcher in clients[1:]:
            await watcher.watch()
        watching = await anonymous(pid)
        connection = (plain - before) / WATCHERS
        per_watcher = (watching - plain) / (WATCHERS - 1)
        for watcher in clients[1:]:
            watcher.close()
        child = (await client.launch(["sleep", "1000"], hold=False)).child.id
        empty = await anonymous(pid)
        await clients[0].watch()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_all, clients[0], RING)
            for _ in range(RING // 2):  # joined, left
                [claimed] = await client.claim([child])
                if claimed.master is not None:
                    os.close(claimed.master)
                await client.release([child])
        full = await anonymous(pid)
        return connection, per_watcher, full - empty


def run(settings: Settings) -> list[Row]:
    one: list[float] = []
    many: list[float] = []
    base: list[float] = []
    with scratch("events"):
        for _ in settings.runs_within(SECONDS):
            base.append(trio.run(_unwatched))
            one.append(trio.run(_watched, 1))
            many.append(trio.run(_watched, WATCHERS))
        connection, per_watcher, ring = trio.run(_memory)
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
            f"a connection's watch (of {WATCHERS - 1} idle watchers): what it adds",
            per_watcher,
            "KiB",
            1,
            "a connection (the same, before it watches)",
            connection,
            detail=f"the daemon's anonymous memory, the mean of {WATCHERS - 1}; it grew by"
            f" {ring:.0f} KiB while its ring filled ({RING:,} events, read by a watcher; kept"
            " whoever watches)",
        ),
    ]
    return rows
