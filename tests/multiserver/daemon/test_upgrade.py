"""Upgrading a daemon in place (``multiserver/daemon/_upgrade.py``), with this
checkout's code as the "installed" one: the mechanics (what crosses the
exec, what a client sees). Upgrades to another build, and failed builds,
are in ``tests/upgrade/``.

Real detached daemons, real PTYs; every wait is bounded.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import termios
from pathlib import Path

import pytest
import trio

from multiserver import DaemonPaths, RequestFailed, open_client
from multiserver.daemon._children import ChildTable
from multiserver.daemon._server import SERVER_NAME
from multiserver.daemon._snapshot import (
    FORMAT,
    Blob,
    BlobWriter,
    ChildState,
    Snapshot,
    SnapshotError,
    blob,
    decode,
    encode,
)
from multiserver.protocol._codec import Codec, Event
from multiserver.protocol._messages import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Children,
    Hello,
    ListChildren,
    Peek,
    Peeked,
    Welcome,
)
from tests.conftest import (
    MsDirs,
    RunningDaemon,
    close_fd,
    connected_clients,
    fd_links,
    read_until,
    wait_fds_back,
    wait_until,
)
from tests.multiserver.daemon.test_daemon import seq_output, wait_buffered

TIMEOUT = 20.0  # an upgrade runs the check (an interpreter start) and an exec


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


async def upgraded(daemon: RunningDaemon) -> float:
    """Upgrade ``daemon`` from a client of its own; the pause it reports."""
    with trio.fail_after(TIMEOUT):
        async with open_client(daemon.paths) as client:
            done = await client.upgrade()
    assert (done.pid, done.old_server, done.server) == (daemon.pid, SERVER_NAME, SERVER_NAME)
    assert done.paused >= 0
    return done.paused


async def test_an_upgrade_keeps_pid_children_output_holders_and_connections(
    daemon: RunningDaemon,
) -> None:
    # The fixture's own connection may not be gone yet: counted after it is.
    await wait_until(lambda: connected_clients(daemon.pid, daemon.paths.socket) == 0, 10)
    fds_before = fd_links(daemon.pid)
    async with open_client(daemon.paths) as holder:
        echo = await holder.launch(["cat"], name="echo")  # held: its master is here
        counter = await holder.launch(
            ["sh", "-c", "seq 1 3000; exec sleep 60"], name="counter", hold=False
        )
        exited = await holder.launch(["sh", "-c", "exit 7"], name="exited", hold=False)
        lingering = await holder.launch(["sleep", "60"], name="lingers", hold=False, linger=60)
        assert echo.master is not None
        await wait_buffered(holder, counter.child.id, len(seq_output(3000)))
        with trio.fail_after(10):
            while not any(
                c.id == exited.child.id and c.exit_code == 7 for c in await holder.list()
            ):
                await trio.sleep(0.01)
        before = {c.id: c for c in await holder.list()}

        await upgraded(daemon)

        # The same connection goes on: its requests are answered, by the new code.
        after = {c.id: c for c in await holder.list()}
        assert set(after) == set(before)
        for child_id, info in before.items():
            now = after[child_id]
            assert (now.pid, now.name, now.argv, now.tty, now.started_at) == (
                info.pid,
                info.name,
                info.argv,
                info.tty,
                info.started_at,
            )
            assert now.held == info.held
        assert after[echo.child.id].held and not after[counter.child.id].held
        assert after[exited.child.id].exit_code == 7
        # Still the programs' parent: their exits reach it.
        assert parent_of(counter.child.pid) == daemon.pid
        # The held PTY never left this client: typing echoes.
        os.write(echo.master, b"after-upgrade\n")
        await read_until(echo.master, b"after-upgrade")
        # The output buffered before the upgrade, byte for byte, none dropped.
        [claimed] = await holder.claim([counter.child.id])
        assert claimed.output == seq_output(3000) and claimed.dropped == 0
        close_fd(claimed.master)
        assert (await holder.collect(exited.child.id)).exit_code == 7
        # Ids go on from where they were.
        more = await holder.launch(["true"], hold=False)
        assert more.child.id == max(before) + 1
        for child in (echo, counter, lingering):
            await holder.signal(child.child.id, signal.SIGKILL)
        close_fd(echo.master)
    async with open_client(daemon.paths) as client:
        assert (client.daemon_pid, client.instance_id) == (daemon.pid, daemon.instance_id)
        with trio.fail_after(10):
            while any(c.state == "running" for c in await client.list()):
                await trio.sleep(0.01)
        for child in await client.list():
            await client.collect(child.id)
    # Every fd the upgrade touched is back to what it was (the new code
    # holds the same listener and lock, nothing more).
    await wait_fds_back(daemon.pid, fds_before)


async def test_output_of_a_flooding_session_crosses_whole(daemon: RunningDaemon) -> None:
    """An unheld program printing while the daemon upgrades: every byte
    once (read before the exec, or from the PTY after)."""
    count = 60_000  # ~400 KB, under the 1 MiB buffer: nothing may be dropped
    async with open_client(daemon.paths) as client:
        flood = await client.launch(["seq", "1", str(count)], hold=False)
        await upgraded(daemon)
        await wait_buffered(client, flood.child.id, len(seq_output(count)))
        [claimed] = await client.claim([flood.child.id])
        close_fd(claimed.master)
        assert claimed.dropped == 0
        assert claimed.output == seq_output(count)


async def test_a_claim_in_flight_is_answered_once(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as client, open_client(daemon.paths) as other:
        children = [
            await client.launch(
                ["sh", "-c", f"seq 1 20000; echo done-{i}; exec sleep 60"], hold=False
            )
            for i in range(3)
        ]
        for child in children:
            await wait_buffered(client, child.child.id, len(seq_output(20000)))
        results = []

        async def claim() -> None:
            results.extend(await other.claim([c.child.id for c in children]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(upgraded, daemon)
            nursery.start_soon(claim)
        for child, result in zip(children, results, strict=True):
            assert result.output.startswith(seq_output(20000)), child
            assert result.master is not None
            close_fd(result.master)
        # Claimed once: held by ``other``, and nothing left in the daemon.
        listed = {c.id: c for c in await client.list()}
        assert all(listed[c.child.id].held for c in children)
        assert all(listed[c.child.id].buffered_bytes < 100 for c in children)
        for child in children:
            await client.signal(child.child.id, signal.SIGKILL)


def hello_frame() -> tuple[Codec, bytes]:
    codec = Codec("client")
    return codec, codec.send(
        Hello(min_version=MIN_PROTOCOL_VERSION, max_version=PROTOCOL_VERSION, client="half")
    )


def read_event(sock: socket.socket, codec: Codec, timeout: float) -> object:
    """The next message the daemon sends on ``sock`` (blocking, bounded)."""
    sock.settimeout(timeout)
    while True:
        event = codec.next_event()
        if isinstance(event, Event):
            return event.message
        data = sock.recv(65536)
        assert data, "the daemon closed the connection"
        codec.receive_data(data)


async def test_a_request_half_sent_across_the_upgrade_is_answered(daemon: RunningDaemon) -> None:
    """A client that sent half a frame when the daemon paused: the new code
    has the first half and reads the rest."""
    codec, hello = hello_frame()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(daemon.paths.socket))
        sock.sendall(hello)
        welcome = await trio.to_thread.run_sync(read_event, sock, codec, 10.0)
        assert isinstance(welcome, Welcome)
        frame = codec.send(ListChildren(req=5))
        sock.sendall(frame[:7])
        await upgraded(daemon)
        sock.sendall(frame[7:])
        answer = await trio.to_thread.run_sync(read_event, sock, codec, 10.0)
        assert isinstance(answer, Children) and answer.req == 5


async def test_the_command_says_from_which_version_to_which(
    daemon: RunningDaemon, ms_dirs: MsDirs
) -> None:
    done = await trio.run_process(
        [sys.executable, "-m", "multiserver_cli", "upgrade"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    version = SERVER_NAME.partition("/")[2]
    line = done.stdout.decode()
    assert line.startswith(f"daemon 1 (pid {daemon.pid}): {version} -> {version}, paused "), line
    assert line.count("\n") == 1 and line.endswith(" ms\n")
    report = await trio.run_process(
        [sys.executable, "-m", "multiserver_cli", "daemon", "--json"], capture_stdout=True
    )
    [row] = json.loads(report.stdout)
    assert (row["pid"], row["instance_id"]) == (daemon.pid, daemon.instance_id)
    assert row["upgraded_at"] is not None and row["upgraded_at"] >= row["started_at"]


async def test_twenty_upgrades_in_a_row(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as client:
        held = await client.launch(["cat"])
        assert held.master is not None
        for i in range(20):
            await upgraded(daemon)
            os.write(held.master, b"typed-%d\n" % i)
            await read_until(held.master, b"typed-%d" % i)
        assert [c.held for c in await client.list()] == [True]
        await client.signal(held.child.id, signal.SIGKILL)
        close_fd(held.master)


async def test_an_older_client_cannot_ask_for_an_upgrade(daemon: RunningDaemon) -> None:
    codec = Codec("client")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(daemon.paths.socket))
        sock.sendall(codec.send(Hello(min_version=5, max_version=5, client="old")))
        welcome = await trio.to_thread.run_sync(read_event, sock, codec, 10.0)
        assert isinstance(welcome, Welcome) and welcome.version == 5
    # The library refuses before sending: nothing to test there but the daemon's rule.
    async with open_client(daemon.paths) as client:
        assert client.welcome.version == PROTOCOL_VERSION


async def test_an_upgrade_under_way_refuses_a_second(daemon: RunningDaemon) -> None:
    outcomes: list[object] = []

    async def one() -> None:
        async with open_client(daemon.paths) as client:
            try:
                outcomes.append(await client.upgrade())
            except RequestFailed as exc:
                outcomes.append(exc)

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
    refused = [o for o in outcomes if isinstance(o, RequestFailed)]
    # Both may succeed one after the other; a refusal is the EBUSY one.
    assert all("already under way" in str(o) for o in refused)
    assert len(outcomes) == 2


# --- the snapshot, pure --------------------------------------------------------------


def sample_snapshot(**changes: object) -> tuple[Snapshot, BlobWriter]:
    blobs = BlobWriter()
    child = ChildState(
        id=3,
        pid=4242,
        master=9,
        tty="/dev/pts/4",
        name="build",
        argv=["make", "caf\udce9"],
        cwd="/home/u",
        rows=24,
        cols=80,
        linger=None,
        started_at=1.0,
        buffer=blobs.add(b"\x1b[1mhello\r\n"),
        dropped=12,
    )
    fields: dict[str, object] = dict(
        format=FORMAT,
        readable_from=FORMAT,
        server="multiserver/test",
        instance_id="ab" * 16,
        pid=100,
        started="on-demand",
        started_at=1.0,
        idle_exit=5.0,
        socket="/run/x.socket",
        state_dir="/state",
        listener=3,
        lock=4,
        socket_stat=list(range(10)),
        config={"buffer_limit": 1024},
        next_child_id=4,
        children=[child],
    )
    fields.update(changes)
    return Snapshot(**fields), blobs  # type: ignore[arg-type]


def test_a_snapshot_reads_back_with_its_blobs_and_os_strings() -> None:
    snapshot, blobs = sample_snapshot()
    back, area = decode(b"".join(encode(snapshot, blobs)))
    assert back == snapshot
    assert bytes(area[back.children[0].buffer.start :][: back.children[0].buffer.length]) == (
        b"\x1b[1mhello\r\n"
    )
    assert back.fds() == [3, 4, 9]


def test_a_snapshot_with_fields_this_code_does_not_know_is_read() -> None:
    snapshot, blobs = sample_snapshot()
    parts = encode(snapshot, blobs)
    header = json.loads(parts[2])
    header["from_the_future"] = {"x": 1}
    header["children"][0]["colour"] = "green"
    raw = json.dumps(header).encode()
    back, _ = decode(b"".join([parts[0], len(raw).to_bytes(8, "big"), raw, *parts[3:]]))
    assert back == snapshot


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"readable_from": FORMAT + 1}, "needs a reader of format"),
        ({"format": 0, "readable_from": 0}, "older than this code reads"),
    ],
)
def test_a_snapshot_this_code_cannot_serve_is_refused(changes: dict[str, int], why: str) -> None:
    snapshot, blobs = sample_snapshot(**changes)
    with pytest.raises(SnapshotError, match=why):
        decode(b"".join(encode(snapshot, blobs)))


def test_a_damaged_snapshot_is_refused_in_one_line() -> None:
    snapshot, blobs = sample_snapshot()
    data = b"".join(encode(snapshot, blobs))
    for bad in (b"", data[:5], b"XXXXXXX" + data[7:], data[:40]):
        with pytest.raises(SnapshotError) as caught:
            decode(bad)
        assert "\n" not in str(caught.value)
    wrong = json.loads(encode(snapshot, blobs)[2])
    wrong["children"][0]["pid"] = "many"
    raw = json.dumps(wrong).encode()
    with pytest.raises(SnapshotError, match="does not read"):
        decode(b"MSSNAP\n" + len(raw).to_bytes(8, "big") + raw)


async def test_a_child_that_exited_during_the_exec_is_reaped_with_its_code() -> None:
    """A child the old code had not reaped is a zombie of the same pid: the
    new code's table watches it and gets its exit code."""
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(9)"])
    await wait_until(lambda: _state_of(proc.pid) == "Z", 10)
    exits: list[tuple[int, int | None]] = []
    async with trio.open_nursery() as nursery:
        table = ChildTable(
            nursery,
            buffer_limit=1024,
            on_exit=lambda c: exits.append((c.pid, c.exit_code)),
            on_change=lambda: None,
        )
        state = ChildState(
            id=1,
            pid=proc.pid,
            master=None,
            tty="/dev/pts/0",
            name="z",
            argv=["x"],
            cwd="/",
            rows=24,
            cols=80,
            linger=None,
            started_at=0.0,
            buffer=Blob(),
        )
        table.adopt([state], memoryview(b""), 2)
        nursery.start_soon(table.run)
        with trio.fail_after(10):
            while not exits:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    table.close()
    proc.returncode = 9  # reaped by the table, not by Popen
    assert exits == [(proc.pid, 9)]


