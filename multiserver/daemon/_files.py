"""The daemon's own files, its lock and its socket: taken at start, kept in
place while it runs, and removed at exit only while they are still its own.

A person, a script or a tmp cleaner may delete either file under a running
daemon. Without the lock file, the next starter takes a fresh lock and may
start a second daemon; without the socket file, no client can reach the
daemon, and every client waits on the lock it holds. So:

- At start (``DaemonFiles.bind``), holding the lock, the daemon refuses to
  start if a live daemon answers on its socket path, removes a stale socket
  (``remove_stale_socket``), binds, and records the socket's inode. It
  writes how it was started in the lock file (``_origin.py``).
- While it runs, ``DaemonFiles.watch`` looks once a second. A lock path that
  no longer names its locked file is created and locked again (if another
  process holds the new file, a warning, and another try next time). A
  missing socket path gets a new listener, served in place of the old one,
  which nobody can reach any more (``SwappableListener``). A path that names
  someone else's socket (or any other file) is left alone, with a warning.
- At exit (``DaemonFiles.close``) it unlinks the socket path only if it
  still names the socket it bound, and the lock path only if it still names
  the file it holds locked.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from typing import Any

import attrs
import trio

from multiserver._errors import DaemonAlreadyRunning, UnsafeDirectory
from multiserver.daemon._origin import DaemonOrigin, write_origin
from multiserver.daemon._server import bind_listener
from multiserver.system._paths import DaemonPaths, LockBusy, try_lock
from multiserver.system._stale import remove_stale_socket, unlink_if_same
from multiserver.system._trust import ensure_private_dir

log = logging.getLogger("multiserver.daemon")

# How often the watch looks at the two paths. See ``DaemonFiles.watch``.
WATCH_INTERVAL = 1.0

# A bind that finds the path taken again right after a stale socket was
# removed (someone else bound there meanwhile) asks again this many times.
_BIND_TRIES = 3


class SwappableListener:
    """The daemon's listening socket, which the watch may replace while
    ``Daemon.serve`` waits in ``accept`` on it (a ``_server.Listener``).
    It owns the socket it listens on.
    """

    def __init__(self, listener: trio.socket.SocketType) -> None:
        self._listener = listener
        self._waiting = trio.CancelScope()

    async def accept(self) -> tuple[trio.socket.SocketType, Any]:
        """Accept on the current socket; a ``replace`` meanwhile moves the
        wait to the new one.

        Cancellation: nothing was accepted.
        """
        while True:
            listener = self._listener
            with trio.CancelScope() as self._waiting:
                try:
                    return await listener.accept()
                except trio.ClosedResourceError:
                    if listener is self._listener:
                        raise
            # Replaced while we waited: wait on the new socket.

    def replace(self, new: trio.socket.SocketType) -> None:
        """Listen on ``new`` (taking it over) and close the old socket (a
        connection still in its backlog is dropped)."""
        old, self._listener = self._listener, new
        self._waiting.cancel()
        old.close()

    def fileno(self) -> int:
        return self._listener.fileno()

    def close(self) -> None:
        self._listener.close()


@attrs.define(eq=False)
class DaemonFiles:
    """The lock fd and the listener of a running daemon (it owns both), and
    the inodes of the two files as it made them. Build it with ``bind``."""

    _paths: DaemonPaths
    _lock_fd: int
    _lock_stat: os.stat_result
    listener: SwappableListener
    _socket_stat: os.stat_result
    _origin: DaemonOrigin | None = None  # written in the lock file, again if it is made again
    _trouble: set[str] = attrs.Factory(set)  # what was warned about, until it clears

    @classmethod
    def bind(
        cls, paths: DaemonPaths, lock_fd: int, origin: DaemonOrigin | None = None
    ) -> DaemonFiles:
        """Bind the daemon's socket, holding the lock ``lock_fd``, and write
        ``origin`` in the lock file.

        Raises DaemonAlreadyRunning (one line) if a live daemon answers on
        the socket path; what ``remove_stale_socket`` raises; OSError if
        the bind fails. Takes ``lock_fd`` over only when it returns; on an
        error the caller still owns it.
        """
        sock = paths.socket
        for _ in range(_BIND_TRIES):
            found = remove_stale_socket(sock)
            if found == "live":
                raise DaemonAlreadyRunning(f"a daemon already answers on {sock}; not starting")
            try:
                listener = bind_listener(str(sock))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    continue
                raise
            files = cls(
                paths,
                lock_fd,
                os.fstat(lock_fd),
                SwappableListener(listener),
                os.lstat(sock),
                origin,
            )
            files._write_origin()
            return files
        raise DaemonAlreadyRunning(f"{sock} is taken again after each removal; not starting")

    @classmethod
    def adopt(
        cls,
        paths: DaemonPaths,
        lock_fd: int,
        listener_fd: int,
        socket_stat: os.stat_result,
        origin: DaemonOrigin,
    ) -> DaemonFiles:
        """The lock and the listener of the daemon before an upgrade (the
        fds crossed the exec; taken over), with ``origin`` written anew."""
        for fd in (lock_fd, listener_fd):
            os.set_inheritable(fd, False)
        raw = socket.socket(fileno=listener_fd)
        listener = SwappableListener(trio.socket.from_stdlib_socket(raw))
        files = cls(paths, lock_fd, os.fstat(lock_fd), listener, socket_stat, origin)
        files._write_origin()
        return files

    @property
    def paths(self) -> DaemonPaths:
        return self._paths

    @property
    def lock_fd(self) -> int:
        """The lock's fd (still owned here)."""
        return self._lock_fd

    @property
    def socket_stat(self) -> os.stat_result:
        """The socket as it was bound (its inode: the watch's reference)."""
        return self._socket_stat

    @property
    def origin(self) -> DaemonOrigin | None:
        return self._origin

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Put lock and socket back whenever they are gone (``check``), once
        a second, until cancelled.

        Polling is fine here: each look is two ``lstat`` calls, a few
        microseconds a second; a deleted file is rare, and a second is well
        within what a client waits for the daemon (it retries on the lock
        meanwhile). inotify or kqueue would need a watch fd per dir and a
        Linux and a macOS path, and would still have to handle the dir
        itself going away.

        Cancellation: nothing is left half done (each ``check`` is
        synchronous).
        """
        task_status.started()
        while True:
            await trio.sleep(WATCH_INTERVAL)
            self.check()

    def check(self) -> None:
        """One look: re-take a lost lock, re-bind a lost socket."""
        self._keep_lock()
        self._keep_socket()

    def _keep_lock(self) -> None:
        path = self._paths.lock
        if _names(path, self._lock_stat):
            self._cleared("lock", "lock file %s is back", path)
            return
        try:
            ensure_private_dir(self._paths.dir)
            fd = try_lock(path)
        except LockBusy:
            self._warn("lock", "lock file %s was replaced and another process holds it", path)
            return
        except (OSError, UnsafeDirectory) as exc:
            self._warn("lock", "lock file %s is gone and cannot be made again: %s", path, exc)
            return
        os.close(self._lock_fd)  # a file the path no longer names: no one else's lock
        self._lock_fd, self._lock_stat = fd, os.fstat(fd)
        self._write_origin()
        self._trouble.discard("lock")
        log.warning("lock file %s was gone: made and locked again", path)

    def _keep_socket(self) -> None:
        path = self._paths.socket
        try:
            here: os.stat_result | None = os.lstat(path)
        except FileNotFoundError:
            here = None
        if here is not None:
            if os.path.samestat(here, self._socket_stat):
                self._cleared("socket", "socket %s is ours again", path)
            else:
                self._warn("socket", "%s names another file now; leaving it", path)
            return
        try:
            ensure_private_dir(self._paths.dir)
            new = bind_listener(str(path))
        except (OSError, UnsafeDirectory) as exc:
            self._warn("socket", "socket %s is gone and cannot be bound again: %s", path, exc)
            return
        self._socket_stat = os.lstat(path)
        self.listener.replace(new)
        self._trouble.discard("socket")
        log.warning("socket %s was gone: listening there again", path)

    def _write_origin(self) -> None:
        """Best effort: without it, ``multiserver daemon`` cannot say how
        this daemon was started; nothing else reads it."""
        if self._origin is None:
            return
        try:
            write_origin(self._lock_fd, self._origin)
        except OSError as exc:
            log.warning("cannot write to lock file %s: %s", self._paths.lock, exc)

    def _warn(self, what: str, message: str, *args: object) -> None:
        """Once per trouble, not once a second."""
        if what not in self._trouble:
            self._trouble.add(what)
            log.warning(message + "; trying again every %g s", *args, WATCH_INTERVAL)

    def _cleared(self, what: str, message: str, *args: object) -> None:
        if what in self._trouble:
            self._trouble.discard(what)
            log.info(message, *args)

    def close(self) -> None:
        """Unlink socket and lock if they are still ours, then close the
        listener and release the lock. (In that order: while the two are
        open their inodes cannot be reused by files of another daemon.)"""
        unlink_if_same(self._paths.socket, self._socket_stat)
        unlink_if_same(self._paths.lock, self._lock_stat)
        self.listener.close()
        os.close(self._lock_fd)


def _names(path: os.PathLike[str], own: os.stat_result) -> bool:
    """True if ``path`` still names the file ``own`` describes."""
    try:
        return os.path.samestat(os.lstat(path), own)
    except FileNotFoundError:
        return False
