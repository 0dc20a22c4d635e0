"""Many clients claiming and releasing at once, in a process of their own
(so the test process stays free to probe the daemon's latency).

    python -m tests.reliability._load_clients SOCKET IDS_JSON CLIENTS SECONDS SEED

All clients connect first (the first line out says how long that took),
then each loops until the time is up: claim 1 to 4 random children (one
claim in twenty with ``steal``), close the fds, release what it got. Then prints
one JSON object: cycles, outcomes by errno, claim and release round trips.
A ChildError other than EBUSY (held by another client) on a claim, or EPERM
(stolen meanwhile) on a release, is counted as unexpected.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import trio

from multiserver import Client, MultiserverError, open_client


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def client_loop(
    client: Client, ids: list[int], deadline: float, seed: int, stats: dict[str, Any]
) -> None:
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        picks = rng.sample(ids, rng.randint(1, 4))
        steal = rng.random() < 0.05
        t0 = time.perf_counter()
        results = await client.claim(picks, steal=steal)
        took = time.perf_counter() - t0
        stats["claim_rtt"].append(took)
        if took > 0.5:  # when: to match with the probe and the daemon's log
            stats["slow_claims"].append((round(time.time() - took, 2), round(took, 2)))
        got = []
        for result in results:
            if result.master is not None:
                os.close(result.master)
            if result.ok:
                got.append(result.id)
                stats["claimed"] += 1
            elif result.error is not None and result.error.errno == errno.EBUSY:
                stats["busy"] += 1
            else:
                stats["unexpected"] += 1
        t0 = time.perf_counter()
        released, failures = await client.release(got)
        stats["release_rtt"].append(time.perf_counter() - t0)
        stats["released"] += len(released)
        for failure in failures:
            if failure.errno == errno.EPERM:
                stats["stolen"] += 1
            else:
                stats["unexpected"] += 1
        stats["cycles"] += 1


async def main(socket: Path, ids: list[int], clients: int, seconds: float, seed: int) -> None:
    stats: dict[str, Any] = {
        "claim_rtt": [],
        "release_rtt": [],
        "slow_claims": [],
        "cycles": 0,
        "claimed": 0,
        "released": 0,
        "busy": 0,
        "stolen": 0,
        "unexpected": 0,
        "failed_clients": 0,
    }
    async with contextlib.AsyncExitStack() as stack:
        # Connect everyone first: each Welcome lists every child, which is
        # work for both sides; the measured minute starts after it.
        t0 = time.monotonic()
        connected = [await stack.enter_async_context(open_client(socket)) for _ in range(clients)]
        print(json.dumps({"connected_seconds": round(time.monotonic() - t0, 2)}), flush=True)
        deadline = time.monotonic() + seconds

        async def guarded(n: int) -> None:
            try:
                await client_loop(connected[n], ids, deadline, seed * 1000 + n, stats)
            except MultiserverError as exc:
                stats["failed_clients"] += 1
                print(f"client {n}: {exc}", file=sys.stderr)

        t0 = time.monotonic()
        async with trio.open_nursery() as nursery:
            for n in range(clients):
                nursery.start_soon(guarded, n)
        took = time.monotonic() - t0
    claim_rtt = stats.pop("claim_rtt")
    release_rtt = stats.pop("release_rtt")
    slow = stats.pop("slow_claims")
    report = {
        **stats,
        "claims_over_500ms": len(slow),
        "first_slow_claims": slow[:5],  # (unix time it began, seconds)
        "seconds": round(took, 1),
        "claim_ms": {p: round(percentile(claim_rtt, p) * 1000, 2) for p in (50, 99)},
        "release_ms": {p: round(percentile(release_rtt, p) * 1000, 2) for p in (50, 99)},
        "claim_max_ms": round(max(claim_rtt, default=0) * 1000, 2),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    sock, ids_json, n, secs, seed = sys.argv[1:6]
    trio.run(main, Path(sock), json.loads(ids_json), int(n), float(secs), int(seed))
