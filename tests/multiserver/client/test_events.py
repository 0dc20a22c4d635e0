"""Events through the client library (protocol 8), against the simulated
daemon (the daemon's own core and connections): the trio iterator and the
blocking one, the queue a client keeps, a daemon too old for events, the
activity rate, and a watcher that stops reading."""

from __future__ import annotations

import errno
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from multiserver import (
    ConnectionClosed,
    DaemonTooOld,
    EventsMissed,
    RequestFailed,
    SessionEvent,
    dial_blocking,
    open_client,
)
from multiserver.client._events import EventQueue
from multiserver.daemon import _core
from multiserver.daemon._events import ACTIVITY_INTERVAL, EventLog
from multiserver.protocol._codec import Codec
from multiserver.protocol._messages import Hello, Watch, Watching, Welcome
from multiserver.protocol._wire import FramedSocket
from multiserver.settings._config import DaemonConfig
from multiserver.testing import SimDaemon


def kinds(items: list[Any]) -> list[tuple[str, str]]:
    return [
        ("missed", f"{i.first_missing}-{i.next_seq}")
        if isinstance(i, EventsMissed)
        else (i.kind, i.name)
        for i in items
    ]


def event(seq: int) -> SessionEvent:
    return SessionEvent(seq=seq, kind="activity", id=1, name="s", at=0.0)


# --- the queue a client keeps --------------------------------------------------


def test_a_full_queue_lets_events_go_and_tells_the_stretch_once() -> None:
    queue = EventQueue(3)
    for seq in range(1, 8):  # 4..7 do not fit
        queue.put(event(seq))
    assert [queue.get() for _ in range(3)] == [event(1), event(2), event(3)]
    queue.put(event(8))  # room again: the stretch first, then the event
    assert queue.get() == EventsMissed(first_missing=4, next_seq=8)
    assert queue.get() == event(8)
    assert queue.get() is None


def test_a_stretch_the_daemon_let_go_joins_one_the_client_let_go() -> None:
    queue = EventQueue(1)
    queue.put(event(1))
    queue.put(event(2))  # let go here
    queue.put(EventsMissed(first_missing=3, next_seq=10))  # and there
    queue.put(event(10))
    assert queue.get() == event(1)
    assert queue.get() == EventsMissed(first_missing=2, next_seq=11)  # read since: nothing kept
    assert queue.get() is None
    queue.put(EventsMissed(first_missing=20, next_seq=30))  # room: kept as it came
    assert queue.get() == EventsMissed(first_missing=20, next_seq=30)


# --- the trio client -------------------------------------------------------------


async def test_the_trio_client_reads_each_request_s_events_in_order(tmp_path: Path) -> None:
    sim = SimDaemon(tmp_path / "d.sock")
    async with (
        sim.serving(),
        open_client(sim.socket_path) as watcher,
        open_client(sim.socket_path) as client,
    ):
        got: list[Any] = []
        stream = watcher.events()

        async def follow(count: int) -> None:
            async for item in stream:
                got.append(item)
                if len(got) == count:
                    return

        launched = await client.launch(["sh"], cwd="/", env={}, name="s")  # before it watches
        assert launched.master is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, 3)
            await sim.wait_children(1)
            while not watcher._watching:  # the first event below must come after it
                await trio.sleep(0)
            await client.release([launched.child.id])
            sim.child(launched.child.id).exit(-signal.SIGTERM)
            other = await client.launch(["sh"], cwd="/", env={}, name="t", hold=False)
        assert kinds(got) == [("left", "s"), ("exited", "s"), ("created", "t")]
        assert got[1].exit_code == -signal.SIGTERM and got[2].id == other.child.id
        assert [g.seq for g in got] == [3, 4, 5]  # created, joined came before it watched
        # Again from 1 on a new connection: what the daemon still holds.
        async with open_client(sim.socket_path) as late:
            replay: list[Any] = []
            async for item in late.events(since=1):
                replay.append(item)
                if len(replay) == 5:
                    break
        assert kinds(replay) == [
            ("created", "s"),
            ("joined", "s"),
            ("left", "s"),
            ("exited", "s"),
            ("created", "t"),
        ]
        with pytest.raises(RequestFailed) as past:
            async with open_client(sim.socket_path) as c:
                await c.watch(since=99)
        assert past.value.errno == errno.EINVAL
        os.close(launched.master)


async def test_the_iterator_ends_with_connection_closed_once_the_daemon_is_gone(
    tmp_path: Path,
) -> None:
    sim = SimDaemon(tmp_path / "d.sock")
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        async with open_client(sim.socket_path) as watcher:
            await watcher.watch()
            sim.add_child(name="a").write_output(b"x")  # activity
            got = []
            with pytest.raises(ConnectionClosed):
                async for item in watcher.events():
                    got.append(item)
                    sim.stop()
            assert kinds(got) == [("activity", "a")]


