"""Several clients on one real session (protocol 9, docs/sharing.md): two
that type and one that watches see the same bytes; the reader gives
reading back when another joins and gets the master again when it is
left alone; the size follows the policy; the events tell it in order."""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Awaitable, Callable

import pytest
import trio

from multiserver import (
    ChildTaken,
    ClaimResult,
    Client,
    ConnectionClosed,
    GiveBack,
    RequestFailed,
    SessionEvent,
    Skipped,
    open_client,
)
from multiserver.system._platform import get_winsize
from tests.conftest import RunningDaemon, close_fd, read_some, read_until
from tests.multiserver.daemon.test_upgrade import upgraded

# A program that writes "%08d\r\n" lines without end, as fast as it can:
# every byte of it is known, so a gap, a byte twice or out of order shows.
COUNTER = "import os,sys\ni=0\nwhile True:\n    os.write(1, b''.join(b'%08d\\n' % (i + k) for k in range(64)))\n    i += 64\n"


def line(i: int) -> bytes:
    return b"%08d\r\n" % i


async def give_back_when_asked(client: Client, child_id: int, shown: bytes = b"") -> int:
    """Wait for the GiveBack of ``child_id`` and answer it: the feed."""
    with trio.fail_after(5):
        async for notice in client.notices:
            if isinstance(notice, GiveBack) and notice.id == child_id:
                return await client.hand_back(child_id, shown)
    raise AssertionError("notices ended")


async def join_beside(reader: Client, joiner: Client, child: int) -> tuple[ClaimResult, int]:
    """``joiner`` joins ``child``, which ``reader`` reads; ``reader``
    gives reading back when asked: (the join's result, the reader's feed)."""
    fed: list[int] = []
    async with trio.open_nursery() as nursery:

        async def answer() -> None:
            fed.append(await give_back_when_asked(reader, child))

        nursery.start_soon(answer)
        (joined,) = await joiner.claim([child], join=True)
    return joined, fed[0]


async def test_two_typing_clients_and_a_watcher_see_every_byte(daemon: RunningDaemon) -> None:
    async with (
        open_client(daemon.paths) as a,
        open_client(daemon.paths) as b,
        open_client(daemon.paths) as c,
        open_client(daemon.paths) as watcher,
    ):
        await watcher.watch()
        launched = await a.launch(["cat"], name="shared", rows=30, cols=100, share=True)
        child, master_a = launched.child.id, launched.master
        assert master_a is not None
        joined, fed = await join_beside(a, b, child)
        feed_a = fed
        assert joined.error is None and joined.master is not None and joined.feed is not None
        assert joined.child is not None and joined.child.holders == 2
        (watching,) = await c.claim([child], read_only=True)
        assert watching.master is None and watching.feed is not None
        os.write(joined.master, b"from b\n")  # b types
        for feed in (feed_a, joined.feed, watching.feed):
            await read_until(feed, b"from b\r\nfrom b\r\n")
        os.write(master_a, b"from a\n")  # a types too, into its own copy of the master
        for feed in (feed_a, joined.feed, watching.feed):
            await read_until(feed, b"from a\r\nfrom a\r\n")
        (listed,) = await a.list(ids=[child])
        assert (listed.holders, listed.watchers) == (3, 1)
        # b goes; a and the watcher go on, still fed.
        await b.release([child])
        close_fd(joined.master)
        os.write(master_a, b"after b\n")
        for feed in (feed_a, watching.feed):
            await read_until(feed, b"after b\r\nafter b\r\n")
        assert await read_some(joined.feed) == b""  # its feed ended with its hold
        close_fd(joined.feed)
        # The watcher goes: a, alone, reads the master itself again, after
        # its feed ends (nothing read by both, nothing by neither).
        await c.release([child])
        close_fd(watching.feed)
        with trio.fail_after(5):
            rest = b""
            while chunk := await read_some(feed_a):
                rest += chunk
        close_fd(feed_a)
        assert rest == b""
        os.write(master_a, b"alone\n")
        await read_until(master_a, b"alone\r\nalone\r\n")
        close_fd(master_a)
        kinds = []
        with trio.fail_after(5):
            async for event in watcher.events():
                if (
                    isinstance(event, SessionEvent)
                    and event.id == child
                    and event.kind != "activity"
                ):
                    kinds.append((event.kind, event.client))
                if len(kinds) == 6:
                    break
        clients = [client for _, client in kinds]
        assert [k for k, _ in kinds] == ["created", "joined", "joined", "joined", "left", "left"]
        assert clients[0] == clients[1] and len(set(clients[1:4])) == 3
        assert kinds[4][1] == kinds[2][1] and kinds[5][1] == kinds[3][1]


