"""Simulated daemons (``multiserver.testing``) for the harness tests of the
restore and of the adopter, under trio's autojump clock: where a sim
listens, sims serving for a block, no real daemon started for a relaunch,
and no fd left open.

- ``sim_at(n)``: a sim at daemon number n's socket in the test's runtime
  dir (``ms_dirs``): where relaunches go.
- ``serving(*sims)``: every sim serves for the length of the block.
- ``refuse_real_daemons(monkeypatch)``: a relaunch that finds no sim at its
  socket fails instead of starting a daemon (each harness's fixture).
- ``no_fd_leak()``: every fd opened inside the block is closed at its end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

from multiserver import DaemonPaths, MultiserverError
from multiserver.testing import SimDaemon


def sim_at(number: int, **kw: Any) -> SimDaemon:
    """A sim at daemon number ``number``'s socket: where relaunches go."""
    return SimDaemon(DaemonPaths.for_number(number).socket, **kw)


@contextlib.asynccontextmanager
async def serving(*sims: SimDaemon) -> AsyncIterator[None]:
    """Every sim serves for the length of the block (in one nursery, so a
    failure inside comes out wrapped once, not once per sim)."""
    async with trio.open_nursery() as nursery:
        for sim in sims:
            await nursery.start(sim.serve)
        try:
            yield
        finally:
            for sim in sims:
                sim.stop()


def refuse_real_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    """A relaunch that finds no sim must not spawn a real daemon."""

    async def refuse(*_args: Any, **_kw: Any) -> int:
        raise MultiserverError("daemon failed to start: no real daemons in harness tests")

    monkeypatch.setattr("multiserver.client._start.start_daemon", refuse)


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@contextlib.contextmanager
def no_fd_leak() -> Iterator[None]:
    """Every fd opened inside the block (sims, clients, stores) is closed at its end."""
    before = open_fds()
    yield
    leaked = open_fds() - before
    links = {}
    for fd in leaked:
        with contextlib.suppress(OSError):
            links[fd] = os.readlink(f"/proc/self/fd/{fd}")
    assert not leaked, f"fds left open: {links}"