async def test_activity_is_one_event_a_second_per_session(tmp_path: Path) -> None:
    now = [100.0]
    sim = SimDaemon(tmp_path / "d.sock")
    sim.core.events = EventLog(monotonic=lambda: now[0])
    async with sim.serving(), open_client(sim.socket_path) as watcher:
        await watcher.watch()
        a, b = sim.add_child(name="a"), sim.add_child(name="b")
        for _ in range(100):  # a flood, within the second
            a.write_output(b"x" * 100)
            b.write_output(b"y")
            now[0] += ACTIVITY_INTERVAL / 128
        now[0] += ACTIVITY_INTERVAL / 4  # a second after the first
        a.write_output(b"x")
        got = []
        async for item in watcher.events():
            got.append(item)
            if len(got) == 3:
                break
        assert kinds(got) == [("activity", "a"), ("activity", "b"), ("activity", "a")]


async def test_a_daemon_too_old_for_events_is_said_in_one_line_and_nothing_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_core, "PROTOCOL_VERSION", 7)  # the simulator speaks 2..7
    sim = SimDaemon(tmp_path / "d.sock")
    line = (
        "the daemon speaks protocol 7, too old for events (protocol 8);"
        " `multiserver upgrade` gives it the installed code, keeping its sessions"
    )
    async with sim.serving(), open_client(sim.socket_path) as client:
        assert client.version == 7
        with pytest.raises(DaemonTooOld) as info:
            async for _ in client.events():
                pass
        assert str(info.value) == line
        received = len(sim.received)

        def blocking() -> None:
            with dial_blocking(sim.socket_path, deadline=time.monotonic() + 10) as sync:
                with pytest.raises(DaemonTooOld) as info:
                    sync.watch()
                assert str(info.value) == line

        await trio.to_thread.run_sync(blocking)
        assert len(sim.received) == received + 1  # the blocking client's Hello, no Watch
        assert await client.list() == []  # the connection is as good as before


# --- the blocking client -------------------------------------------------------------


async def test_the_blocking_client_iterates_events_too(tmp_path: Path) -> None:
    sim = SimDaemon(tmp_path / "d.sock")
    async with sim.serving():
        ready = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def blocking() -> list[Any]:
            got = []
            with dial_blocking(sim.socket_path, deadline=time.monotonic() + 10) as client:
                next_seq = client.watch()
                client.deadline = None
                assert client.wait_event(time.monotonic() + 0.01) is None  # none yet
                trio.from_thread.run_sync(ready.set, trio_token=token)
                while len(got) < 2:
                    item = client.wait_event(time.monotonic() + 10)
                    assert item is not None
                    got.append(item)
                assert next_seq == got[0].seq == 1
            return got

        async with trio.open_nursery() as nursery:
            result: list[Any] = []

            async def run() -> None:
                result.extend(await trio.to_thread.run_sync(blocking))

            nursery.start_soon(run)
            await ready.wait()
            async with open_client(sim.socket_path) as client:
                await client.launch(["sh"], cwd="/", env={}, name="s", hold=False)
                sim.children[0].exit(3)
        assert kinds(result) == [("created", "s"), ("exited", "s")]
        assert result[1].exit_code == 3


# --- a watcher that stops reading ------------------------------------------------------


async def test_a_watcher_that_stops_reading_is_disconnected_and_holds_nobody_up(
    tmp_path: Path,
) -> None:
    """It fills its socket; the writer's send makes no progress for the
    stall timeout; it is let go, as a client that stops reading is. The
    others are served meanwhile."""
    sim = SimDaemon(tmp_path / "d.sock")
    sim.config = DaemonConfig(stall_timeout=0.5)
    async with sim.serving(), open_client(sim.socket_path) as client:
        stalled = await dial_async_raw_watcher(sim.socket_path)
        try:
            child = sim.add_child(name="s").id
            await sim.wait_connections(2)
            claims = 0
            with trio.fail_after(30):
                while sim.connections == 2:  # joined, left, ... until it is let go
                    claims += 1
                    [claimed] = await client.claim([child])
                    os.close(claimed.master)  # type: ignore[arg-type]
                    await client.release([child])
            assert await client.list()  # the other client is served as ever
            assert claims > 500  # it filled its socket first (two events a claim)
        finally:
            stalled.close()


async def dial_async_raw_watcher(path: Path) -> FramedSocket:
    """A connection that watches, then never reads again."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.connect(str(path))
    framed = FramedSocket(sock, Codec("client"))
    await framed.send(Hello(min_version=8, max_version=8))
    assert isinstance((await framed.receive()).message, Welcome)
    await framed.send(Watch(req=1))
    assert isinstance((await framed.receive()).message, Watching)
    return framed