async def test_a_watcher_cannot_be_joined_by_an_old_way_and_never_sizes(
    daemon: RunningDaemon,
) -> None:
    """A watcher's size never counts; by the default policy the session
    takes the size of the holder that resized (or typed) last."""
    async with open_client(daemon.paths) as a, open_client(daemon.paths) as b:
        launched = await a.launch(["cat"], name="sized", rows=30, cols=100, share=True)
        child, master = launched.child.id, launched.master
        assert master is not None
        joined, fed = await join_beside(a, b, child)
        assert joined.master is not None and joined.feed is not None
        await a.resize(child, 40, 120)
        assert get_winsize(master) == (40, 120)
        await b.resize(child, 20, 60)
        assert get_winsize(master) == (20, 60)
        await a.resize(child, 40, 120)  # a again: the latest
        assert get_winsize(master) == (40, 120)
        async with open_client(daemon.paths) as c:
            (watching,) = await c.claim([child], read_only=True)
            await c.resize(child, 5, 5)
            assert get_winsize(master) == (40, 120)
            close_fd(watching.feed)
        # A second join of the same client is refused in one line.
        with pytest.raises(RequestFailed, match="holds session sized already"):
            await b.claim([child], join=True)
        for fd in (master, joined.master, joined.feed, fed):
            close_fd(fd)


