"""Connecting to a daemon, and starting one on demand.

``connect`` never starts a daemon (restore and the sweep use it).
``connect_or_start`` starts one under the lock, so two clients racing start
exactly one: whoever takes the lock unlinks the stale socket and spawns the
daemon, which inherits the lock and holds it for life; the others wait for the
socket to accept. A socket that answers is never unlinked: when its daemon's
lock file was deleted, the lock is free but the daemon lives; the client
connects to it, and a daemon spawned in a race finds it and does not start.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path

import trio

from multiserver._config import DaemonConfig, config_args, config_from_env
from multiserver._errors import (
    DaemonAlreadyRunning,
    DaemonNotRunning,
    MultiserverError,
    UnsafeDirectory,
)
from multiserver._paths import DaemonPaths, LockBusy, check_socket, try_lock
from multiserver._stale import remove_stale_socket

# While another process holds the lock (a daemon starting or exiting), poll
# the socket at this interval. The caller's deadline bounds the wait.
_LOCK_POLL = 0.005


async def connect(path: Path) -> trio.socket.SocketType:
    """Connect to the daemon at ``path``; never starts one.

    Raises DaemonNotRunning if nothing listens there, UnsafeDirectory if the
    socket or its dir fails the ownership checks (it is then never connected to).

    Cancellation: nothing is left open.
    """
    try:
        check_socket(path)
    except UnsafeDirectory as exc:
        if not os.path.lexists(path) and path.parent.is_dir():
            raise DaemonNotRunning(f"no daemon at {path}") from exc
        if isinstance(exc.__cause__, FileNotFoundError):
            raise DaemonNotRunning(f"no daemon at {path}") from exc
        raise
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.connect(str(path))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            raise DaemonNotRunning(f"no daemon at {path}") from exc
        raise MultiserverError(f"cannot connect to {path}: {exc.strerror}") from exc
    except BaseException:
        sock.close()
        raise
    return sock


async def connect_or_start(
    paths: DaemonPaths, config: DaemonConfig | None = None
) -> trio.socket.SocketType:
    """Connect to daemon ``paths``, starting it first if none runs.

    A daemon started without ``config`` takes its settings from
    MULTISERVER_BUFFER_LIMIT / MULTISERVER_IDLE_EXIT (``config_from_env``).

    Takes no timeout: wrap it in ``trio.move_on_after``/``fail_after``.

    Cancellation: a daemon this call started keeps running (it exits by
    itself when idle); nothing else is left behind.
    """
    while True:
        try:
            return await connect(paths.socket)
        except DaemonNotRunning:
            pass
        paths.prepare()
        try:
            lock_fd = try_lock(paths.lock)
        except LockBusy:
            await trio.sleep(_LOCK_POLL)
            continue
        try:
            if remove_stale_socket(paths.socket) != "live":
                await start_daemon(paths, lock_fd, config or config_from_env())
        except DaemonAlreadyRunning:
            pass  # it answers on the socket: connect to it
        finally:
            os.close(lock_fd)


async def start_daemon(paths: DaemonPaths, lock_fd: int, config: DaemonConfig) -> int:
    """Spawn a detached daemon that inherits ``lock_fd`` (locked by the
    caller); returns its pid once it listens.

    Raises DaemonAlreadyRunning if it found a live daemon on the socket path
    (its lock file was deleted) and did not start, MultiserverError with the
    daemon's own one-line reason if it failed.

    Cancellation: the daemon may still come up; it exits by itself when idle.
    """
    rd, wr = os.pipe()
    try:
        argv = [
            sys.executable,
            "-m",
            "multiserver",
            "--socket",
            str(paths.socket),
            "--ready-fd",
            str(wr),
            "--lock-fd",
            str(lock_fd),
            "--state-dir",
            str(paths.state_dir),
            *config_args(config),
        ]
        env = dict(os.environ)
        os.set_inheritable(wr, True)
        os.set_inheritable(lock_fd, True)
        try:
            pid = os.posix_spawn(
                sys.executable,
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0),
                    (os.POSIX_SPAWN_DUP2, 0, 1),
                    (os.POSIX_SPAWN_DUP2, 0, 2),
                ],
                setsid=True,
            )
        finally:
            os.set_inheritable(lock_fd, False)
            os.close(wr)
            wr = -1
        line = await _read_line(rd)
        # The session leader forked and exited before anything was written
        # (or it died): reap exactly it, without blocking.
        os.waitpid(pid, 0)
    finally:
        os.close(rd)
        if wr >= 0:
            os.close(wr)
    if line.startswith("R"):
        return int(line[1:])
    if line.startswith("L"):
        raise DaemonAlreadyRunning(line[1:])
    reason = line[1:] if line.startswith("E") else "exited before it was ready"
    raise MultiserverError(f"daemon failed to start: {reason} (log: {paths.log})")


async def _read_line(fd: int) -> str:
    os.set_blocking(fd, False)
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
            continue
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()