def _state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


async def test_answers_queued_for_a_client_that_does_not_read_cross_whole(
    daemon: RunningDaemon,
) -> None:
    """A client asked a lot and read nothing: the daemon's writer is in the
    middle of a frame (the socket is full: a frame larger than the socket's
    buffer goes out in pieces) when it pauses. The rest of that frame and
    every queued one are sent by the new code: every answer arrives once,
    in order, whole."""
    count = 120_000  # ~800 KB of output: each Peeked frame is that large
    async with open_client(daemon.paths) as helper:
        flood = await helper.launch(["seq", "1", str(count)], hold=False)
        await wait_buffered(helper, flood.child.id, len(seq_output(count)))
        codec, hello = hello_frame()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(daemon.paths.socket))
            sock.sendall(hello)
            assert isinstance(await trio.to_thread.run_sync(read_event, sock, codec, 10.0), Welcome)
            asked = 4
            sock.sendall(
                b"".join(codec.send(Peek(req=r, id=flood.child.id)) for r in range(1, asked + 1))
            )
            # Part of the first answer is here: the rest waits in the daemon.
            await wait_until(lambda: _waiting(sock) > 64 * 1024, 10, "the first answer's start")
            await upgraded(daemon)
            for req in range(1, asked + 1):
                answer = await trio.to_thread.run_sync(read_event, sock, codec, 10.0)
                assert isinstance(answer, Peeked) and answer.req == req, answer
                assert answer.output == seq_output(count)
        await helper.collect(flood.child.id)


