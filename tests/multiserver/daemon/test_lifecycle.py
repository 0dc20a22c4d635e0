"""How the daemon started by a client lives: detached from the test, with
clean process state, holding only the fds it needs, and gone without a trace
when told to stop."""

from __future__ import annotations

import errno
import fcntl
import importlib.util
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable

import pytest
import trio

from multiserver import DaemonNotRunning, connect, open_client
from tests.conftest import (
    MsDirs,
    RunningDaemon,
    connected_clients,
    daemon_pids_for,
    fd_count,
    fd_links,
    is_alive,
    parent_pid,
    proc_status,
    stop_daemon,
    unix_socket_inodes,
    wait_listed_exited,
    wait_until,
)

StartDaemon = Callable[[], Awaitable[RunningDaemon]]


def ancestors(pid: int) -> list[int]:
    found = []
    while (ppid := parent_pid(pid)) not in (None, 0):
        assert ppid is not None
        found.append(ppid)
        pid = ppid
    return found


def lock_is_held(path: str) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        assert exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        return True
    finally:
        os.close(fd)
    return False


async def test_daemon_is_detached_with_clean_process_state(
    ms_dirs: MsDirs, start_daemon: StartDaemon
) -> None:
    # An inheritable fd of the starting process must not reach the daemon.
    leak_r, leak_w = os.pipe()
    os.set_inheritable(leak_r, True)
    try:
        daemon = await start_daemon()
    finally:
        os.close(leak_r)
        os.close(leak_w)
    pid = daemon.pid
    paths = ms_dirs.paths

    # Not our child: reparented to init (or the nearest subreaper above us).
    ppid = parent_pid(pid)
    assert ppid != os.getpid()
    assert ppid == 1 or ppid in ancestors(os.getpid())
    # Its own session, of which it is not the leader: it can never get a tty.
    sid = os.getsid(pid)
    assert sid != os.getsid(0)
    assert sid != pid
    with open(f"/proc/{pid}/stat") as f:
        tty_nr = int(f.read().rsplit(")", 1)[1].split()[4])
    assert tty_nr == 0
    assert os.readlink(f"/proc/{pid}/cwd") == "/"
    assert proc_status(pid)["Umask"] == "0077"

    # stdio: /dev/null in, the log in the state dir out.
    links = fd_links(pid)
    assert links[0] == "/dev/null"
    assert links[1] == links[2] == str(paths.log)
    assert paths.log.parent == ms_dirs.state
    assert "listening on" in paths.log.read_text()
    # The lock is held for the daemon's life.
    assert lock_is_held(str(paths.lock))


async def test_daemon_holds_only_the_fds_it_needs(ms_dirs: MsDirs, daemon: RunningDaemon) -> None:
    """Lock, listening socket, log, stdio, trio's epoll and wakeup fds, the
    drain and reap sets (two more epolls), the spare fd the accept loop
    turns a connection away with at the fd limit (/dev/null), and per
    running child its master and pidfd: nothing else (no ready pipe, no
    inherited fd, no client socket once the clients are gone)."""
    paths = ms_dirs.paths
    async with open_client(paths) as client:
        await client.launch(["sleep", "30"], hold=False)
        exited = await client.launch(["true"], hold=False)
        # Reaped (its pidfd closed), not collected (its master kept).
        assert await wait_listed_exited(client, exited.child.id) == 0
    await wait_until(lambda: connected_clients(daemon.pid, paths.socket) == 0, message="no clients")

    links = fd_links(daemon.pid)
    bound = unix_socket_inodes(paths.socket)
    kinds: dict[str, list[int]] = {}
    for fd, link in sorted(links.items()):
        if fd in (0, 1, 2):
            kind = "stdio"
        elif link == str(paths.lock):
            kind = "lock"
        elif link.startswith("socket:["):
            inode = int(link[len("socket:[") : -1])
            kind = "listener" if inode in bound else "internal socket"
        elif link == "anon_inode:[eventpoll]":
            kind = "epoll"
        elif link in ("/dev/ptmx", "/dev/pts/ptmx"):
            kind = "master"
        elif link == "anon_inode:[pidfd]":
            kind = "pidfd"
        elif link == os.devnull:
            kind = "spare"
        else:
            kind = f"unexpected: {link}"
        kinds.setdefault(kind, []).append(fd)
    counts = {kind: len(fds) for kind, fds in kinds.items()}
    # trio's wakeup socketpairs (run loop + I/O manager): at most two pairs.
    assert counts.pop("internal socket", 0) <= 4, links
    # The exited child's pidfd is closed once reaped; its master stays until
    # it is collected (its output may still be read).
    assert counts == {
        "stdio": 3,
        "lock": 1,
        "listener": 1,
        "epoll": 3,  # trio's, the drain set, the exit set
        "spare": 1,
        "master": 2,
        "pidfd": 1,
    }, links


