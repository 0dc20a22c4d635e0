"""Platform seams, one small section each: waiting for a child's exit
without ``waitpid(-1)``, spawning on a PTY, the foreground process of a
terminal, giving freed heap memory back, the open-file limit and the fds
open, and a file with no name. Linux and macOS; nothing else in the
package branches on the platform but ``_peer`` (peer credentials), which
every command loads without these."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import resource
import select
import signal
import struct
import sys
import termios
from collections.abc import Callable, Iterator

IS_LINUX = sys.platform.startswith("linux")

# --- waiting on many fds and many child exits at once: epoll / kqueue ---------
#
# The daemon drains every unheld PTY in one task and reaps every child in
# another, each waiting on one pollable set (an epoll fd on Linux, a kqueue
# on macOS) instead of one trio task per fd. Adding or removing a member is
# synchronous, which is what makes a handover need no task switch at all.


class ReadySet:
    """fds to wait on together for readability. Level-triggered: an fd left
    unread stays ready. ``fileno()`` is readable whenever a member is."""

    def __init__(self) -> None:
        if IS_LINUX:
            self._ep = select.epoll()
        else:  # pragma: no cover - macOS
            self._kq = select.kqueue()  # type: ignore[attr-defined,unused-ignore]
        self._members: set[int] = set()

    def fileno(self) -> int:
        return self._ep.fileno() if IS_LINUX else self._kq.fileno()

    def __contains__(self, fd: int) -> bool:
        return fd in self._members

    def add(self, fd: int) -> None:
        if fd in self._members:
            return
        if IS_LINUX:
            self._ep.register(fd, select.EPOLLIN)
        else:  # pragma: no cover - macOS
            ev = select.kevent(fd, filter=select.KQ_FILTER_READ, flags=select.KQ_EV_ADD)  # type: ignore[attr-defined,unused-ignore]
            self._kq.control([ev], 0)
        self._members.add(fd)

    def remove(self, fd: int) -> None:
        """Stop watching ``fd``; call it before closing ``fd``."""
        if fd not in self._members:
            return
        self._members.discard(fd)
        try:
            if IS_LINUX:
                self._ep.unregister(fd)
            else:  # pragma: no cover - macOS
                ev = select.kevent(fd, filter=select.KQ_FILTER_READ, flags=select.KQ_EV_DELETE)  # type: ignore[attr-defined,unused-ignore]
                self._kq.control([ev], 0)
        except OSError:
            pass

    def ready(self) -> list[int]:
        """Members readable now (never waits). A member removed since the
        kernel said so is left out."""
        if IS_LINUX:
            events = [fd for fd, _ in self._ep.poll(0)]
        else:  # pragma: no cover - macOS
            events = [int(e.ident) for e in self._kq.control(None, max(1, len(self._members)), 0)]
        return [fd for fd in events if fd in self._members]

    def close(self) -> None:
        self._members.clear()
        (self._ep if IS_LINUX else self._kq).close()


class ExitSet:
    """Children of ours to reap when they exit: pidfds in an epoll (Linux),
    EVFILT_PROC in a kqueue (macOS). Never ``waitpid(-1)``: only the pids
    added here are reaped, so nobody else's exit status is stolen."""

    def __init__(self) -> None:
        self._fds = ReadySet() if IS_LINUX else None
        if not IS_LINUX:  # pragma: no cover - macOS
            self._kq = select.kqueue()  # type: ignore[attr-defined,unused-ignore]
        self._pidfds: dict[int, int] = {}  # pidfd -> pid (Linux)
        self._pids: set[int] = set()
        self._early: list[int] = []  # exited before kqueue saw them (macOS)

    def fileno(self) -> int:
        return self._fds.fileno() if self._fds is not None else self._kq.fileno()

    def add(self, pid: int) -> None:
        """Watch ``pid`` (a child of this process, not yet reaped)."""
        if self._fds is not None:
            # A zombie still has a pidfd, so this cannot miss an early exit.
            pidfd = os.pidfd_open(pid)
            self._pidfds[pidfd] = pid
            self._fds.add(pidfd)
        else:  # pragma: no cover - macOS
            ev = select.kevent(  # type: ignore[attr-defined,unused-ignore]
                pid,
                filter=select.KQ_FILTER_PROC,  # type: ignore[attr-defined,unused-ignore]
                flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT,  # type: ignore[attr-defined,unused-ignore]
                fflags=select.KQ_NOTE_EXIT,  # type: ignore[attr-defined,unused-ignore]
            )
            try:
                self._kq.control([ev], 0)
            except ProcessLookupError:
                self._early.append(pid)
        self._pids.add(pid)

    def reap_exited(self) -> list[tuple[int, int]]:
        """(pid, exit code) of every watched child that has exited, reaped
        now (never waits). The exit code is negative for a signal."""
        if self._fds is not None:
            pids = []
            for pidfd in self._fds.ready():
                pids.append(self._pidfds.pop(pidfd))
                self._fds.remove(pidfd)
                os.close(pidfd)
        else:  # pragma: no cover - macOS
            pids = [int(e.ident) for e in self._kq.control(None, max(1, len(self._pids)), 0)]
            pids += self._early
            self._early = []
        out = []
        for pid in pids:
            self._pids.discard(pid)
            _, status = os.waitpid(pid, 0)
            out.append((pid, os.waitstatus_to_exitcode(status)))
        return out

    def close(self) -> None:
        for pidfd in self._pidfds:
            os.close(pidfd)
        self._pidfds.clear()
        if self._fds is not None:
            self._fds.close()
        else:  # pragma: no cover - macOS
            self._kq.close()