def _waiting(sock: socket.socket) -> int:
    """Bytes that arrived on ``sock`` and were not read yet."""
    got = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int.from_bytes(got, sys.byteorder)


# One file per snapshot format this project has written (multiserver 0.1
# writes format 1): whatever the code becomes, it reads each of them, or
# refuses it in one line by design (raise OLDEST_READ, and say so in
# docs/upgrade.md). A new format adds its file here.
SHIPPED_SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.mark.parametrize("path", sorted(SHIPPED_SNAPSHOTS.glob("format-*.snap")), ids=str)
def test_every_shipped_snapshot_format_is_still_read(path: Path) -> None:
    snapshot, area = decode(path.read_bytes())
    assert snapshot.format == int(path.stem.removeprefix("format-"))
    [child] = snapshot.children
    assert (child.id, child.pid, child.name, child.argv) == (
        3,
        4242,
        "build",
        ["make", "caf\udce9"],
    )
    assert blob(area, child.buffer) == b"\x1b[1mhello\r\n" and child.dropped == 12
    [peer] = snapshot.peers
    assert (peer.fd, peer.version, peer.held, peer.upgrade_req) == (11, 6, [3], 9)
    assert blob(area, peer.unread) == b"MS\x00\x06"
    assert [blob(area, out.frame) for out in peer.outbox] == [b"frame-rest"]
    assert snapshot.fds() == [3, 4, 9, 11]


