"""The daemon at its edges, each case as a hostile client or a careless user
met it: an answer that spans frames while fds are reused under it, a claim at
the fd limit or past the frame limit, argv too big to list. Real daemon, real
PTYs; each test reproduces a failure that was seen (docs/reliability.md)."""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import stat
from collections.abc import Awaitable, Callable

import pytest
import trio

from multiserver import Client, RequestFailed, open_client
from multiserver.protocol._codec import HEADER, MAGIC, MAX_FRAME, Codec
from multiserver.protocol._messages import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Claim,
    Hello,
    Launch,
    ListChildren,
    Peek,
    Peeked,
)
from tests.cli.conftest import ms
from tests.conftest import (
    MsDirs,
    RunningDaemon,
    connected_clients,
    fd_count,
    fd_links,
    proc_status,
)
from tests.reliability._raw import RawConnection
from tests.reliability._report import record
from tests.timing import TIMER_SLACK

# The largest buffer a daemon may have (MAX_BUFFER_LIMIT).
BIG = 8 * 1024 * 1024


def is_pty_master(fd: int) -> bool:
    st = os.fstat(fd)
    return stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (5, 2)


async def launch_many(client: Client, argv: list[str], n: int) -> list[int]:
    ids = []
    for _ in range(n):
        ids.append((await client.launch(argv, hold=False)).child.id)
    return ids


async def wait_buffered(client: Client, ids: list[int], at_least: int) -> None:
    async def enough() -> bool:
        listed = {c.id: c.buffered_bytes for c in await client.list()}
        return all(listed[i] >= at_least for i in ids)

    with trio.fail_after(20):
        while not await enough():
            await trio.sleep(0.01)


async def test_a_claim_across_frames_gets_only_pty_masters_while_fds_are_reused(
    ms_dirs: MsDirs,
    monkeypatch: pytest.MonkeyPatch,
    start_daemon: Callable[[], Awaitable[RunningDaemon]],
) -> None:
    """Seen: 8 PTYs, then a dup of another connection's socket. The answer
    to a claim of 300 children needs two Claimed frames. A client that does
    not read lets the daemon's outbox fill: a peek of almost 8 MiB, then the
    claim's first frame pass its high-water mark; meanwhile a child of the
    second frame is collected and new connections take the lowest free fd
    numbers."""
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", str(BIG))
    daemon = await start_daemon()
    almost = BIG - 2000  # the peek alone stays under the high-water mark
    async with open_client(daemon.paths) as setup:
        [big] = await launch_many(
            setup, ["sh", "-c", f"head -c {almost} /dev/zero | tr '\\0' x; exec cat"], 1
        )
        kids = await launch_many(setup, ["cat"], 300)
        await wait_buffered(setup, [big], almost)
        slow = RawConnection.connect(str(daemon.paths.socket))
        try:
            slow.hello()
            slow.send(Peek(req=1, id=big))
            slow.send(Claim(req=3, ids=kids))
            victim = kids[280]  # in the second frame of the answer
            await setup.signal(victim, 9)
            with trio.fail_after(10):
                while (await setup.peek(victim, 0)).child.state != "exited":
                    await trio.sleep(0.01)
            await setup.collect(victim)
            newcomers = [RawConnection.connect(str(daemon.paths.socket)) for _ in range(20)]
            try:
                for raw in newcomers:
                    raw.hello()
                [peeked] = await trio.to_thread.run_sync(lambda: slow.replies(1, 1))
                assert isinstance(peeked.message, Peeked)
                parts = await trio.to_thread.run_sync(lambda: slow.claim_answer(3))
            finally:
                for raw in newcomers:
                    raw.close()
        finally:
            slow.close()
    try:
        masters = sum(1 for p in parts if p.fd is not None and is_pty_master(p.fd))
        victim_part = next(p for p in parts if p.part.id == victim)
        record(
            "claim_across_frames",
            children=len(kids),
            pty_masters=masters,
            other_fds=sum(1 for p in parts if p.fd is not None) - masters,
            collected_child=victim_part.part.message or "claimed before it was collected",
            new_connections=20,
        )
        assert [p.part.id for p in parts] == kids
        for p in parts:
            if p.part.id == victim and p.fd is None:
                assert p.part.errno == errno.ENOENT and p.part.message == f"no child {victim}"
            else:
                assert p.fd is not None and is_pty_master(p.fd), (p.part.id, p.fd)
    finally:
        for p in parts:
            if p.fd is not None:
                os.close(p.fd)