async def test_daemon_runs_a_single_thread(ms_dirs: MsDirs, daemon: RunningDaemon) -> None:
    """No worker thread, from start-up on: in a multi-threaded process each
    growth of the fd table waits for an RCU grace period, which made the
    first claim of 200 children 6 ms slower (trio's ``bind`` of a Unix path
    runs in a thread and the thread lingers)."""
    async with open_client(ms_dirs.paths) as client:
        launched = await client.launch(["sleep", "30"], hold=False)
        (result,) = await client.claim([launched.child.id])
        assert result.master is not None
        os.close(result.master)
    assert os.listdir(f"/proc/{daemon.pid}/task") == [str(daemon.pid)]


async def test_a_client_connection_costs_the_daemon_one_fd(
    ms_dirs: MsDirs, daemon: RunningDaemon
) -> None:
    paths = ms_dirs.paths
    async with open_client(paths) as probe:
        await probe.list()  # the daemon has served this connection
        before = fd_count(daemon.pid)
        async with open_client(paths) as a, open_client(paths) as b, open_client(paths) as c:
            for client in (a, b, c):
                await client.list()
            assert connected_clients(daemon.pid, paths.socket) == 4
            assert fd_count(daemon.pid) == before + 3
    await wait_until(lambda: connected_clients(daemon.pid, paths.socket) == 0, message="no clients")


async def test_stale_socket_is_replaced_under_the_lock(ms_dirs: MsDirs) -> None:
    """A socket left by a dead daemon (nothing listens) is unlinked by the
    client that takes the lock, which then starts a daemon there."""
    ms_dirs.runtime.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(ms_dirs.paths.socket))
    stale.close()
    with trio.fail_after(5), pytest.raises(DaemonNotRunning):
        await connect(ms_dirs.paths.socket)
    with trio.fail_after(15):
        async with open_client(ms_dirs.paths, start=True) as client:
            pid = client.daemon_pid
            assert daemon_pids_for(ms_dirs.paths.socket) == [pid]
            assert await client.list() == []


async def test_sigterm_stops_the_daemon_and_removes_its_files(daemon: RunningDaemon) -> None:
    paths = daemon.paths
    assert paths.socket.is_socket() and paths.lock.exists()
    os.kill(daemon.pid, signal.SIGTERM)
    await wait_until(lambda: not is_alive(daemon.pid), message="daemon exit on SIGTERM")
    assert not paths.socket.exists()
    assert not paths.lock.exists()
    assert "stopped" in paths.log.read_text()
    with trio.fail_after(5), pytest.raises(DaemonNotRunning):
        await connect(paths.socket)


async def test_sighup_does_not_stop_the_daemon(daemon: RunningDaemon) -> None:
    os.kill(daemon.pid, signal.SIGHUP)
    with trio.fail_after(10):
        async with open_client(daemon.paths) as client:
            assert client.daemon_pid == daemon.pid
            assert await client.list() == []
    assert is_alive(daemon.pid)


@pytest.mark.skipif(
    importlib.util.find_spec("multiserver_cli.main") is None,
    reason="the `multiserver daemon` command does not exist yet",
)
async def test_cli_daemon_prints_socket_path(ms_dirs: MsDirs) -> None:
    code = "import sys; from multiserver_cli.main import main; sys.exit(main())"
    with trio.fail_after(20):
        result = await trio.run_process(
            [sys.executable, "-c", code, "daemon"], capture_stdout=True, capture_stderr=True
        )
    assert result.stdout.decode().strip() == str(ms_dirs.paths.socket)
    [pid] = daemon_pids_for(ms_dirs.paths.socket)
    assert parent_pid(pid) != os.getpid()


async def test_daemon_uses_the_state_dir_of_the_paths_it_was_started_for(
    ms_dirs: MsDirs,
) -> None:
    """The starting client tells the daemon its state dir (``--state-dir``):
    paths built by hand log where they say, whatever the environment says."""
    elsewhere = ms_dirs.root / "other-state"
    paths = ms_dirs.paths.replace(state_dir=elsewhere)
    with trio.fail_after(15):
        async with open_client(paths, start=True) as client:
            pid = client.daemon_pid
    try:
        assert "listening on" in (elsewhere / "daemon-1.log").read_text()
        assert not ms_dirs.state.exists() or not any(ms_dirs.state.iterdir())
    finally:
        await stop_daemon(RunningDaemon(paths, pid, client.instance_id))


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "missing --socket"),
        (["--socket", "/x", "--ready-fd", "3"], "missing --lock-fd"),
        (["--socket", "/x", "--ready-fd"], "each option is given once, with a value"),
        (["--socket", "/x", "--socket", "/y"], "each option is given once, with a value"),
        (["--sockets", "/x"], "unknown option --sockets"),
        (["--socket", "/x", "--ready-fd", "three", "--lock-fd", "4"], "bad option value"),
    ],
)
async def test_detached_daemon_refuses_a_bad_command_line_in_one_line(
    argv: list[str], error: str
) -> None:
    with trio.fail_after(20):
        result = await trio.run_process(
            [sys.executable, "-m", "multiserver", *argv],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m multiserver: error: ")
    assert error in lines[0]
