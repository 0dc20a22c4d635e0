"""Nothing lost: claim/release cycles on a child that writes a numbered
stream. Everything a claimer gets, the replay of a claim and the bytes it
reads from the fd, is checked against the stream at its exact position; the
only gaps allowed are the ``dropped`` counts the claims report, each ending
on a line boundary.

The daemon's buffer is 8 KiB, so the bound is hit: every 50th cycle the test
leaves the child unheld until the daemon reports dropped bytes, and the
claim that follows must replay the newest bytes and count the rest as
dropped, exactly. The other cycles hand over at once (a few KiB pass).

Quick part: 1,000 cycles. Slow part: 10,000.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio

from multiserver import Client, open_client
from tests.conftest import MsDirs, RunningDaemon, close_fd, wait_listed_exited
from tests.reliability._report import record

BUFFER_LIMIT = 8192
LINE = 11  # b"%09d\r\n" once the PTY has turned \n into \r\n
PAUSE_EVERY = 50

# Writes numbered lines, 50 at a time, until the stop file appears; then
# exits after the batch in flight.
PRODUCER = """
import os, sys, time
stop = sys.argv[1]
i = 0
while not os.path.exists(stop):
    os.write(1, b"".join(b"%09d\\n" % n for n in range(i, i + 50)))
    i += 50
    time.sleep(0.0005)
"""


def expected(pos: int, size: int) -> bytes:
    """Bytes ``pos .. pos+size`` of the stream as the claimer sees it."""
    first, last = pos // LINE, (pos + size) // LINE + 1
    lines = b"".join(b"%09d\r\n" % n for n in range(first, last))
    start = pos - first * LINE
    return lines[start : start + size]


@attrs.define
class StreamCheck:
    """Where the next byte must come from, and what went where."""

    pos: int = 0
    replayed: int = 0
    read: int = 0
    dropped: int = 0
    drops: int = 0  # claims that reported dropped bytes
    replays: int = 0  # claims that replayed bytes
    held_reads: int = 0  # cycles whose fd had bytes

    def take(self, data: bytes, *, dropped: int = 0, replay: bool = False) -> None:
        if dropped:
            self.pos += dropped
            self.dropped += dropped
            self.drops += 1
            assert self.pos % LINE == 0, f"replay after {dropped} dropped starts mid-line"
        want = expected(self.pos, len(data))
        if data != want:
            at = next(i for i, (a, b) in enumerate(zip(data, want, strict=True)) if a != b)
            raise AssertionError(
                f"stream differs at byte {self.pos + at}: got {data[at : at + 22]!r}, "
                f"want {want[at : at + 22]!r}"
            )
        self.pos += len(data)
        if replay:
            self.replayed += len(data)
            self.replays += bool(data)
        else:
            self.read += len(data)


async def wait_dropping(client: Client, child_id: int) -> None:
    """Leave the child unheld until its output has passed the bound."""
    with trio.fail_after(10):
        while True:
            [info] = [c for c in await client.list() if c.id == child_id]
            if info.dropped_bytes > 0:
                return
            await trio.sleep(0.005)


def read_available(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            break
        except OSError as exc:  # EIO: the producer is done
            assert exc.errno == errno.EIO
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


async def claim_release_cycles(daemon: RunningDaemon, stop_file: Path, cycles: int) -> StreamCheck:
    check = StreamCheck()
    async with open_client(daemon.paths) as client:
        launched = await client.launch([sys.executable, "-c", PRODUCER, str(stop_file)], hold=False)
        child_id = launched.child.id
        for cycle in range(cycles):
            [claimed] = await client.claim([child_id])
            assert claimed.ok, claimed.error
            assert claimed.master is not None, f"the producer ended at cycle {cycle}"
            check.take(claimed.output, dropped=claimed.dropped, replay=True)
            try:
                os.set_blocking(claimed.master, False)
                data = read_available(claimed.master)
                check.take(data)
                check.held_reads += bool(data)
                # Stop reading, give it back, then close our copy.
                released, failures = await client.release([child_id])
                assert (released, failures) == ([child_id], [])
            finally:
                close_fd(claimed.master)
            if cycle % PAUSE_EVERY == PAUSE_EVERY - 1:
                await wait_dropping(client, child_id)
        stop_file.touch()
        await wait_listed_exited(client, child_id, timeout=15)
        [last] = await client.claim([child_id])
        assert last.ok and last.master is None  # exited: the rest is in the replay
        check.take(last.output, dropped=last.dropped, replay=True)
        assert (await client.collect(child_id)).exit_code == 0
    # The stream ends on a whole line, and every byte is accounted for.
    assert check.pos > 0 and check.pos % LINE == 0, check
    assert check.pos == check.read + check.replayed + check.dropped
    return check


StartDaemon = Callable[[], Awaitable[RunningDaemon]]


async def run(
    ms_dirs: MsDirs, start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch, cycles: int
) -> None:
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", str(BUFFER_LIMIT))
    daemon = await start_daemon()
    t0 = time.monotonic()
    check = await claim_release_cycles(daemon, ms_dirs.root / "stop", cycles)
    took = time.monotonic() - t0
    # Both ways of handing bytes over were exercised, and the bound was hit.
    assert check.replays >= cycles // 10 and check.held_reads >= cycles // 10, check
    assert check.drops >= 1, check
    record(
        f"nothing_lost_{cycles}",
        cycles=cycles,
        seconds=round(took, 1),
        stream_bytes=check.pos,
        lines=check.pos // LINE,
        replayed_bytes=check.replayed,
        read_bytes=check.read,
        dropped_bytes=check.dropped,
        claims_with_replay=check.replays,
        cycles_with_fd_reads=check.held_reads,
        claims_with_drops=check.drops,
        buffer_limit=BUFFER_LIMIT,
    )


async def test_1000_claim_release_cycles_lose_nothing(
    ms_dirs: MsDirs, start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    await run(ms_dirs, start_daemon, monkeypatch, 1000)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_10000_claim_release_cycles_lose_nothing(
    ms_dirs: MsDirs, start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    await run(ms_dirs, start_daemon, monkeypatch, 10_000)
