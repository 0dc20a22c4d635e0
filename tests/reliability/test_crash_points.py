"""Crash at every step: a client process SIGKILLed at every step of hello,
launch, claim, release and collect, and at byte offsets of its traffic.

The client (``_crash_client``, forked from a zygote) speaks the real protocol
with the real codec and stops at an exact kill point: after the K-th byte it
wrote, or after it read the replies of a step (then holding the fds they
carried). The test SIGKILLs it there, then checks the daemon:

- it runs, and no child is held once the dead connection is gone;
- it has the same children: every child that was there is there with the
  same pid and state, except the exited child the client collected, if and
  only if the whole Collect frame went out; and exactly one new child (the
  client's ``cat``) if and only if the whole Launch frame went out. A request
  whose last byte reached the daemon is carried out; half a frame is dropped;
- it has no zombie, and every running child is claimable: claimed, echoes a
  line through the fd the claim handed over, released;
- once the new child is ended and collected, it holds exactly the fds it held
  before the kill, less the master of the collected child.

Quick part: 100 kill points (every step boundary, the replies of every step,
random offsets). Slow part: 500 more (every byte offset of the traffic, the
replies of every step, random offsets with other chunkings).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import TracebackType

import attrs
import pytest
import trio

from multiserver import ChildInfo, Client, open_client
from multiserver.protocol._codec import HEADER_SIZE
from tests.conftest import (
    RunningDaemon,
    close_fd,
    fd_count,
    fd_links,
    is_alive,
    read_until,
    socket_inodes,
    unix_socket_inodes,
    wait_listed_exited,
    wait_until,
    zombies,
)
from tests.reliability._crash_client import LAUNCH_ENV, scenario_frames
from tests.reliability._report import record

ROOT = Path(__file__).resolve().parents[2]
STEPS = ["hello", "launch", "claim", "release", "collect"]
# Bounds, not delays.
POINT_TIMEOUT = 20.0


@attrs.frozen
class KillPoint:
    stop_at: int | None = None  # bytes of outgoing traffic written
    stop_after_reply: int | None = None  # index into STEPS
    seed: int = 0  # the client's chunking

    def describe(self) -> str:
        if self.stop_after_reply is not None:
            return f"after the replies of {STEPS[self.stop_after_reply]}"
        return f"at byte {self.stop_at}"


def frame_ends(frames: list[bytes]) -> list[int]:
    ends, total = [], 0
    for frame in frames:
        total += len(frame)
        ends.append(total)
    return ends


def boundary_offsets(frames: list[bytes]) -> list[int]:
    """Around every step: before its first byte, one byte in, the header
    less a byte, the header, mid-body, the frame less a byte, the frame."""
    offsets: set[int] = set()
    start = 0
    for end in frame_ends(frames):
        mid = (start + HEADER_SIZE + end) // 2
        offsets |= {
            start,
            start + 1,
            start + HEADER_SIZE - 1,
            start + HEADER_SIZE,
            mid,
            end - 1,
            end,
        }
        start = end
    return sorted(offsets)


def quick_points(frames: list[bytes], total: int = 100) -> list[KillPoint]:
    points = [KillPoint(stop_at=k, seed=k) for k in boundary_offsets(frames)]
    points += [KillPoint(stop_after_reply=i) for i in range(len(STEPS))]
    rng = random.Random(7)
    length = sum(map(len, frames))
    while len(points) < total:
        k = rng.randrange(length + 1)
        points.append(KillPoint(stop_at=k, seed=rng.randrange(1 << 30)))
    return points


def slow_points(frames: list[bytes], total: int = 500) -> list[KillPoint]:
    length = sum(map(len, frames))
    rng = random.Random(11)
    points = [KillPoint(stop_at=k, seed=rng.randrange(1 << 30)) for k in range(length + 1)]
    points += [KillPoint(stop_after_reply=i, seed=1) for i in range(len(STEPS))]
    while len(points) < total:
        points.append(KillPoint(stop_at=rng.randrange(length + 1), seed=rng.randrange(1 << 30)))
    return points


class Zygote:
    """The ``_crash_client`` zygote: forks one client per kill point."""

    def __init__(self) -> None:
        self._proc: trio.Process | None = None
        self._pending: int | None = None  # a forked client not yet reaped
        self._buf = b""

    async def __aenter__(self) -> Zygote:
        self._proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "tests.reliability._crash_client"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        return self

    async def _line(self) -> dict[str, object]:
        assert self._proc is not None and self._proc.stdout is not None
        while b"\n" not in self._buf:
            chunk = await self._proc.stdout.receive_some()
            if not chunk:
                raise AssertionError(f"the zygote ended; it said {self._buf!r}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]

    async def kill_client_at(self, spec: dict[str, object]) -> dict[str, object]:
        """Fork a client, wait until it stopped at its kill point, SIGKILL it,
        wait until the zygote reaped it. Returns the client's report."""
        assert self._proc is not None and self._proc.stdin is not None
        await self._proc.stdin.send_all((json.dumps(spec) + "\n").encode())
        report = await self._line()
        pid = int(report["pid"])  # type: ignore[call-overload]
        self._pending = pid
        os.kill(pid, signal.SIGKILL)
        reaped = await self._line()
        self._pending = None
        assert "error" not in report, report["error"]
        assert reaped == {"reaped": pid, "status": -signal.SIGKILL}, reaped
        return report

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._proc is not None
        with trio.CancelScope(shield=True):
            if self._pending is not None:
                try:
                    os.kill(self._pending, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            assert self._proc.stdin is not None
            await self._proc.stdin.aclose()
            with trio.move_on_after(5):
                await self._proc.wait()
            if self._proc.returncode is None:
                self._proc.kill()  # its blocked client then reads EOF and exits
                await self._proc.wait()


def fds_are(pid: int, count: int) -> bool:
    return fd_count(pid) == count


def client_connections(pid: int, path: Path) -> int:
    """Client connections the daemon has open: distinct sockets bound to
    ``path`` among its fds, less the listener (a connection may use more
    than one fd)."""
    return len(set(socket_inodes(pid)) & unix_socket_inodes(path)) - 1


async def launch_exited(client: Client) -> ChildInfo:
    launched = await client.launch(["true"], env=LAUNCH_ENV, cwd="/", hold=False)
    await wait_listed_exited(client, launched.child.id)
    return launched.child


async def assert_claimable(client: Client, ids: list[int]) -> None:
    """Claim every id, echo a line through each fd, release them all."""
    results = await client.claim(ids)
    try:
        for result in results:
            assert result.ok, result.error
            assert result.master is not None
            line = b"alive-%d\n" % result.id
            os.write(result.master, line)
            echo = line.replace(b"\n", b"\r\n")
            await read_until(result.master, echo + echo)
        released, failures = await client.release(ids)
        assert (sorted(released), failures) == (sorted(ids), [])
    finally:
        for result in results:
            close_fd(result.master)


async def run_kill_points(daemon: RunningDaemon, points: list[KillPoint]) -> dict[str, int]:
    """Run every kill point against one daemon; returns counts by step."""
    socket_path = daemon.paths.socket
    counts: dict[str, int] = {}
    async with open_client(daemon.paths) as monitor, Zygote() as zygote:
        c1 = (await monitor.launch(["cat"], env=LAUNCH_ENV, cwd="/", hold=False)).child
        c2 = (await monitor.launch(["cat"], env=LAUNCH_ENV, cwd="/", hold=False)).child
        exited: ChildInfo | None = None
        for point in points:
            with trio.fail_after(POINT_TIMEOUT):
                if exited is None:
                    exited = await launch_exited(monitor)
                ids = [c1.id, c2.id, exited.id]
                frames = scenario_frames(*ids)
                ends = frame_ends(frames)
                before = {c.id: c for c in await monitor.list()}
                assert not any(c.held for c in before.values()), before
                fds_before = fd_links(daemon.pid)

                spec = {
                    "socket": str(socket_path),
                    "ids": ids,
                    "stop_at": point.stop_at,
                    "stop_after_reply": point.stop_after_reply,
                    "seed": point.seed,
                }
                report = await zygote.kill_client_at(spec)
                sent = int(report["sent"])  # type: ignore[call-overload]
                if point.stop_at is not None:
                    assert sent == min(point.stop_at, ends[-1]), report
                else:
                    assert sent == ends[point.stop_after_reply], report  # type: ignore[index]
                step = str(report["step"])
                counts[step] = counts.get(step, 0) + 1
                launched = sent >= ends[1]
                collected = sent >= ends[4]

                await wait_until(
                    lambda: client_connections(daemon.pid, socket_path) == 1,
                    message=f"the killed client's connection to close ({point.describe()})",
                )
                assert is_alive(daemon.pid)
                after = {c.id: c for c in await monitor.list()}
                assert not any(c.held for c in after.values()), (point, after)
                new = sorted(set(after) - set(before))
                kept = set(before) - ({exited.id} if collected else set())
                assert set(after) - set(new) == kept, (point, sorted(before), sorted(after))
                for child_id in kept:
                    assert (after[child_id].pid, after[child_id].state) == (
                        before[child_id].pid,
                        before[child_id].state,
                    )
                assert len(new) == (1 if launched else 0), (point, new)
                for child_id in new:
                    assert (after[child_id].argv, after[child_id].state) == (["cat"], "running")
                assert zombies(daemon.pid) == []

                running = sorted(i for i, c in after.items() if c.state == "running")
                await assert_claimable(monitor, running)

                for child_id in new:
                    await monitor.signal(child_id, signal.SIGKILL)
                    await wait_listed_exited(monitor, child_id)
                    await monitor.collect(child_id)
                if collected:
                    exited = None
                want = len(fds_before) - (1 if collected else 0)
                await wait_until(
                    partial(fds_are, daemon.pid, want),
                    message=f"daemon fds back to {want} after the kill {point.describe()}: "
                    f"before {fds_before}, now {fd_links(daemon.pid)}",
                )
                assert zombies(daemon.pid) == []
    return counts


async def run(daemon: RunningDaemon, name: str, points: list[KillPoint]) -> None:
    frames = scenario_frames(1, 2, 3)
    t0 = time.monotonic()
    counts = await run_kill_points(daemon, points)
    # Every step was hit, with its frame partly and wholly sent.
    assert set(STEPS) <= set(counts), counts
    offsets = {p.stop_at for p in points if p.stop_at is not None}
    record(
        name,
        kill_points=len(points),
        distinct_byte_offsets=len(offsets),
        after_replies=sum(p.stop_after_reply is not None for p in points),
        traffic_bytes=sum(map(len, frames)),
        frame_bytes=dict(zip(STEPS, map(len, frames), strict=True)),
        killed_during_step=counts,
        seconds=round(time.monotonic() - t0, 1),
    )


async def test_client_killed_at_100_points_of_its_traffic(daemon: RunningDaemon) -> None:
    points = quick_points(scenario_frames(1, 2, 3))
    assert len(points) == 100
    await run(daemon, "crash_points_quick", points)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_client_killed_at_500_more_points_of_its_traffic(daemon: RunningDaemon) -> None:
    points = slow_points(scenario_frames(1, 2, 3))
    assert len(points) == 500
    await run(daemon, "crash_points_soak", points)
