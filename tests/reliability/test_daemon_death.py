"""Daemon death: the daemon is SIGKILLed while a client holds one of its
children.

- The held child keeps running and the client's fd keeps working (a line
  written to it comes back from ``cat``), before and after a new daemon
  starts: the PTY lives as long as some process holds its master.
- The unheld child goes with the daemon: its master's last copy is closed,
  so the kernel hangs up its terminal (SIGHUP), as for a tmux server's death.
- The next ``open_client(start=True)`` finds the stale socket (nothing
  listens), replaces it under the lock and starts a new daemon: new pid, new
  instance id, no children.
- ``multiserver restore`` relaunches every saved session of the dead daemon
  in the new one (the saved refs name the dead instance).
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest
import trio

from multiserver import ConnectionClosed, DaemonPaths, MultiserverError, open_client
from tests.conftest import (
    MsDirs,
    close_fd,
    daemon_pids_for,
    is_alive,
    is_dead,
    kill_group_and_pid,
    read_until,
    stop_daemon_sync,
    wait_until,
)
from tests.reliability._cli import ms_ok
from tests.reliability._report import record


async def echo(master: int, word: bytes) -> None:
    line = word + b"\n"
    os.write(master, line)
    await read_until(master, line.replace(b"\n", b"\r\n") * 2)


async def test_sigkilled_daemon_held_child_survives_and_restore_relaunches(
    ms_dirs: MsDirs,
) -> None:
    paths: DaemonPaths = ms_dirs.paths
    orphans: list[int] = []
    master: int | None = None
    try:
        await ms_ok("new", "-d", "-n", "held", "--", "cat")
        await ms_ok("new", "-d", "-n", "unheld", "--", "cat")
        [old_pid] = daemon_pids_for(paths.socket)
        async with open_client(paths) as client:
            old_instance = client.instance_id
            before = {c.name: c for c in await client.list()}
            orphans = [c.pid for c in before.values()]
            [held] = await client.claim([before["held"].id])
            assert held.ok and held.master is not None
            master = held.master
            await echo(master, b"before-death")

            t0 = time.monotonic()
            os.kill(old_pid, signal.SIGKILL)
            await wait_until(lambda: not is_alive(old_pid), message="the daemon to die")
            await echo(master, b"after-death")
            assert is_alive(before["held"].pid)
            await wait_until(
                lambda: is_dead(before["unheld"].pid), message="the unheld child to be hung up"
            )
            with pytest.raises((ConnectionClosed, MultiserverError)):
                with trio.fail_after(5):
                    await client.list()
        assert paths.socket.is_socket()  # stale: nothing listens there

        t1 = time.monotonic()
        with trio.fail_after(15):
            async with open_client(paths, start=True) as fresh:
                assert fresh.daemon_pid != old_pid
                assert fresh.instance_id != old_instance
                assert await fresh.list() == []
                new_pid = fresh.daemon_pid
        restart = time.monotonic() - t1
        await echo(master, b"new-daemon-up")

        report: Any = json.loads(await ms_ok("restore", "--json"))
        outcomes = {s["name"]: s["outcome"] for s in report["sessions"]}
        assert outcomes == {"held": "relaunched", "unheld": "relaunched"}, report
        assert report["ok"] is True
        async with open_client(paths) as fresh:
            after = {c.name: c for c in await fresh.list()}
        assert sorted(after) == ["held", "unheld"]
        for name, info in after.items():
            assert (info.state, info.argv, info.held) == ("running", ["cat"], False)
            assert info.pid not in orphans, name
        # The client that held a child of the dead daemon still has it.
        await echo(master, b"after-restore")
        assert is_alive(before["held"].pid)
        assert [new_pid] == daemon_pids_for(paths.socket)
        record(
            "daemon_death",
            held_child_survived=True,
            unheld_child_hung_up=True,
            restart_seconds=round(restart, 3),
            restore_seconds=report.get("seconds"),
            relaunched=sorted(outcomes),
            total_seconds=round(time.monotonic() - t0, 2),
        )
    finally:
        close_fd(master)
        for pid in orphans:  # children of the dead daemon: nobody's now
            if is_alive(pid):
                kill_group_and_pid(pid)
        for pid in daemon_pids_for(paths.socket):
            stop_daemon_sync(pid)
