"""Platform seams, one small section each: peer credentials, waiting for a
child's exit without ``waitpid(-1)``, spawning on a PTY, and the foreground
process of a terminal. Linux and macOS; nothing else in the package branches
on the platform."""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import socket
import struct
import sys
import termios

import trio

IS_LINUX = sys.platform.startswith("linux")

# --- peer credentials: SO_PEERCRED (Linux) / LOCAL_PEERCRED (macOS) -------------

_SOL_LOCAL = 0
_LOCAL_PEERCRED = 1


def peer_uid(fd: int) -> int:
    """The effective uid of the peer of the connected Unix socket ``fd``."""
    sock = socket.socket(fileno=fd)
    try:
        if IS_LINUX:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", raw)
            return int(uid)
        # struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]; }
        raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, 76)
        _version, uid = struct.unpack_from("Ii", raw)
        return int(uid)
    finally:
        sock.detach()


# --- waiting for a child's exit: pidfd (Linux) / kqueue (macOS) ----------------


class ChildWatch:
    """Waits for one child of ours to exit and reaps exactly that pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd: int | None = None
        if IS_LINUX:
            # A zombie still has a pidfd, so this cannot miss an early exit.
            self._pidfd = os.pidfd_open(pid)

    async def wait(self) -> int:
        """Wait until the child exits, reap it, return its exit code (negative
        signal number if a signal killed it).

        Cancellation: nothing happened; the child is not reaped.
        """
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
        else:
            await _wait_kqueue(self.pid)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            trio.lowlevel.notify_closing(fd)
            os.close(fd)


async def _wait_kqueue(pid: int) -> None:  # pragma: no cover - macOS only
    kqueue = trio.lowlevel.current_kqueue()  # type: ignore[attr-defined,unused-ignore]
    event = select.kevent(  # type: ignore[attr-defined,unused-ignore]
        pid,
        filter=select.KQ_FILTER_PROC,  # type: ignore[attr-defined,unused-ignore]
        flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT,  # type: ignore[attr-defined,unused-ignore]
        fflags=select.KQ_NOTE_EXIT,  # type: ignore[attr-defined,unused-ignore]
    )
    try:
        kqueue.control([event], 0)
    except ProcessLookupError:
        return  # already exited; waitpid will not block

    def abort(_: object) -> trio.lowlevel.Abort:
        delete = select.kevent(pid, filter=select.KQ_FILTER_PROC, flags=select.KQ_EV_DELETE)  # type: ignore[attr-defined,unused-ignore]
        try:
            kqueue.control([delete], 0)
        except OSError:
            pass
        return trio.lowlevel.Abort.SUCCEEDED

    await trio.lowlevel.wait_kevent(pid, select.KQ_FILTER_PROC, abort)  # type: ignore[attr-defined,unused-ignore]


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
    executable: str, argv: list[str], env: dict[str, str], cwd: str, rows: int, cols: int
) -> tuple[int, int, str]:
    """Start ``argv`` with a new PTY as its controlling terminal.

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
            pid = _posix_spawn(executable, argv, env, cwd, tty)
        else:  # pragma: no cover - macOS
            pid = _fork_exec(executable, argv, env, cwd, tty)
    except BaseException:
        os.close(master)
        raise
    finally:
        # Kept open until the child has the tty, so it never sees a hangup.
        os.close(slave)
    return pid, master, tty


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
    executable: str, argv: list[str], env: dict[str, str], cwd: str, tty: str
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
        # Bytes, decoded with replacement: a path that is not UTF-8 must not
        # make the reply unencodable.
        cwd = os.readlink(f"/proc/{pgid}/cwd".encode()).decode(errors="replace")
    except OSError:
        cwd = None
    try:
        with open(f"/proc/{pgid}/cmdline", "rb") as f:
            raw = f.read()
        argv = [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] or None
    except OSError:
        argv = None
    return pgid, cwd, argv
