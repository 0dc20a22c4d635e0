"""The public test harness (multiserver.testing), driven by the real client
library over real Unix sockets. Every test runs on pytest-trio's
``autojump_clock``: simulated delays take virtual time, not wall time."""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from multiserver import (
    PROTOCOL_VERSION,
    ChildExited,
    ChildTaken,
    ConnectionClosed,
    GiveBack,
    PeerProtocolError,
    RequestFailed,
    VersionRefused,
    open_client,
)
from multiserver.protocol._codec import Codec
from multiserver.protocol._messages import Error, Hello, ListChildren
from multiserver.protocol._wire import FramedSocket
from multiserver.testing import (
    Behavior,
    Claim,
    Collect,
    Launch,
    Release,
    Rule,
    SimDaemon,
)
from tests.timing import by_deadline, connections_settle, within


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


async def read_fd(fd: int, max_bytes: int = 65536) -> bytes:
    """One read of a client's master fd, waiting for readability."""
    await trio.lowlevel.wait_readable(fd)
    return os.read(fd, max_bytes)


def close_fd(fd: int | None) -> None:
    if fd is not None:
        trio.lowlevel.notify_closing(fd)
        os.close(fd)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimDaemon]:
    """A serving simulated daemon with two children, "alpha" and "beta"."""
    daemon = SimDaemon(tmp_path / "sim.sock", instance_id="sim-1")
    daemon.add_child(["bash"], name="alpha", cwd="/home/me")
    daemon.add_child(["vim", "notes"], name="beta")
    async with daemon.serving():
        yield daemon


# --- the daemon's answers ---------------------------------------------------------