# --- memory: nothing of the snapshot stays (issue 35) ----------------------------------

BUFFER = 8 * 1024 * 1024
PRINTED = (BUFFER // 65) * 65  # lines of 63 characters, CR LF on the terminal
MIB = 1024 * 1024


def anonymous_kib(pid: int) -> int:
    """``RssAnon``: the memory that is the process's own. Its RSS also
    counts shared library pages, which a process faults in after an exec
    and a forked one's parent faulted in for it (6 MiB between the two)."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("RssAnon:")).split()[1])


async def test_an_upgraded_daemon_keeps_nothing_of_its_snapshot_once_drained(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two daemons, each with 80 MiB buffered in 10 sessions; one upgrades,
    both are drained (every session claimed, its output taken). The new
    code held the snapshot for its whole life: 188 MiB against 22 for 160
    MiB buffered. Now within 10 % of the one never upgraded."""
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", str(BUFFER))
    printer = ["sh", "-c", f"yes {'x' * 63} | head -n {BUFFER // 65}; exec sleep 600"]
    pids = []
    for number in (1, 2):
        paths = DaemonPaths.for_number(number)
        with trio.fail_after(TIMEOUT):
            async with open_client(paths, start=True) as client:
                ids = [(await client.launch(printer, hold=False)).child.id for _ in range(10)]
                for child_id in ids:
                    await wait_buffered(client, child_id, PRINTED, TIMEOUT)
                pids.append(client.daemon_pid)
    upgraded_pid, never_pid = pids
    await upgraded(RunningDaemon(DaemonPaths.for_number(1), upgraded_pid, ""))
    for number in (1, 2):
        async with open_client(DaemonPaths.for_number(number)) as client:
            ids = [c.id for c in await client.list()]
            claimed = await client.claim(ids)
            for result in claimed:
                assert result.output and len(result.output) == PRINTED
                close_fd(result.master)
            await client.release(ids)
    # Each gives the freed output back (its trim, 1 s after it left).
    drained = 40 * 1024
    await wait_until(lambda: anonymous_kib(never_pid) < drained, 15, "the never upgraded drained")
    await wait_until(
        lambda: anonymous_kib(upgraded_pid) <= 1.1 * anonymous_kib(never_pid),
        15,
        f"the upgraded daemon within 10 % of the other ({anonymous_kib(never_pid)} KiB)",
    )