# --- spawning on a PTY: posix_spawn + setsid (Linux) / forkpty (macOS) --------

# Every catchable signal goes back to its default disposition in the child
# (Python ignores SIGPIPE and SIGXFSZ; an ignored signal survives exec).
_DEFAULT_SIGNALS = frozenset(
    s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)
)


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def get_winsize(fd: int) -> tuple[int, int]:
    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    return rows, cols


def spawn_on_pty(
    executable: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    rows: int,
    cols: int,
    nofile: int | None = None,
) -> tuple[int, int, str]:
    """Start ``argv`` with a new PTY as its controlling terminal, and
    ``nofile`` as its soft RLIMIT_NOFILE (None: this process's).

    Returns (pid, master fd, tty path); the master is non-blocking and
    close-on-exec, owned by the caller. Raises OSError (errno set) when the
    cwd or the executable cannot be used; nothing is left behind then.
    """
    master, slave = os.openpty()
    try:
        set_winsize(master, rows, cols)
        tty = os.ttyname(slave)
        os.set_blocking(master, False)
        if IS_LINUX:
            with _soft_nofile(nofile):
                pid = _posix_spawn(executable, argv, env, cwd, tty)
        else:  # pragma: no cover - macOS
            pid = _fork_exec(executable, argv, env, cwd, tty, nofile)
    except BaseException:
        os.close(master)
        raise
    finally:
        # Kept open until the child has the tty, so it never sees a hangup.
        os.close(slave)
    return pid, master, tty


@contextlib.contextmanager
def _soft_nofile(soft: int | None) -> Iterator[None]:
    """This process's soft RLIMIT_NOFILE lowered to ``soft`` for the block
    (posix_spawn has no action for it: the child inherits what the parent
    has when it is spawned). Nothing in the block may open an fd: the
    spawn's own actions only open fd 0, closing it first."""
    now, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft is None or soft >= now:
        yield
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (now, hard))


def _posix_spawn(executable: str, argv: list[str], env: dict[str, str], cwd: str, tty: str) -> int:
    # posix_spawn has no chdir action here; the daemon's cwd is "/" and nothing
    # in it uses relative paths, and no checkpoint can run between the calls.
    os.chdir(cwd)
    try:
        return os.posix_spawn(
            executable,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, tty, os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1),
                (os.POSIX_SPAWN_DUP2, 0, 2),
            ],
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
            setsigmask=(),
        )
    finally:
        os.chdir("/")


