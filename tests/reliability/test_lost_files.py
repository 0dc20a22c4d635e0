"""Lost files: the lock file or the socket file of a running daemon is
deleted under it (by a person, a script, a tmp cleaner).

- Lock file deleted: no second daemon starts (a client, or a daemon a
  client spawned, finds the live one answering and uses it), the sessions of
  the first stay reachable, restore attaches them rather than relaunching
  them, and within about a second the daemon holds a lock file at the path
  again.
- Socket file deleted: within about a second the daemon listens on the path
  again; a client started meanwhile waits on the lock and then connects; the
  old sessions are all there, and the old listener's fd is closed.
- At exit a daemon unlinks only its own files: a socket or lock put in
  their place by someone else stays.

The figures (how long until the files are back) are recorded with
``record``; docs/reliability.md quotes them. Every daemon these tests start
is stopped by pid by ``ms_dirs`` (found by its socket path under the test's
dir), children first.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import multiserver.client._start
from multiserver import DaemonNotRunning, DaemonPaths, open_client
from multiserver._errors import DaemonAlreadyRunning
from multiserver.daemon._files import WATCH_INTERVAL
from multiserver.system._paths import lock_is_held, try_lock
from tests.conftest import (
    MsDirs,
    close_fd,
    connected_clients,
    daemon_pids_for,
    fd_links,
    is_alive,
    read_until,
    stop_daemon_sync,
    wait_fds_back,
    wait_until,
)
from tests.reliability._cli import ms_ok, ms_run
from tests.reliability._report import record

# A bound on "the daemon notices within about a second": its watch looks
# every WATCH_INTERVAL; the rest is slack for 2 busy cores.
NOTICE_BOUND = WATCH_INTERVAL + 4.0


def holds_lock_file(pid: int, lock: Path) -> bool:
    """``pid`` holds an fd on the file the lock path names now (/proc shows a
    deleted file as "PATH (deleted)"), and that file is locked."""
    return str(lock) in fd_links(pid).values() and lock_is_held(lock)


async def wait_relocked(paths: DaemonPaths, pid: int) -> None:
    await wait_until(lambda: holds_lock_file(pid, paths.lock), NOTICE_BOUND, "the daemon to relock")


async def answers(paths: DaemonPaths, pid: int) -> bool:
    """A client can connect on the socket path and the daemon ``pid`` answers."""
    try:
        async with open_client(paths) as client:
            return client.daemon_pid == pid
    except DaemonNotRunning:
        return False


async def wait_answers(paths: DaemonPaths, pid: int) -> float:
    """Seconds until ``pid`` answers on the socket path again."""
    t0 = time.monotonic()
    with trio.move_on_after(NOTICE_BOUND):
        while not await answers(paths, pid):
            await trio.sleep(0.005)
        return time.monotonic() - t0
    pytest.fail(f"daemon {pid} not back on {paths.socket} within {NOTICE_BOUND} s")


async def session_names(paths: DaemonPaths) -> list[str]:
    async with open_client(paths) as client:
        return sorted(c.name for c in await client.list() if c.state == "running")


async def test_a_deleted_lock_file_starts_no_second_daemon(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = ms_dirs.paths
    await ms_ok("new", "-d", "-n", "old", "--", "cat")
    [pid] = daemon_pids_for(paths.socket)
    socket_before = os.lstat(paths.socket)

    # As reported: the lock file is deleted, then clients start.
    paths.lock.unlink()
    async with open_client(paths, start=True) as client:
        assert client.daemon_pid == pid
    await ms_ok("new", "-d", "-n", "new", "--", "cat")
    assert daemon_pids_for(paths.socket) == [pid]
    # The lock file is the daemon's again within about a second.
    await wait_relocked(paths, pid)

    # Now the races, made certain: the daemon is stopped, so its watch
    # cannot take the lock back meanwhile.
    os.kill(pid, signal.SIGSTOP)
    try:
        paths.lock.unlink()
        # A client whose first connect failed (say the socket had just
        # gone and come back) takes the fresh lock, and a daemon it
        # spawns then finds the live one: it refuses, and the client
        # connects to the live one. (The client's own probe would see
        # it first: skip that, to drive the daemon's.)
        refused = [True]
        real_connect = multiserver.client._start.connect

        async def connect_once_refused(path: Path) -> trio.socket.SocketType:
            if refused:
                refused.pop()
                raise DaemonNotRunning(str(path))
            return await real_connect(path)

        with monkeypatch.context() as m:
            m.setattr(multiserver.client._start, "connect", connect_once_refused)
            m.setattr(multiserver.client._start, "remove_stale_socket", lambda path: "gone")
            with trio.fail_after(15):
                sock = await multiserver.client._start.connect_or_start(paths)
        peer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        sock.close()
        assert int.from_bytes(peer[:4], "little") == pid  # the live daemon
        assert "a daemon already answers on" in paths.log.read_text()

        # So does a daemon run in the foreground, in one line.
        foreground = await ms_run("daemon", "--foreground")
        assert foreground.returncode == 1
        assert foreground.stderr.decode().splitlines() == [
            f"multiserver: a daemon already answers on {paths.socket}; not starting"
        ]

        # A starter that holds the fresh lock is told so in one line.
        lock_fd = try_lock(paths.lock)
        try:
            with pytest.raises(DaemonAlreadyRunning, match=r"^a daemon already answers on "):
                await multiserver.client._start.start_daemon(
                    paths, lock_fd, multiserver.client._start.config_from_env()
                )
        finally:
            os.close(lock_fd)
        assert os.path.samestat(os.lstat(paths.socket), socket_before)
    finally:
        os.kill(pid, signal.SIGCONT)
    await wait_until(lambda: daemon_pids_for(paths.socket) == [pid], message="one daemon")
    await wait_relocked(paths, pid)

    # Both sessions, the one from before and the one made after the
    # deletion, are reachable; restore attaches them, relaunching none.
    async with open_client(paths, start=True) as client:
        assert client.daemon_pid == pid
        by_name = {c.name: c for c in await client.list()}
        assert sorted(by_name) == ["new", "old"]
        claimed = await client.claim([c.id for c in by_name.values()])
        try:
            for result in claimed:
                assert result.master is not None
                os.write(result.master, b"ping\n")
                await read_until(result.master, b"ping\r\nping\r\n")
        finally:
            for result in claimed:
                close_fd(result.master)
    report: Any = json.loads(await ms_ok("restore", "--json"))
    outcomes = {s["name"]: s["outcome"] for s in report["sessions"]}
    assert outcomes == {"new": "attached", "old": "attached"}, report
    assert await session_names(paths) == ["new", "old"]
    assert daemon_pids_for(paths.socket) == [pid]

    # At exit it removes its own files, and only those.
    stop_daemon_sync(pid)
    assert not os.path.lexists(paths.socket) and not os.path.lexists(paths.lock)


async def test_a_deleted_socket_file_is_bound_again(ms_dirs: MsDirs) -> None:
    paths = ms_dirs.paths
    await ms_ok("new", "-d", "-n", "old", "--", "cat")
    [pid] = daemon_pids_for(paths.socket)
    await wait_until(lambda: connected_clients(pid, paths.socket) == 0, message="no clients")
    fds_before = fd_links(pid)

    # Time until it answers again, a few times.
    back = []
    for _ in range(3):
        paths.socket.unlink()
        back.append(await wait_answers(paths, pid))
    # Each old listener was closed: the same fds as before.
    await wait_until(lambda: connected_clients(pid, paths.socket) == 0, message="no clients")
    await wait_fds_back(pid, fds_before)

    # A command run right after the deletion waits on the lock the
    # daemon holds, then connects: the old daemon, with the old session.
    paths.socket.unlink()
    t0 = time.monotonic()
    await ms_ok("new", "-d", "-n", "new", "--", "cat")
    new_seconds = time.monotonic() - t0
    assert daemon_pids_for(paths.socket) == [pid]
    assert await session_names(paths) == ["new", "old"]
    listed = {s["name"] for s in json.loads(await ms_ok("ls", "--json"))}
    assert listed == {"new", "old"}
    assert holds_lock_file(pid, paths.lock)
    record(
        "lost_socket_file",
        back_seconds=[round(s, 3) for s in back],
        back_median_seconds=round(statistics.median(back), 3),
        new_after_delete_seconds=round(new_seconds, 3),
    )


async def test_both_files_deleted_come_back(ms_dirs: MsDirs) -> None:
    paths = ms_dirs.paths
    async with open_client(paths, start=True) as client:
        pid = client.daemon_pid
        await client.launch(["cat"], name="old", hold=False)
    paths.socket.unlink()
    paths.lock.unlink()
    t0 = time.monotonic()
    await wait_relocked(paths, pid)
    relock = time.monotonic() - t0
    await wait_answers(paths, pid)
    assert await session_names(paths) == ["old"]
    assert daemon_pids_for(paths.socket) == [pid]
    record("lost_both_files", relock_seconds=round(relock, 3))


async def test_a_daemon_unlinks_only_its_own_files(ms_dirs: MsDirs) -> None:
    """Another daemon's socket and lock, moved into the paths (rename is
    atomic, so the watch never sees them missing), stay when the first
    daemon exits; the first one says so in its log and does not take them."""
    paths = ms_dirs.paths
    async with open_client(paths, start=True) as client:
        pid = client.daemon_pid
    other_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lock_fd = -1
    try:
        tmp = paths.dir / "other.socket"
        other_sock.bind(str(tmp))
        other_sock.listen(1)
        os.rename(tmp, paths.socket)
        tmp_lock = paths.dir / "other.lock"
        lock_fd = try_lock(tmp_lock)
        os.rename(tmp_lock, paths.lock)
        theirs = os.lstat(paths.socket), os.lstat(paths.lock)

        def warned() -> bool:
            log = paths.log.read_text()
            return "names another file now" in log and "another process holds it" in log

        await wait_until(warned, NOTICE_BOUND, "the daemon's warnings")
        stop_daemon_sync(pid)
        assert not is_alive(pid)
        assert os.path.samestat(os.lstat(paths.socket), theirs[0])
        assert os.path.samestat(os.lstat(paths.lock), theirs[1])
        assert lock_is_held(paths.lock)  # still ours here, never taken
    finally:
        other_sock.close()
        if lock_fd >= 0:
            os.close(lock_fd)