async def test_welcome_lists_children_without_fds(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.child(2).exit(3)
    async with open_client(sim.socket_path) as client:
        assert client.instance_id == "sim-1"
        assert client.daemon_pid == sim.pid
        welcome = client.welcome.children
        assert [(c.id, c.name, c.state, c.held) for c in welcome] == [
            (1, "alpha", "running", False),
            (2, "beta", "exited", False),
        ]
        assert welcome[0].argv == ["bash"] and welcome[0].cwd == "/home/me"
        assert welcome[1].exit_code == 3
        assert sim.connections == 1
        assert isinstance(sim.received[0], Hello)
    await connections_settle(sim, 0)


async def test_socket_is_private(sim: SimDaemon, autojump_clock: trio.testing.MockClock) -> None:
    st = os.lstat(sim.socket_path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(sim.socket_path.parent).st_mode) == 0o700


async def test_claim_of_several_children_gives_working_fds(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_client(sim.socket_path) as client:
        results = await client.claim([1, 2])
        assert [r.id for r in results] == [1, 2] and all(r.ok for r in results)
        try:
            for result in results:
                assert result.master is not None and result.child is not None
                assert result.child.held
                child = sim.child(result.id)
                assert child.held and child.holder == 1
                child.write_output(f"hello from {child.name}\r\n".encode())
                assert await read_fd(result.master) == f"hello from {child.name}\r\n".encode()
                os.write(result.master, b"ls\r")
                assert await child.read_input() == b"ls\r"
        finally:
            for result in results:
                close_fd(result.master)


async def test_claim_replays_output_buffered_while_unheld(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    sim = SimDaemon(tmp_path / "sim.sock", buffer_limit=16)
    child = sim.add_child()
    child.write_output(b"line one\n")
    child.write_output(b"line two\n")  # past the bound: the first line is dropped
    async with sim.serving(), open_client(sim.socket_path) as client:
        assert child.buffered == b"line two\n"
        [first] = await client.claim([child.id], keep_output=True)
        close_fd(first.master)
        assert (first.output, first.dropped) == (b"line two\n", 9)
        assert child.buffered == b"line two\n"  # keep_output: still there
        [result] = await client.claim([child.id])
        assert (result.output, result.dropped) == (b"line two\n", 9)
        assert child.buffered == b""
        assert result.master is not None
        try:
            # Written while held, left unread, released: back in the buffer.
            child.write_output(b"unread\n")
            assert await client.release([child.id]) == ([child.id], [])
            assert not child.held and child.buffered == b"unread\n"
            peeked = await client.peek(child.id)
            assert peeked.output == b"unread\n"
        finally:
            close_fd(result.master)


async def test_claim_and_release_errors_mirror_the_daemon(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_client(sim.socket_path) as first, open_client(sim.socket_path) as second:
        [mine] = await first.claim([1])
        close_fd(mine.master)
        missing, busy = await second.claim([99, 1])
        assert missing.error is not None and missing.error.errno == errno.ENOENT
        assert busy.error is not None and busy.error.errno == errno.EBUSY
        released, failures = await second.release([1, 99])
        assert released == []
        assert [(f.child_id, f.errno) for f in failures] == [(1, errno.EPERM), (99, errno.ENOENT)]
        [stolen] = await second.claim([1], steal=True)
        close_fd(stolen.master)
        assert sim.child(1).holder == 2
        with trio.fail_after(1):
            assert await first.notices.receive() == ChildTaken(id=1)
    await connections_settle(sim, 0)
    assert not sim.child(1).held  # the connection closed: released


async def test_exit_notice_collect_and_fresh_ids(
    sim: SimDaemon, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_client(sim.socket_path) as client:
        [held] = await client.claim([1])
        assert held.master is not None
        sim.child(1).write_output(b"bye\r\n")
        with pytest.raises(RequestFailed) as busy:
            await client.collect(1)
        assert busy.value.errno == errno.EBUSY
        sim.child(1).exit(7)
        with trio.fail_after(1):
            assert await client.notices.receive() == ChildExited(id=1, exit_code=7)
        assert await read_fd(held.master) == b"bye\r\n"
        assert await read_fd(held.master) == b""  # then EOF, like EIO on a PTY
        close_fd(held.master)
        info = await client.collect(1)
        assert (info.state, info.exit_code) == ("exited", 7)
        assert [c.id for c in sim.children] == [2]
        with pytest.raises(RequestFailed) as gone:
            await client.collect(1)
        assert gone.value.errno == errno.ENOENT
        launched = await client.launch(["bash"], cwd=str(tmp_path), hold=False)
        assert launched.child.id == 3 and launched.master is None  # ids are never reused
        assert len({c.pid for c in sim.children}) == 2


async def test_launch_makes_a_sim_child(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    sim = SimDaemon(tmp_path / "sim.sock", missing_commands={"nosuch"})
    async with sim.serving(), open_client(sim.socket_path) as client:
        launched = await client.launch(
            ["editor", "a.txt"], cwd=str(tmp_path), env={"TERM": "", "X": "1"}, name="ed"
        )
        assert launched.master is not None
        try:
            child = sim.child(launched.child.id)
            assert (child.argv, child.name, child.held) == (["editor", "a.txt"], "ed", True)
            assert child.env == {"TERM": "xterm-256color", "X": "1"}
            child.write_output(b"ready")
            assert await read_fd(launched.master) == b"ready"
        finally:
            close_fd(launched.master)
        failures = [
            (["nosuch"], str(tmp_path), "", errno.ENOENT),
            (["editor"], str(tmp_path), "ed", errno.EEXIST),
            (["editor"], str(tmp_path / "missing"), "", errno.ENOENT),
            (["editor"], "relative", "", errno.EINVAL),
            (["editor"], str(tmp_path), "bad name", errno.EINVAL),
        ]
        for argv, cwd, name, err in failures:
            with pytest.raises(RequestFailed) as exc_info:
                await client.launch(argv, cwd=cwd, name=name)
            assert exc_info.value.errno == err, (argv, cwd, name)
        assert len(sim.children) == 1


async def test_list_peek_resize_signal(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    alpha = sim.child(1)
    alpha.fg_pid, alpha.fg_cwd, alpha.fg_argv = 42, "/src", ["make"]
    alpha.write_output(b"abcdef")
    async with open_client(sim.socket_path) as client:
        listed = await client.list(foreground=True)
        assert (listed[0].fg_cwd, listed[0].fg_argv, listed[0].buffered_bytes) == (
            "/src",
            ["make"],
            6,
        )
        assert (await client.list())[0].fg_cwd is None
        assert (await client.peek(1, max_bytes=3)).output == b"def"
        await client.resize(1, 50, 132)
        assert (alpha.rows, alpha.cols) == (50, 132)
        await client.signal(1, signal.SIGINT)
        assert alpha.signals == [signal.SIGINT] and alpha.running
        for call, err in [
            (client.resize(1, 0, 80), errno.EINVAL),
            (client.signal(1, 0), errno.EINVAL),
            (client.peek(9), errno.ENOENT),
            (client.peek(1, max_bytes=-1), errno.EINVAL),
        ]:
            with pytest.raises(RequestFailed) as exc_info:
                await call
            assert exc_info.value.errno == err
        alpha.exit(0)
        with pytest.raises(RequestFailed) as exited:
            await client.signal(1, signal.SIGTERM)
        assert exited.value.errno == errno.ESRCH


async def test_read_input_ends_when_the_child_exits(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    child = sim.child(1)
    got: list[bytes] = []

    async def read() -> None:
        got.append(await child.read_input())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        child.exit(0)
    assert got == [b""]
    with pytest.raises(RuntimeError, match="exited"):
        child.write_output(b"late")
    with pytest.raises(ValueError, match="exists already"):
        sim.add_child(name="alpha")


async def test_shutdown_refused_then_forced_stops_the_sim(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    sim = SimDaemon(tmp_path / "sim.sock")
    sim.add_child()
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        async with open_client(sim.socket_path) as client:
            with pytest.raises(RequestFailed) as busy:
                await client.shutdown()
            assert busy.value.errno == errno.EBUSY
            await client.shutdown(force=True)
            with trio.fail_after(1):
                assert await client.notices.receive() == ChildExited(1, -signal.SIGHUP)
    # serve returned by itself: the nursery is done.
    assert not sim.socket_path.exists() and sim.children == []


async def test_a_peer_protocol_error_is_answered_then_closed(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.connect(str(sim.socket_path))
    framed = FramedSocket(sock, Codec("client"))
    try:
        await framed.send(ListChildren(req=1))  # before Hello
        event = await framed.receive()
        assert isinstance(event.message, Error) and event.message.req is None
        assert event.message.errno == errno.EPROTO
        with pytest.raises(ConnectionClosed):
            await framed.receive()
    finally:
        framed.close()


# --- behaviors --------------------------------------------------------------------------


def test_behavior_rules_compose_and_validate() -> None:
    both = Behavior.on(Claim, delay=3.0) | Behavior.on(Claim, delay=1.0, hang=True)
    assert both.rule(Claim) == Rule(delay=3.0, hang=True)
    assert both.rule(Release) == Rule()
    assert (Behavior(accept_never=True) | Behavior.on(Hello, refuse=True)).accept_never
    assert Behavior(rules={Launch: Rule(garbage=True)}) == Behavior.on(Launch, garbage=True)
    with pytest.raises(ValueError, match="Hello only"):
        Behavior.on(Claim, refuse=True)
    with pytest.raises(ValueError, match="not a message a client sends"):
        Behavior.on(Error, close=True)
    with pytest.raises(ValueError, match="delay"):
        Rule(delay=-1)


async def test_delay_takes_virtual_time_not_wall_time(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(Claim, delay=30.0)
    async with open_client(sim.socket_path) as client:
        wall, virtual = time.monotonic(), trio.current_time()
        [result] = await by_deadline("a claim delayed 30 s", 30.0, client.claim([1]))
        close_fd(result.master)
        assert trio.current_time() - virtual == pytest.approx(30.0)
        assert time.monotonic() - wall < 2.0
        assert result.ok


async def test_hang_holds_the_client_until_its_deadline(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(Claim, hang=True)
    async with open_client(sim.socket_path) as client:
        start = trio.current_time()
        with trio.move_on_after(5) as scope:
            await client.claim([1])
        assert scope.cancelled_caught
        assert trio.current_time() - start == pytest.approx(5.0)
        assert sim.connections == 1  # wedged, not closed
        assert not sim.child(1).held
    await connections_settle(sim, 0)  # the client closed: the sim notices


async def test_a_wedged_daemon_does_not_hold_up_a_healthy_one(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The shape of a restore: claim on every daemon at once under one deadline."""
    healthy = SimDaemon(tmp_path / "a.sock")
    wedged = SimDaemon(tmp_path / "b.sock", behavior=Behavior.on(Claim, hang=True))
    for daemon in (healthy, wedged):
        daemon.add_child(["bash"])
    got: dict[str, bool] = {}

    async def attach(name: str, daemon: SimDaemon) -> None:
        async with open_client(daemon.socket_path) as client:
            [result] = await client.claim([1])
            close_fd(result.master)
            got[name] = result.ok

    async with healthy.serving(), wedged.serving():
        with trio.move_on_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attach, "healthy", healthy)
                nursery.start_soon(attach, "wedged", wedged)
    assert got == {"healthy": True}
    assert trio.current_time() == pytest.approx(10.0)


async def test_crash_mid_frame_gives_connection_closed(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    before = open_fds()
    sim.behavior = Behavior.on(Claim, crash_mid_frame=True)
    async with open_client(sim.socket_path) as client:
        with pytest.raises(ConnectionClosed, match="middle of a frame"):
            await client.claim([1, 2])
    await connections_settle(sim, 0)
    assert not sim.child(1).held and not sim.child(2).held
    assert open_fds() == before  # the fd sent with the half frame was closed


async def test_crash_mid_welcome_gives_connection_closed(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(Hello, crash_mid_frame=True)
    with pytest.raises(ConnectionClosed):
        async with open_client(sim.socket_path):
            pass


async def test_refuse_gives_version_refused(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(Hello, refuse=True)
    with pytest.raises(VersionRefused, match="refused by the simulated daemon"):
        async with open_client(sim.socket_path):
            pass
    await connections_settle(sim, 0)


async def test_garbage_gives_peer_protocol_error(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(Hello, garbage=True)
    with pytest.raises(PeerProtocolError, match="bad magic"):
        async with open_client(sim.socket_path):
            pass


async def test_garbage_after_the_handshake_breaks_the_connection(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(ListChildren, garbage=True)
    async with open_client(sim.socket_path) as client:
        # The protocol error breaks the connection, and keeps its type: this
        # request and every later one raise it.
        for _ in range(2):
            with pytest.raises(PeerProtocolError, match="bad magic"):
                await client.list()


async def test_wrong_version_on_a_reply_breaks_the_connection(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(ListChildren, wrong_version=True)
    async with open_client(sim.socket_path) as client:
        with pytest.raises(
            PeerProtocolError,
            match=f"frame has protocol version {PROTOCOL_VERSION + 1}, negotiated {PROTOCOL_VERSION}",
        ):
            await client.list()


async def test_wrong_version_welcome_is_refused_by_the_client(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior.on(Hello, wrong_version=True)
    with pytest.raises(
        VersionRefused, match=f"daemon picked protocol version {PROTOCOL_VERSION + 1}"
    ):
        async with open_client(sim.socket_path):
            pass


async def test_accept_never_leaves_the_handshake_waiting(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    sim.behavior = Behavior(accept_never=True)
    with trio.move_on_after(3) as scope:
        async with open_client(sim.socket_path):
            pass
    assert scope.cancelled_caught and sim.connections == 0
    sim.behavior = Behavior()  # it recovers: the next client is served
    async with open_client(sim.socket_path) as client:
        assert len(client.welcome.children) == 2


async def test_hello_may_ask_for_no_listing(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_client(sim.socket_path, children=False) as client:
        assert client.welcome.children == [] and client.version == PROTOCOL_VERSION
        # The children are there all the same: listing and claiming work.
        assert [c.id for c in await client.list()] == [1, 2]
        [claimed] = await client.claim([1])
        assert claimed.ok and claimed.master is not None
        os.close(claimed.master)


async def test_close_on_a_message(sim: SimDaemon, autojump_clock: trio.testing.MockClock) -> None:
    sim.behavior = Behavior.on(Collect, close=True) | Behavior.on(Hello, delay=1.0)
    with within("a hello delayed 1 s", 1.0):
        async with open_client(sim.socket_path) as client:
            assert trio.current_time() == pytest.approx(1.0)
            with pytest.raises(ConnectionClosed):
                await client.collect(1)
    sim.behavior = Behavior.on(Hello, close=True)
    with pytest.raises(ConnectionClosed):
        async with open_client(sim.socket_path):
            pass


# --- fds ------------------------------------------------------------------------------


async def test_stopping_the_sim_closes_every_fd(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    before = open_fds()
    sim = SimDaemon(tmp_path / "sim.sock")
    for _ in range(3):
        sim.add_child().write_output(b"x" * 1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        async with open_client(sim.socket_path) as client:
            results = await client.claim([1, 2])
            launched = await client.launch(["sh"], cwd=str(tmp_path))
            sim.child(3).exit(0)
            assert len(open_fds()) > len(before)
            for fd in [launched.master, *(r.master for r in results)]:
                close_fd(fd)
            sim.stop()  # while the client is still connected
            await sim.wait_stopped()
            with pytest.raises(ConnectionClosed):
                await client.list()
    assert open_fds() == before
    assert not sim.socket_path.exists()
    with pytest.raises(RuntimeError):
        sim.child(1).write_output(b"late")


async def test_a_sim_that_never_served_closes_on_close(tmp_path: Path) -> None:
    before = open_fds()
    sim = SimDaemon(tmp_path / "sim.sock")
    sim.add_child()
    assert len(open_fds()) == len(before) + 2
    sim.close()
    assert open_fds() == before
    with pytest.raises(RuntimeError):
        await sim.serve()


async def test_the_sim_shares_a_child_as_the_daemon_does(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    """Protocol 9 on the simulated daemon: a join asks the holder to give
    reading back, then both are fed what the child writes, and the one left
    alone reads its fd again once its feed ends; a wedged reader is
    disconnected after 5 s (virtual time)."""
    async with open_client(sim.socket_path) as a, open_client(sim.socket_path) as b:
        (held,) = await a.claim([1], join=True)  # a client that shares
        assert held.master is not None
        child = sim.child(1)
        feeds: list[int] = []
        async with trio.open_nursery() as nursery:

            async def give_back() -> None:
                notice = await a.notices.receive()
                assert isinstance(notice, GiveBack) and notice.id == 1
                feeds.append(await a.hand_back(1, b"shown by a"))

            nursery.start_soon(give_back)
            (joined,) = await b.claim([1], join=True)
        assert joined.output == b"shown by a" and joined.feed is not None
        assert joined.child is not None and joined.child.holders == 2
        child.write_output(b"to both")
        for feed in (feeds[0], joined.feed):
            assert await read_fd(feed) == b"to both"
        os.write(joined.master or -1, b"typed by b")
        assert await child.read_input() == b"typed by b"
        await b.release([1])
        assert await read_fd(feeds[0]) == b""  # a's feed ends: a reads its fd again
        child.write_output(b"to a alone")
        assert await read_fd(held.master) == b"to a alone"
        # A reader that does not answer: the join is served 5 s on, the reader cut off.
        async with open_client(sim.socket_path) as c:
            with trio.fail_after(10):
                (watching,) = await c.claim([1], read_only=True)
            assert watching.master is None and watching.feed is not None
            with pytest.raises(ConnectionClosed):
                await a.list()
            for fd in (watching.feed, joined.master, joined.feed, feeds[0], held.master):
                close_fd(fd)


async def test_a_taken_holders_feed_ends_only_after_the_grace(
    sim: SimDaemon, autojump_clock: trio.testing.MockClock
) -> None:
    """A takeover leaves the taken holders' feeds open and quiet: their end
    would tell a typing holder to read the master. A client that stays
    connected does not keep one for ever: it ends TAKEN_GRACE (10 s) on."""
    async with (
        open_client(sim.socket_path) as a,
        open_client(sim.socket_path) as b,
        open_client(sim.socket_path) as c,
    ):
        (held,) = await a.claim([1], join=True)
        feeds: list[int] = []
        async with trio.open_nursery() as nursery:

            async def give_back() -> None:
                notice = await a.notices.receive()
                assert isinstance(notice, GiveBack)
                feeds.append(await a.hand_back(1, b""))  # not read in this test

            nursery.start_soon(give_back)
            (joined,) = await b.claim([1], join=True)
        assert joined.feed is not None
        (taken,) = await c.claim([1], steal=True)
        start = trio.current_time()
        async for notice in b.notices:
            if isinstance(notice, ChildTaken):
                break
        with trio.fail_after(30):
            assert await read_fd(joined.feed) == b""
        assert trio.current_time() - start >= 10
        for fd in (held.master, joined.master, joined.feed, taken.master, *feeds):
            close_fd(fd)