async def test_the_smallest_size_policy(
    start_daemon: Callable[[], Awaitable[RunningDaemon]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MULTISERVER_SHARE_SIZE", "smallest")
    daemon = await start_daemon()
    async with open_client(daemon.paths) as a, open_client(daemon.paths) as b:
        launched = await a.launch(["cat"], name="small", rows=30, cols=100, share=True)
        child, master = launched.child.id, launched.master
        assert master is not None
        joined, fed = await join_beside(a, b, child)
        await a.resize(child, 40, 80)
        await b.resize(child, 50, 60)
        assert get_winsize(master) == (40, 60)
        await a.resize(child, 45, 200)
        assert get_winsize(master) == (45, 60)
        await b.release([child])  # alone: its own size
        await a.resize(child, 45, 200)
        assert get_winsize(master) == (45, 200)
        for fd in (master, joined.master, joined.feed, fed):
            close_fd(fd)


async def test_a_reader_that_never_gives_back_is_disconnected(daemon: RunningDaemon) -> None:
    """The join waits at most HANDBACK_TIMEOUT (5 s) for a reader that
    does not answer; then it is cut off, and the join is served."""
    async with open_client(daemon.paths) as a, open_client(daemon.paths) as b:
        launched = await a.launch(["cat"], name="deaf", share=True)
        child, master = launched.child.id, launched.master
        with trio.fail_after(10):
            (joined,) = await b.claim([child], join=True)
        assert joined.feed is not None and joined.master is not None
        with pytest.raises(ConnectionClosed), trio.fail_after(5):
            await a.list()
        for fd in (master, joined.master, joined.feed):
            close_fd(fd)


async def test_no_byte_is_lost_doubled_or_reordered_through_many_switches(
    daemon: RunningDaemon,
) -> None:
    """A program floods; a second client joins and leaves, again and again:
    at each join the reader gives reading back, at each leave it gets the
    master again. The reader's bytes are the program's, whole and in order;
    each joiner's feed starts where the reader stopped."""
    switches = 1000
    async with open_client(daemon.paths) as a, open_client(daemon.paths) as b:
        launched = await a.launch([sys.executable, "-c", COUNTER], name="flood", share=True)
        child, master = launched.child.id, launched.master
        assert master is not None
        os.set_blocking(master, False)
        got = bytearray()  # all a showed
        send_joined, receive_joined = trio.open_memory_channel[ClaimResult](1)

        async def read_while(fd: int, stop: trio.Event) -> None:
            """Read ``fd`` into ``got`` until ``stop`` or its end."""
            while not stop.is_set():
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    with trio.move_on_after(0.01):
                        await trio.lowlevel.wait_readable(fd)
                    continue
                except OSError as exc:
                    assert exc.errno == errno.EIO
                    return
                if not data:
                    return
                got.extend(data)

        async def join() -> None:
            (result,) = await b.claim([child], join=True)
            await send_joined.send(result)

        for _ in range(switches):
            stop = trio.Event()
            async with trio.open_nursery() as outer:
                outer.start_soon(join)
                async with trio.open_nursery() as reading:
                    reading.start_soon(read_while, master, stop)
                    with trio.fail_after(10):
                        async for notice in a.notices:
                            if isinstance(notice, GiveBack):
                                break
                    stop.set()
                stopped_at = len(got)  # a reads the master no more: it hands back
                feed = await a.hand_back(child, b"")
            joined = await receive_joined.receive()
            assert joined.feed is not None
            os.set_blocking(feed, False)
            os.set_blocking(joined.feed, False)
            async with trio.open_nursery() as fed:
                fed.start_soon(read_while, feed, trio.Event())  # until b leaves
                own = bytearray()
                with trio.fail_after(10):
                    while len(own) < 100:
                        try:
                            own.extend(os.read(joined.feed, 65536))
                        except BlockingIOError:
                            await trio.lowlevel.wait_readable(joined.feed)
                await b.release([child])
            close_fd(joined.master)
            close_fd(joined.feed)
            close_fd(feed)
            assert bytes(own) == bytes(got[stopped_at : stopped_at + len(own)])
        await a.signal(child, 9)
        close_fd(master)
        assert a.notices_dropped == 0
        whole, rest = divmod(len(got), 10)
        assert bytes(got[: whole * 10]) == b"".join(line(i) for i in range(whole))
        assert bytes(got[whole * 10 :]) == line(whole)[:rest]


async def test_a_watcher_that_stops_reading_slows_nobody(daemon: RunningDaemon) -> None:
    """A watcher that reads nothing: the typing holder still gets all of a
    flood, whole and in order, the program runs to its end meanwhile (it
    waits at most LAG_WAIT for the watcher each time), and the watcher,
    once it reads again, is told what it missed and gets a redraw."""
    lines = 400_000  # 4 MB: four times what a feed holds
    program = f"import os\nfor i in range(0, {lines}, 1000):\n    os.write(1, b''.join(b'%08d\\n' % k for k in range(i, i + 1000)))\nimport time\ntime.sleep(1000)\n"
    async with open_client(daemon.paths) as a, open_client(daemon.paths) as c:
        launched = await a.launch([sys.executable, "-c", program], name="flood", share=True)
        child, master = launched.child.id, launched.master
        assert master is not None
        async with trio.open_nursery() as nursery:
            fed: list[int] = []

            async def answer() -> None:
                fed.append(await give_back_when_asked(a, child))

            nursery.start_soon(answer)
            (watching,) = await c.claim([child], read_only=True)
        assert watching.feed is not None and not watching.output
        feed = fed[0]
        os.set_blocking(feed, False)
        got = bytearray()
        with trio.fail_after(30):
            while len(got) < lines * 10:
                try:
                    got.extend(os.read(feed, 1 << 20))
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(feed)
        assert bytes(got) == b"".join(line(i) for i in range(lines))
        # The watcher reads again: all it can, then it is told it skipped.
        os.set_blocking(watching.feed, False)
        seen = bytearray()
        with trio.fail_after(10):
            async for notice in c.notices:
                while True:
                    try:
                        seen.extend(os.read(watching.feed, 1 << 20))
                    except BlockingIOError:
                        break
                if isinstance(notice, Skipped):
                    break
        assert 0 < notice.missed < lines * 10
        assert seen.startswith(line(0)) and b"\x1b[H\x1b[2J" in seen
        for fd in (master, feed, watching.feed):
            close_fd(fd)


async def test_a_holder_that_does_not_share_is_never_asked(daemon: RunningDaemon) -> None:
    """A client that took a session without saying it shares (a launch
    without ``share``, a claim without ``join``: any client written before
    sharing) is never sent GiveBack: a join is refused in one line, and a
    takeover takes it as before."""
    async with open_client(daemon.paths) as a, open_client(daemon.paths) as b:
        launched = await a.launch(["cat"], name="mine")
        with pytest.raises(RequestFailed, match="held by a client that does not share it") as err:
            await b.claim([launched.child.id], join=True)
        assert err.value.errno == errno.EBUSY
        with pytest.raises(RequestFailed, match="does not share"):
            await b.claim([launched.child.id], read_only=True)
        (taken,) = await b.claim([launched.child.id], steal=True)
        assert taken.master is not None and taken.feed is None
        with trio.fail_after(5):
            notice = await a.notices.receive()
        assert isinstance(notice, ChildTaken) and notice.id == launched.child.id
        for fd in (launched.master, taken.master):
            close_fd(fd)


async def test_an_upgrade_waits_for_sharing_and_keeps_who_shares(daemon: RunningDaemon) -> None:
    """Shared, the daemon refuses to upgrade, in one line; held by one
    client again, it upgrades, and that client, which said it shares, is
    still asked to give reading back when another joins (and one that did
    not say so is still never asked)."""
    async with (
        open_client(daemon.paths) as a,
        open_client(daemon.paths) as b,
        open_client(daemon.paths) as c,
    ):
        shared = await a.launch(["cat"], name="sh", share=True)
        mine = await c.launch(["cat"], name="mine")
        joined, feed = await join_beside(a, b, shared.child.id)
        with pytest.raises(RequestFailed, match=re.escape("1 session(s) are shared")) as err:
            await upgraded(daemon)
        assert err.value.errno == errno.EBUSY
        await b.release([shared.child.id])
        close_fd(joined.master)
        close_fd(joined.feed)
        await read_some(feed)  # its end: a reads the master again
        close_fd(feed)
        await upgraded(daemon)
        joined, feed = await join_beside(a, b, shared.child.id)
        assert joined.feed is not None
        with pytest.raises(RequestFailed, match="does not share"):
            await b.claim([mine.child.id], join=True)
        for fd in (joined.master, joined.feed, feed, shared.master, mine.master):
            close_fd(fd)
