"""Figure: claim 200 detached sessions in one request.

- multiserver: a fresh daemon with 200 detached ``sleep`` children (drained,
  held by nobody); ``Client.claim(ids)`` timed from the call to the last
  result, which holds the master fd of each. The fds are then closed and the
  children released; a second claim of the same children is reported beside.
- baseline: the same number of PTY master fds passed over a Unix socketpair
  in this process, one ``sendmsg`` of 256 bytes + one fd and one ``recvmsg``
  each (the floor for one reply per child).
"""

from __future__ import annotations

import array
import os
import socket
import time

import trio

from benchmarks.common import (
    MEASURE_TIMEOUT,
    SESSION_ARGV,
    daemon_client,
    scratch,
)
from benchmarks.results import (
    Limit,
    Row,
    Settings,
    median,
    spread,
)

NAME = "claim"
TARGET_MS = 20.0
BASELINE = "raw: SCM_RIGHTS over a socketpair, one fd per message"
# Let the daemon's drains start and the children go idle before the claim.
SETTLE = 0.3


def _raw_pass(count: int) -> float:
    pairs = [os.openpty() for _ in range(count)]
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    payload = b"x" * 256
    anc_space = socket.CMSG_SPACE(array.array("i").itemsize)
    received: list[int] = []
    try:
        t0 = time.perf_counter()
        for master, _ in pairs:
            a.sendmsg(
                [payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [master]))]
            )
            _, anc, _, _ = b.recvmsg(4096, anc_space, socket.MSG_CMSG_CLOEXEC)
            for _level, _kind, data in anc:
                received.extend(array.array("i", data))
        elapsed = time.perf_counter() - t0
    finally:
        a.close()
        b.close()
        for fd in received:
            os.close(fd)
        for master, slave in pairs:
            os.close(master)
            os.close(slave)
    if len(received) != count:
        raise RuntimeError(f"raw pass: {len(received)} of {count} fds arrived")
    return elapsed


async def _claim(count: int) -> tuple[float, float]:
    with trio.fail_after(MEASURE_TIMEOUT):
        async with daemon_client() as client:
            ids = [(await client.launch(SESSION_ARGV, hold=False)).child.id for _ in range(count)]
            await trio.sleep(SETTLE)
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                results = await client.claim(ids)
                times.append(time.perf_counter() - t0)
                masters = [r.master for r in results if r.master is not None]
                for fd in masters:
                    os.close(fd)
                bad = [r for r in results if not r.ok]
                if bad or len(masters) != count:
                    raise RuntimeError(f"claim: {len(masters)} fds of {count}; errors {bad[:3]}")
                released, failures = await client.release(ids)
                if failures or len(released) != count:
                    raise RuntimeError(f"release: {len(released)} of {count}; {failures[:3]}")
                await trio.sleep(SETTLE)
            return times[0], times[1]


def _multiserver(count: int) -> tuple[float, float]:
    with scratch("claim"):
        return trio.run(_claim, count)


def run(settings: Settings) -> list[Row]:
    k = settings.sessions
    raw: list[float] = []
    first: list[float] = []
    second: list[float] = []
    for _ in range(settings.runs):
        raw.append(_raw_pass(k) * 1000)
        a, b = _multiserver(k)
        first.append(a * 1000)
        second.append(b * 1000)
    value = median(first)
    return [
        Row.against(
            Limit("<", TARGET_MS, value, "ms"),
            figure=f"claim {k} sessions in one request",
            subject="multiserver, Client.claim(ids), first claim",
            value=value,
            unit="ms",
            runs=len(first),
            baseline=BASELINE,
            baseline_value=median(raw),
            detail=(
                f"range {spread(first, 1, '{:.1f}')} ms; claim again after release: "
                f"{median(second):.1f} ms"
            ),
            samples=tuple(first),
            baseline_samples=tuple(raw),
        )
    ]
