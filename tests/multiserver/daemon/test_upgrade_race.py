"""A stop and an upgrade of one daemon at once, and the pause an upgrade
reports (issue 35). Seen: `stop --force` while an upgrade ran ended every
session, said "connection closed by peer" (exit 1), and the upgraded
daemon ran on; clients froze 4.9 s while the upgrade said "paused 119 ms".
Now the first to come wins and the other says so in one line; the pause
reported is counted from when clients began to wait.

Real detached daemons, real PTYs; every wait is bounded."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import trio

from multiserver import open_client
from multiserver.daemon._upgrade import QUIET_WAIT
from multiserver.protocol._codec import Codec
from multiserver.protocol._messages import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, Hello, Peek
from tests.cli.conftest import ms
from tests.conftest import MsDirs, RunningDaemon, is_alive, wait_until
from tests.multiserver.daemon.test_daemon import seq_output, wait_buffered
from tests.procs import check_process
from tests.reliability._raw import RawConnection
from tests.timing import TIMER_SLACK

TIMEOUT = 30.0
# A program that ignores the hangup: a forced stop takes its grace (5 s) to end it.
STUBBORN = ["sh", "-c", "trap '' HUP; exec sleep 600"]


class Probes:
    """New connections back to back, each timed from its connect to the
    first byte of the Welcome: the longest is what a client waited."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._hello = Codec("client").send(
            Hello(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, client="probe", children=False)
        )
        self.longest = 0.0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            with trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                t0 = time.monotonic()
                await sock.connect(str(self._path))
                await sock.send(self._hello)
                assert await sock.recv(1), "a probe's connection closed unanswered"
                self.longest = max(self.longest, time.monotonic() - t0)
            await trio.sleep(0.002)


async def test_a_stop_during_an_upgrade_is_refused_in_one_line_and_the_upgrade_goes_on(
    daemon: RunningDaemon, ms_dirs: MsDirs
) -> None:
    async with open_client(daemon.paths) as client:
        kept = [(await client.launch(STUBBORN, hold=False)).child for _ in range(3)]
        probes = Probes(daemon.paths.socket)
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                done: list[object] = []

                async def upgrade() -> None:
                    async with open_client(daemon.paths) as upgrader:
                        done.append(await upgrader.upgrade())

                nursery.start_soon(upgrade)
                await wait_until(lambda: check_process(daemon.pid), TIMEOUT, "the check run")
                stop = await ms(ms_dirs, "stop", "--force", check=False)
                await nursery.start(probes.run)
                while not done:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        assert stop.returncode == 1
        assert stop.stderr.decode().splitlines() == [
            "multiserver: the daemon is being upgraded: not stopped;"
            " stop it once the upgrade is done"
        ]
        [upgraded] = done
        # The upgrade won: the same daemon, every session running.
        listed = await client.list()
        assert [(c.id, c.pid, c.state) for c in listed] == [(c.id, c.pid, "running") for c in kept]
        assert upgraded.pid == daemon.pid  # type: ignore[attr-defined]
        # What clients waited is what it reports (not a part of it).
        assert probes.longest <= upgraded.paused + TIMER_SLACK  # type: ignore[attr-defined]
        for child in kept:
            await client.signal(child.id, signal.SIGKILL)
    # Now the stop goes through.
    await ms(ms_dirs, "stop", "--force")
    await wait_until(lambda: not is_alive(daemon.pid), 10, "the daemon gone")


async def test_an_upgrade_during_a_stop_is_refused_in_one_line_and_the_stop_goes_on(
    daemon: RunningDaemon, ms_dirs: MsDirs
) -> None:
    async with open_client(daemon.paths) as client:
        for _ in range(3):
            await client.launch(STUBBORN, hold=False)
    async with trio.open_nursery() as nursery:
        stopped: list[object] = []

        async def stop() -> None:
            async with open_client(daemon.paths) as stopper:
                await stopper.shutdown(force=True)
                stopped.append(True)

        nursery.start_soon(stop)
        # Accepted: the sessions are being ended (their grace is 5 s).
        await wait_until(
            lambda: "shutdown requested" in daemon.paths.log.read_text(), 10, "the stop"
        )
        upgrade = await ms(ms_dirs, "upgrade", check=False)
    assert stopped == [True]
    assert upgrade.returncode == 1 and upgrade.stdout == b""
    assert upgrade.stderr.decode().splitlines() == [
        f"multiserver: daemon 1 (pid {daemon.pid}): not upgraded: the daemon is stopping"
    ]
    await wait_until(lambda: not is_alive(daemon.pid), 10, "the daemon gone")


async def test_the_pause_reported_counts_the_wait_for_a_client_that_does_not_park(
    daemon: RunningDaemon,
) -> None:
    """A client that asks and never reads: its requests wait for room in
    its outbox, so it cannot park; it is disconnected after QUIET_WAIT.
    Clients wait all that while, and the pause reported says so (it
    counted from the last snapshot, a tenth of it)."""
    count = 150_000  # 1 MiB kept (more printed): 9 Peeks fill the outbox past its mark
    async with open_client(daemon.paths) as client:
        flood = await client.launch(["seq", "1", str(count)], hold=False)
        await wait_buffered(client, flood.child.id, len(seq_output(count)))
        greedy = RawConnection.connect(str(daemon.paths.socket))
        try:
            greedy.hello()
            for req in range(1, 21):
                greedy.send(Peek(req=req, id=flood.child.id))
            probes = Probes(daemon.paths.socket)
            with trio.fail_after(TIMEOUT):
                async with trio.open_nursery() as nursery:
                    await nursery.start(probes.run)
                    upgraded = await client.upgrade()
                    nursery.cancel_scope.cancel()
        finally:
            greedy.close()
        assert upgraded.paused >= QUIET_WAIT
        assert probes.longest <= upgraded.paused + TIMER_SLACK
        await client.collect(flood.child.id)