def limit_leaving(pid: int, free: int) -> int:
    """The RLIMIT_NOFILE under which process ``pid`` has exactly ``free``
    fd numbers left."""
    used = set(fd_links(pid))
    limit = 0
    while free > 0 or limit in used:
        if limit not in used:
            free -= 1
        limit += 1
    return limit


async def test_a_claim_at_the_fd_limit_keeps_the_output_and_leaks_nothing(
    daemon: RunningDaemon,
) -> None:
    """Seen: the buffers emptied, EIO, dropped_bytes 0; 13 fds leaked for good."""
    async with open_client(daemon.paths) as client:
        ids = await launch_many(client, ["sh", "-c", "echo out-$$; exec cat"], 20)
        await wait_buffered(client, ids, 4)
        before = {i: (await client.peek(i)).output for i in ids}
        fds_before = fd_count(daemon.pid)
        soft, hard = resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (limit_leaving(daemon.pid, 5), hard))
        try:
            with pytest.raises(RequestFailed) as failed:
                await client.claim(ids)
            assert failed.value.errno == errno.EMFILE
            assert "nothing was claimed and the output is kept" in failed.value.message
            fds_after = fd_count(daemon.pid)
            assert fds_after == fds_before  # the dups made were closed
        finally:
            resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (soft, hard))
        listed = {c.id: c for c in await client.list()}
        assert not any(listed[i].held for i in ids)
        assert all(listed[i].dropped_bytes == 0 for i in ids)
        results = await client.claim(ids)
        record(
            "claim_at_fd_limit",
            children=len(ids),
            error=failed.value.message,
            daemon_fds_before=fds_before,
            daemon_fds_after=fds_after,
            outputs_intact=sum(1 for r in results if r.output == before[r.id]),
        )
        try:
            assert {r.id: r.output for r in results} == before
            assert all(r.master is not None and is_pty_master(r.master) for r in results)
        finally:
            for r in results:
                if r.master is not None:
                    os.close(r.master)


async def test_a_claim_past_the_frame_limit_is_refused_whole_and_keeps_the_output(
    daemon: RunningDaemon,
) -> None:
    """Seen: a Claim of one real id and 200,000 unknown ones emptied the
    child's buffer and answered EIO."""
    async with open_client(daemon.paths) as client:
        [kid] = await launch_many(client, ["sh", "-c", "echo precious; exec cat"], 1)
        await wait_buffered(client, [kid], 8)
        t0 = trio.current_time()
        with pytest.raises(RequestFailed) as failed:
            await client.claim([kid, *range(10_000, 210_000)])
        took = trio.current_time() - t0
        assert failed.value.errno == errno.EINVAL
        assert "at most 100000 in one request" in failed.value.message
        peeked = await client.peek(kid)
        assert b"precious" in peeked.output and not peeked.child.held
        [result] = await client.claim([kid])
        record(
            "claim_past_frame_limit",
            ids=200_001,
            error=failed.value.message,
            seconds=round(took, 3),
            output_intact=b"precious" in result.output,
        )
        assert b"precious" in result.output
        assert result.master is not None
        os.close(result.master)


