"""Starting a daemon and connecting to it, without an event loop.

The steps of connect-or-start are here once; ``_start`` drives them with
trio (the library), ``connect_or_start_blocking`` with plain blocking calls
and a deadline (the command line's fast path, which never imports trio):

    connect ── refused/no file ──▶ prepare dirs ─▶ take the lock (busy: poll)
       ▲                            ─▶ a live daemon answers? connect to it
       └── ready ◀── read the ready pipe ◀── spawn (it inherits the lock)
"""

from __future__ import annotations

import errno
import os
import select
import socket
import sys
import time
from pathlib import Path

from multiserver._errors import (
    DaemonAlreadyRunning,
    DaemonNotRunning,
    MultiserverError,
    UnsafeDirectory,
)
from multiserver.settings._settings import env_settings, installed_daemon, settings_args
from multiserver.system._paths import DaemonPaths, LockBusy, try_lock
from multiserver.system._peer import verify_peer
from multiserver.system._stale import remove_stale_socket
from multiserver.system._trust import check_socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess

    from multiserver.settings._config import DaemonConfig

# While another process holds the lock (a daemon starting or exiting), poll
# the socket at this interval. The caller's deadline bounds the wait.
LOCK_POLL = 0.005


class TimedOut(MultiserverError):
    """A blocking call ran past the caller's deadline."""


def check_connectable(path: Path) -> None:
    """Before connecting: DaemonNotRunning if there is no socket,
    UnsafeDirectory if it or its dir fails the ownership checks (it is then
    never connected to)."""
    try:
        check_socket(path)
    except UnsafeDirectory as exc:
        if not os.path.lexists(path) and path.parent.is_dir():
            raise DaemonNotRunning(f"no daemon at {path}") from exc
        if isinstance(exc.__cause__, FileNotFoundError):
            raise DaemonNotRunning(f"no daemon at {path}") from exc
        raise


def connect_error(path: Path, exc: OSError) -> MultiserverError:
    """A failed connect, as the project's own error."""
    if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
        return DaemonNotRunning(f"no daemon at {path}")
    return MultiserverError(f"cannot connect to {path}: {exc.strerror}")


def remaining(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (time.monotonic); TimedOut past it."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimedOut("the daemon did not answer in time")
    return left


def connect_blocking(path: Path, deadline: float | None = None) -> socket.socket:
    """A blocking connected socket to the daemon at ``path``; never starts
    one. Raises as ``check_connectable`` and ``connect_error`` say,
    UntrustedPeer (nothing sent) if the listener runs as another uid, or
    TimedOut."""
    check_connectable(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(remaining(deadline))
        sock.connect(str(path))
        verify_peer(sock.fileno(), path)
    except TimeoutError:
        sock.close()
        raise TimedOut(f"{path}: the daemon did not accept in time") from None
    except OSError as exc:
        sock.close()
        raise connect_error(path, exc) from exc
    except BaseException:
        sock.close()
        raise
    return sock


def daemon_argv(
    paths: DaemonPaths, ready_fd: int, lock_fd: int, config: DaemonConfig | None
) -> list[str]:
    """The daemon's command line (``installed_daemon``)."""
    return installed_daemon(
        "--socket",
        str(paths.socket),
        "--ready-fd",
        str(ready_fd),
        "--lock-fd",
        str(lock_fd),
        "--state-dir",
        str(paths.state_dir),
        *_config_args(config),
    )


def _config_args(config: DaemonConfig | None) -> list[str]:
    """The daemon's settings: ``config``'s, or (None) the environment's."""
    if config is None:
        return settings_args(env_settings())
    from multiserver.settings._config import config_args

    return config_args(config)


def spawn_daemon(
    paths: DaemonPaths, lock_fd: int, config: DaemonConfig | None
) -> tuple[subprocess.Popen[bytes], int]:
    """Spawn a detached daemon that inherits ``lock_fd`` (locked by the
    caller); returns (the session leader it is spawned as, the read end of
    its ready pipe, the caller's to close). Read one line from it
    (``ready_pid``)."""
    rd, wr = os.pipe()
    try:
        proc = spawn_detached(daemon_argv(paths, wr, lock_fd, config), (wr, lock_fd))
    except BaseException:
        os.close(rd)
        raise
    finally:
        os.close(wr)
    return proc, rd


def spawn_detached(
    argv: list[str], pass_fds: tuple[int, ...] = (), stderr: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (this interpreter's) detached: in ``/``, in a session of
    its own, with nothing of this process but ``pass_fds`` (and ``stderr``,
    else /dev/null): it never holds the caller's directory, and a relative
    entry of ``$PYTHONPATH`` cannot name a folder there. ``subprocess``
    forks and execs in C (safe in a process with threads) and, unlike
    ``os.posix_spawn``, can change directory. The caller reaps the
    returned leader (``wait``)."""
    import subprocess  # only when something starts

    return subprocess.Popen(
        argv,
        executable=sys.executable,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if stderr is None else stderr,
        pass_fds=pass_fds,
        cwd="/",
        start_new_session=True,
    )


def ready_pid(line: str, leader: subprocess.Popen[bytes], paths: DaemonPaths) -> int:
    """The daemon's pid from its ready line. The session leader it was
    spawned as has exited by then (or died): reap exactly it. Raises
    DaemonAlreadyRunning if it found a live daemon on the socket path (its
    lock file was deleted) and did not start, MultiserverError with the
    daemon's own one-line reason if it failed."""
    leader.wait()
    if line.startswith("R"):
        return int(line[1:])
    if line.startswith("L"):
        raise DaemonAlreadyRunning(line[1:])
    reason = line[1:] if line.startswith("E") else "exited before it was ready"
    raise MultiserverError(f"daemon failed to start: {reason} (log: {paths.log})")


def read_line(fd: int, deadline: float | None) -> str:
    """One line from the ready pipe, blocking until ``deadline``."""
    data = b""
    while not data.endswith(b"\n"):
        left = remaining(deadline)
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue  # ``remaining`` raises once past the deadline
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def connect_or_start_blocking(
    paths: DaemonPaths, config: DaemonConfig | None = None, deadline: float | None = None
) -> socket.socket:
    """``_start.connect_or_start`` with blocking calls, until ``deadline``
    (time.monotonic; TimedOut past it).

    A daemon this call started keeps running if the deadline passes (it
    exits by itself when idle); nothing else is left behind.
    """
    while True:
        try:
            return connect_blocking(paths.socket, deadline)
        except DaemonNotRunning:
            pass
        paths.prepare()
        try:
            lock_fd = try_lock(paths.lock)
        except LockBusy:
            time.sleep(min(LOCK_POLL, remaining(deadline) or LOCK_POLL))
            continue
        try:
            if remove_stale_socket(paths.socket) != "live":
                leader, rd = spawn_daemon(paths, lock_fd, config)
                try:
                    line = read_line(rd, deadline)
                finally:
                    os.close(rd)
                ready_pid(line, leader, paths)
        except DaemonAlreadyRunning:
            pass  # it answers on the socket: connect to it
        finally:
            os.close(lock_fd)
