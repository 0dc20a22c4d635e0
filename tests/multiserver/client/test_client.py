"""The trio client (``multiserver.client._client``) against a simulated
daemon under the autojump clock."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing

from multiserver import ConnectionClosed, dial
from multiserver.testing import Behavior, Release, SimDaemon
from tests.conftest import MsDirs


async def test_a_request_fails_once_nothing_reads_its_answer(
    ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """A client started in a nursery that is then cancelled reads no more:
    a request waiting for its answer, shielded even (a login giving its
    claims back as it is cancelled), fails at once instead of waiting for
    ever, and the connection can be closed."""
    ms_dirs.runtime.mkdir(mode=0o700)
    sim = SimDaemon(ms_dirs.paths.socket, behavior=Behavior.on(Release, delay=5.0))
    child = sim.add_child(["sh"], name="a")
    outcome: list[tuple[str, float]] = []
    async with trio.open_nursery() as serving:
        await serving.start(sim.serve)
        client = await dial(ms_dirs.paths.socket)
        try:
            async with trio.open_nursery() as reading:
                client.start(reading)
                for result in await client.claim([child.id]):
                    if result.master is not None:
                        os.close(result.master)

                async def give_back() -> None:
                    start = trio.current_time()
                    # Bounded, so that a release that waits for ever fails the test.
                    with trio.CancelScope(shield=True, deadline=start + 3.0):
                        try:
                            await client.release([child.id])
                        except ConnectionClosed:
                            outcome.append(("closed", trio.current_time() - start))

                reading.start_soon(give_back)
                await trio.sleep(1.0)
                reading.cancel_scope.cancel()
        finally:
            client.close()
        await sim.wait_connections(0)
        assert not child.held
        sim.stop()
    assert outcome == [("closed", pytest.approx(1.0))]