async def test_ten_children_with_huge_argv_are_all_listed(
    daemon: RunningDaemon, ms_dirs: MsDirs
) -> None:
    """Seen: every listing passed the frame limit; `ls` said "no sessions"
    and exited 0, and new, peek, kill and stop failed."""
    argv = ["sh", "-c", "read line", *(["a" * 100_000] * 18)]  # 1.8 MB each
    async with open_client(daemon.paths) as client:
        ids = await launch_many(client, argv, 10)
        t0 = trio.current_time()
        listed = await client.list()
        took = trio.current_time() - t0
        assert [c.id for c in listed] == ids
        for c in listed:
            assert c.argv[:3] == argv[:3] and c.argv[-1].endswith("…")
            assert sum(map(len, c.argv)) - 1 + c.argv_omitted == sum(map(len, argv))
    out = await ms(ms_dirs, "ls", "--json")
    record(
        "huge_argv_listed",
        children=10,
        argv_bytes_each=sum(map(len, argv)),
        listed_argv_chars=sum(map(len, listed[0].argv)),
        argv_omitted=listed[0].argv_omitted,
        list_seconds=round(took, 3),
        ls_rows=len(json.loads(out.stdout)),
    )
    assert out.returncode == 0
    assert len(json.loads(out.stdout)) == 10
    table = await ms(ms_dirs, "ls")
    assert table.stdout.count(b"\n") == 11 and b"no sessions" not in table.stderr
    launched = await ms(ms_dirs, "new", "-d", "-n", "after", "--", "cat")
    assert launched.returncode == 0
    # The child keeps its whole argv: what runs is what was asked for.
    with open(f"/proc/{listed[0].pid}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[:-1] == [a.encode() for a in argv]


# --- what clients send: bounded in time, memory and fds ------------------------------


# The frame deadline of the stalled-frames test: long enough that an ordinary
# client is served before it on a busy machine.
DEADLINE = 5.0


def vm_kib(pid: int, field: str) -> int:
    return int(proc_status(pid)[field].split()[0])


async def stalled_frame(path: str, body_len: int, sent: list[int]) -> float:
    """Say hello, then send all but the last byte of a Launch frame of
    ``body_len`` bytes of body; return how long after its first byte the
    daemon hung up."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock:
        await sock.connect(path)
        await sock.send(
            Codec("client").send(
                Hello(min_version=MIN_PROTOCOL_VERSION, max_version=PROTOCOL_VERSION)
            )
        )
        header = HEADER.pack(MAGIC, PROTOCOL_VERSION, Launch.TYPE, 0, body_len, 0)
        data = memoryview(header + b" " * (body_len - 1))
        t0 = trio.current_time()
        try:
            while data:
                n = await sock.send(data[: 1 << 20])
                sent[0] += n
                data = data[n:]
            await sock.recv(1 << 16)  # the welcome, then nothing until the daemon hangs up
            while await sock.recv(1 << 16):
                pass
        except OSError:
            pass
        return trio.current_time() - t0


async def test_stalled_huge_frames_are_bounded_in_memory_and_dropped_at_the_deadline(
    ms_dirs: MsDirs,
    monkeypatch: pytest.MonkeyPatch,
    start_daemon: Callable[[], Awaitable[RunningDaemon]],
) -> None:
    """Seen: 30 connections sending all but the last bytes of a 16 MiB frame
    took the daemon from 30 to 528 MB, for as long as they stayed."""
    monkeypatch.setenv("MULTISERVER_FRAME_TIMEOUT", str(DEADLINE))
    daemon = await start_daemon()
    base = vm_kib(daemon.pid, "VmHWM")
    sent = [0]
    body = MAX_FRAME - HEADER.size
    times: list[float] = []

    async def one() -> None:
        times.append(await stalled_frame(str(daemon.paths.socket), body, sent))

    async with trio.open_nursery() as nursery:
        for _ in range(30):
            nursery.start_soon(one)
        # Meanwhile an ordinary client is served, well before the deadline
        # frees anything (a bound for a busy machine, not a figure).
        with trio.fail_after(DEADLINE - 1):
            async with open_client(daemon.paths) as client:
                launched = await client.launch(["cat"], hold=False)
                assert [c.id for c in await client.list()] == [launched.child.id]
    peak = vm_kib(daemon.pid, "VmHWM")
    record(
        "stalled_huge_frames",
        connections=30,
        frame_bytes=MAX_FRAME,
        daemon_peak_rss_kib=peak,
        daemon_peak_rss_kib_before=base,
        dropped_after_s=[round(min(times), 2), round(max(times), 2)],
        frame_timeout_s=DEADLINE,
        bytes_sent_by_clients=sent[0],
    )
    assert len(times) == 30
    assert peak < 64 * 1024, f"daemon peaked at {peak} KiB"
    assert max(times) < DEADLINE + 5, times  # dropped at the deadline, not held
    assert min(times) >= DEADLINE - 0.5, times
    assert sent[0] > 16 * 1024 * 1024  # the daemon did read a frame's worth


async def test_a_partial_frame_with_fds_is_dropped_and_its_fds_closed(
    daemon: RunningDaemon,
) -> None:
    """Seen: fds sent with the first bytes of a frame that never completes
    pinned 1,012 of the daemon's fds, then `new` failed for everyone."""
    with trio.fail_after(5):  # the fixture's own connection is gone
        while connected_clients(daemon.pid, daemon.paths.socket):
            await trio.sleep(0.01)
    before = fd_count(daemon.pid)
    pipes = [os.pipe() for _ in range(40)]
    raw = RawConnection.connect(str(daemon.paths.socket))
    try:
        raw.hello()
        for i in range(0, 40, 10):
            raw.send_raw(b"MS", [r for r, _ in pipes[i : i + 10]], may_break=True)
        answer = await trio.to_thread.run_sync(raw.until_closed)
        assert [type(m).__name__ for m in answer] == ["Error"]
        assert "no message a client sends carries fds" in answer[0].message  # type: ignore[union-attr]
    finally:
        raw.close()
        for r, w in pipes:
            os.close(r)
            os.close(w)
    with trio.fail_after(5):
        while fd_count(daemon.pid) != before:
            await trio.sleep(0.01)
    record("partial_frame_with_fds", fds_sent=40, daemon_fds_before=before, daemon_fds_after=before)
    async with open_client(daemon.paths) as client:  # and everyone else is served
        assert (await client.launch(["cat"], hold=False)).child.state == "running"


# The frame deadlines of the two tests below, and how often the first sends
# a byte (the next byte after the deadline is where it sees the drop).
FRAME_TIMEOUT = 1.5
BYTE_EVERY = 0.25
HELLO_TIMEOUT = 1.0


async def test_a_frame_sent_a_byte_at_a_time_is_dropped_at_the_deadline(
    ms_dirs: MsDirs,
    monkeypatch: pytest.MonkeyPatch,
    start_daemon: Callable[[], Awaitable[RunningDaemon]],
) -> None:
    """Seen: one byte every 2 s kept a connection forever."""
    monkeypatch.setenv("MULTISERVER_FRAME_TIMEOUT", str(FRAME_TIMEOUT))
    daemon = await start_daemon()
    raw = RawConnection.connect(str(daemon.paths.socket))
    try:
        raw.hello()
        frame = HEADER.pack(MAGIC, PROTOCOL_VERSION, ListChildren.TYPE, 0, 300, 0) + b" " * 300
        t0 = trio.current_time()
        dropped = None
        for byte in frame:
            try:
                raw.send_raw(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                dropped = trio.current_time() - t0
                break
            await trio.sleep(BYTE_EVERY)
        answer = await trio.to_thread.run_sync(raw.until_closed)
    finally:
        raw.close()
    record(
        "byte_at_a_time",
        frame_timeout_s=FRAME_TIMEOUT,
        dropped_after_s=dropped and round(dropped, 2),
    )
    # Dropped at its deadline, seen by the next byte sent after it.
    assert dropped is not None
    assert FRAME_TIMEOUT <= dropped < FRAME_TIMEOUT + BYTE_EVERY + TIMER_SLACK
    assert f"not completed within {FRAME_TIMEOUT:g} s" in answer[0].message  # type: ignore[union-attr]


async def test_a_connection_that_never_says_hello_is_dropped(
    ms_dirs: MsDirs,
    monkeypatch: pytest.MonkeyPatch,
    start_daemon: Callable[[], Awaitable[RunningDaemon]],
) -> None:
    monkeypatch.setenv("MULTISERVER_FRAME_TIMEOUT", str(HELLO_TIMEOUT))
    daemon = await start_daemon()
    raw = RawConnection.connect(str(daemon.paths.socket))
    try:
        t0 = trio.current_time()
        answer = await trio.to_thread.run_sync(raw.until_closed)
        took = trio.current_time() - t0
    finally:
        raw.close()
    record("no_hello", hello_timeout_s=HELLO_TIMEOUT, dropped_after_s=round(took, 2))
    assert HELLO_TIMEOUT <= took < HELLO_TIMEOUT + TIMER_SLACK
    assert [(m.errno, m.message) for m in answer] == [  # type: ignore[union-attr]
        (errno.ETIMEDOUT, f"no Hello within {HELLO_TIMEOUT:g} s")
    ]


async def test_connections_past_the_cap_get_one_line_and_the_rest_are_served(
    ms_dirs: MsDirs,
    monkeypatch: pytest.MonkeyPatch,
    start_daemon: Callable[[], Awaitable[RunningDaemon]],
) -> None:
    monkeypatch.setenv("MULTISERVER_MAX_CONNECTIONS", "5")
    daemon = await start_daemon()
    held = [RawConnection.connect(str(daemon.paths.socket)) for _ in range(5)]
    try:
        for raw in held:
            raw.hello()
        with pytest.raises(RequestFailed) as refused:
            async with open_client(daemon.paths.socket):
                pass
        record("connection_cap", cap=5, sixth=refused.value.message)
        assert refused.value.errno == errno.EUSERS
        assert refused.value.message == "too many connections (5 open); try again later"
        held.pop().close()
        with trio.fail_after(5):
            while True:  # the daemon notices the close on its own time
                try:
                    async with open_client(daemon.paths.socket) as client:
                        assert client.version == PROTOCOL_VERSION
                        break
                except RequestFailed:
                    await trio.sleep(0.01)
    finally:
        for raw in held:
            raw.close()
