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

import os
import socket
from pathlib import Path

import trio

from multiserver._errors import DaemonAlreadyRunning, DaemonNotRunning
from multiserver.client._spawn import (
    LOCK_POLL,
    check_connectable,
    connect_error,
    ready_pid,
    spawn_daemon,
)
from multiserver.settings._config import DaemonConfig, config_from_env
from multiserver.system._paths import DaemonPaths, LockBusy, try_lock
from multiserver.system._peer import verify_peer
from multiserver.system._stale import remove_stale_socket


async def connect(path: Path) -> trio.socket.SocketType:
    """Connect to the daemon at ``path``; never starts one.

    Raises DaemonNotRunning if nothing listens there, UnsafeDirectory if the
    socket or its dir fails the ownership checks (it is then never connected
    to), UntrustedPeer if the listener runs as another uid (nothing is sent).

    Cancellation: nothing is left open.
    """
    check_connectable(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.connect(str(path))
        verify_peer(sock.fileno(), path)
    except OSError as exc:
        sock.close()
        raise connect_error(path, exc) from exc
    except BaseException:
        sock.close()
        raise
    return sock


async def connect_or_start(
    paths: DaemonPaths, config: DaemonConfig | None = None
) -> trio.socket.SocketType:
    """Connect to daemon ``paths``, starting it first if none runs (the
    steps of ``_spawn``, driven here with trio).

    A daemon started without ``config`` takes its settings from the
    environment (``config_from_env``).

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
            await trio.sleep(LOCK_POLL)
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
    caller); returns its pid once it listens. Raises as ``_spawn.ready_pid``.

    Cancellation: the daemon may still come up; it exits by itself when idle.
    """
    leader, rd = spawn_daemon(paths, lock_fd, config)
    try:
        line = await _read_line(rd)
    finally:
        os.close(rd)
    return ready_pid(line, leader, paths)


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