def _fork_exec(
    executable: str, argv: list[str], env: dict[str, str], cwd: str, tty: str, nofile: int | None
) -> int:  # pragma: no cover - macOS
    # Report an exec failure through a close-on-exec pipe, as posix_spawn does.
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rd)
            os.setsid()
            fd = os.open(tty, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(fd, target)
            if fd > 2:
                os.close(fd)
            for sig in _DEFAULT_SIGNALS:
                try:
                    signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            if nofile is not None:
                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
            os.chdir(cwd)
            os.execve(executable, argv, env)
        except OSError as exc:
            os.write(wr, struct.pack("i", exc.errno or errno.EIO))
        finally:
            os._exit(127)
    os.close(wr)
    try:
        data = os.read(rd, 4)
    finally:
        os.close(rd)
    if data:
        os.waitpid(pid, 0)
        code = struct.unpack("i", data)[0]
        raise OSError(code, os.strerror(code))
    return pid


# --- the foreground process of a terminal --------------------------------------


def foreground(master: int) -> tuple[int | None, str | None, list[str] | None]:
    """(pid, cwd, argv) of the terminal's foreground process group leader,
    where the OS tells them; None for what it does not."""
    try:
        pgid = os.tcgetpgrp(master)
    except OSError:
        return None, None, None
    if not IS_LINUX:  # pragma: no cover - macOS exposes no cwd without libproc
        return pgid, None, None
    cwd: str | None
    argv: list[str] | None
    try:
        # As Python decodes any OS string (surrogateescape): a path that is
        # not UTF-8 is kept byte for byte, and the codec carries it.
        cwd = os.fsdecode(os.readlink(f"/proc/{pgid}/cwd".encode()))
    except OSError:
        cwd = None
    try:
        with open(f"/proc/{pgid}/cmdline", "rb") as f:
            raw = f.read()
        argv = [os.fsdecode(a) for a in raw.split(b"\0")[:-1]] or None
    except OSError:
        argv = None
    return pgid, cwd, argv


# --- giving freed heap memory back: malloc_trim (glibc) / nothing -------------
#
# glibc keeps freed memory in its arenas, resident until it is trimmed: after
# the daemon's start-up 0.1 MiB, or 1 MiB when its modules were compiled from
# source. musl and macOS have no malloc_trim; there this does nothing.


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not IS_LINUX:
        return None
    import ctypes  # trio has imported it already: costs nothing more

    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


def release_free_memory() -> None:
    """Hand the heap's free pages back to the OS, where libc can."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


# --- open files: the soft RLIMIT_NOFILE raised, the fds counted -----------------

# macOS refuses a soft limit past OPEN_MAX, whatever the hard limit says.
_MACOS_OPEN_MAX = 10240


def nofile_limit() -> int:
    """This process's soft RLIMIT_NOFILE now (``prlimit`` may change it)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_nofile_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit, or as
    high as this OS allows. Returns (the soft limit found, the soft limit
    now). Never raises: a limit that cannot be raised stays."""
    found, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for soft in [hard] if IS_LINUX else [hard, _MACOS_OPEN_MAX]:
        if soft == resource.RLIM_INFINITY or soft <= found:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            break
        except (ValueError, OSError):
            continue
    return found, nofile_limit()


def open_fd_count(pid: int | None = None) -> int | None:
    """How many fds this process (or ``pid``, on Linux, a process of this
    user) has open; None where the OS does not tell."""
    if pid is None:
        where = "/proc/self/fd" if IS_LINUX else "/dev/fd"
        return len(os.listdir(where)) - 1  # less the listing's own
    try:
        return len(os.listdir(f"/proc/{pid}/fd")) if IS_LINUX else None
    except OSError:
        return None


# --- a file with no name, for the upgrade's snapshot: memfd (Linux) / unlinked --


def anonymous_file(directory: str) -> int:
    """A new empty read-write file that no path names (close-on-exec; the
    caller owns it): a memfd on Linux, an unlinked file in the private
    ``directory`` elsewhere. Raises OSError."""
    if IS_LINUX:
        return os.memfd_create("multiserver-snapshot", os.MFD_CLOEXEC)
    import tempfile  # pragma: no cover - macOS

    fd, path = tempfile.mkstemp(dir=directory)  # pragma: no cover - macOS
    os.unlink(path)  # pragma: no cover - macOS
    return fd  # pragma: no cover - macOS


# --- a holder's output feed: a pipe as large as the OS lets it be ----------------
#
# Linux grows a pipe to FEED_SIZE (F_SETPIPE_SZ; an unprivileged process may
# ask up to /proc/sys/fs/pipe-max-size, 1 MiB by default); macOS sizes its
# pipes itself (16 KiB, up to 64 KiB as they fill). Either says how many
# bytes wait in it (FIONREAD), from the write end too.

FEED_SIZE = 1024 * 1024
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", None)
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", None)


def feed_pipe(size: int = FEED_SIZE) -> tuple[int, int, int]:
    """(read end, write end, how many bytes it holds): a close-on-exec
    pipe, its write end non-blocking. Raises OSError (EMFILE)."""
    r, w = os.pipe()
    try:
        os.set_blocking(w, False)
        capacity = 16 * 1024
        if _F_SETPIPE_SZ is not None and _F_GETPIPE_SZ is not None:
            for want in (size, 256 * 1024, 64 * 1024):
                try:
                    fcntl.fcntl(w, _F_SETPIPE_SZ, want)
                    break
                except OSError:  # over pipe-max-size, or the user's pipe budget
                    continue
            capacity = fcntl.fcntl(w, _F_GETPIPE_SZ)
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    return r, w, capacity


def unread_bytes(fd: int) -> int:
    """How many bytes wait in the pipe or socket ``fd`` (FIONREAD)."""
    got = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", got)[0])
