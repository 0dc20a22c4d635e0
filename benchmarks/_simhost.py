"""Simulated daemons served by one process, for the ``simrestore`` figure::

    python -m benchmarks._simhost DIR FIRST COUNT PER_DAEMON

Serves COUNT ``multiserver.testing.SimDaemon`` (the daemon's own request
core and connections; children are socketpairs, not PTYs), at
``DIR/sFIRST.sock`` onwards, each with PER_DAEMON running, unheld
children. Once every one listens it prints one JSON line: per daemon its
socket and instance id, and its children's id, pid (a fake one) and name.
It serves until its stdin closes (the benchmark holds the other end), then
stops every daemon, which closes their sockets and fds.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import trio

from benchmarks.common import SESSION_ARGV
from multiserver.testing import SimDaemon


async def _serve(root: Path, first: int, count: int, per_daemon: int) -> None:
    sims = []
    for n in range(first, first + count):
        sim = SimDaemon(root / f"s{n}.sock")
        for i in range(per_daemon):
            sim.add_child(SESSION_ARGV, name=f"d{n}s{i}")
        sims.append(sim)
    async with contextlib.AsyncExitStack() as stack:
        for sim in sims:
            await stack.enter_async_context(sim.serving())
        listing = [
            {
                "socket": str(sim.socket_path),
                "instance_id": sim.instance_id,
                "children": [[c.id, c.pid, c.name] for c in sim.children],
            }
            for sim in sims
        ]
        print(json.dumps(listing), flush=True)
        await trio.to_thread.run_sync(sys.stdin.buffer.read)


def main(argv: list[str]) -> int:
    root, first, count, per_daemon = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    trio.run(_serve, root, first, count, per_daemon)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
