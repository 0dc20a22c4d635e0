"""The daemon's children: each on its own PTY, drained while nobody holds it,
reaped by pid (never ``waitpid(-1)``), kept until its status is collected.

Ownership: a ``Child`` owns its master fd for its whole life in the table; a
client that holds the child has its own copy (passed with SCM_RIGHTS). Only
one drain task per child runs at a time, and only while the child is unheld.

Handover without loss or duplication: the drain reads first and awaits
readability only after ``BlockingIOError``, and appends what it read before its
next checkpoint, so cancelling it can never lose a byte that was read. A claim
cancels the drain, waits for it to finish, then takes the buffer; the bytes
still in the kernel are read by the client from its fd.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import trio

from multiserver import _platform
from multiserver._buffer import OutputBuffer
from multiserver._messages import ChildInfo, ChildTaken, Message

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
DEFAULT_TERM = "xterm-256color"
OWN_ENV_PREFIX = "MULTISERVER_"
# After SIGHUP, how long a lingering or force-stopped child gets before SIGKILL.
KILL_GRACE = 5.0
READ_SIZE = 65536


class Holder(Protocol):
    """A connection that can hold children (see ``_server.ClientConnection``)."""

    def notify(self, msg: Message) -> None: ...


class LaunchError(Exception):
    def __init__(self, err: int, message: str) -> None:
        super().__init__(message)
        self.errno = err
        self.message = message


def child_env(env: dict[str, str]) -> dict[str, str]:
    """The environment a child gets: the client's, less the daemon's own
    variables, with TERM set."""
    out = {k: v for k, v in env.items() if not k.startswith(OWN_ENV_PREFIX)}
    if not out.get("TERM"):
        out["TERM"] = DEFAULT_TERM
    return out


def resolve_executable(argv0: str, env: dict[str, str], cwd: str) -> str:
    """Find argv[0] on the child's PATH (not the daemon's)."""
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else os.path.join(cwd, argv0)
        if not os.path.exists(path):
            raise LaunchError(errno.ENOENT, f"command not found: {argv0}")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise LaunchError(errno.EACCES, f"permission denied: {argv0}")
        return path
    found = shutil.which(argv0, path=env.get("PATH", os.defpath))
    if found is None:
        raise LaunchError(errno.ENOENT, f"command not found: {argv0}")
    return found if os.path.isabs(found) else os.path.join(cwd, found)


class Child:
    """One child process on a PTY. Stateful; created only by ``ChildTable``."""

    def __init__(
        self,
        *,
        id: int,
        pid: int,
        master: int,
        tty: str,
        name: str,
        argv: list[str],
        cwd: str,
        rows: int,
        cols: int,
        linger: float | None,
        buffer_limit: int,
    ) -> None:
        self.id = id
        self.pid = pid
        self.master: int | None = master
        self.tty = tty
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.rows = rows
        self.cols = cols
        self.linger = linger
        self.started_at = time.time()
        self.exited_at: float | None = None
        self.exit_code: int | None = None
        self.exited = trio.Event()
        self.eof = False  # the drain read to the end (slave side closed)
        self.holder: Holder | None = None
        self.buffer = OutputBuffer(buffer_limit)
        self.watch = _platform.ChildWatch(pid)
        self._drain_scope: trio.CancelScope | None = None
        self._drain_done: trio.Event | None = None
        self._linger_scope: trio.CancelScope | None = None

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def info(self, *, foreground: bool = False) -> ChildInfo:
        fg_pid = fg_cwd = fg_argv = None
        if foreground and self.running and self.master is not None:
            fg_pid, fg_cwd, fg_argv = _platform.foreground(self.master)
        return ChildInfo(
            id=self.id,
            pid=self.pid,
            name=self.name,
            argv=self.argv,
            cwd=self.cwd,
            tty=self.tty,
            rows=self.rows,
            cols=self.cols,
            state="running" if self.running else "exited",
            exit_code=self.exit_code,
            held=self.holder is not None,
            buffered_bytes=len(self.buffer),
            dropped_bytes=self.buffer.dropped,
            started_at=self.started_at,
            exited_at=self.exited_at,
            linger=self.linger,
            fg_pid=fg_pid,
            fg_cwd=fg_cwd,
            fg_argv=fg_argv,
        )

    # --- draining -----------------------------------------------------------

    def read_available(self) -> None:
        """Read what the kernel holds now, without waiting (for an exited child)."""
        if self.master is None or self.eof:
            return
        while True:
            try:
                data = os.read(self.master, READ_SIZE)
            except BlockingIOError:
                return
            except OSError:
                self.eof = True
                return
            if not data:
                self.eof = True
                return
            self.buffer.append(data)

    async def _drain(self, task_status: trio.TaskStatus[None]) -> None:
        assert self.master is not None
        fd = self.master
        scope = trio.CancelScope()
        done = trio.Event()
        self._drain_scope, self._drain_done = scope, done
        task_status.started()
        try:
            with scope:
                # Another process may have made the shared file blocking.
                os.set_blocking(fd, False)
                while not self.eof:
                    try:
                        data = os.read(fd, READ_SIZE)
                    except BlockingIOError:
                        await trio.lowlevel.wait_readable(fd)
                        continue
                    except OSError:  # EIO: the slave side is closed
                        self.eof = True
                        break
                    if not data:
                        self.eof = True
                        break
                    # No checkpoint between the read and this append.
                    self.buffer.append(data)
                    await trio.lowlevel.checkpoint()
        finally:
            done.set()

    def cancel_drain(self) -> None:
        """Tell the drain to stop; ``stop_drain`` waits for it. Cancelling
        many first and waiting after costs one scheduler pass, not one each."""
        if self._drain_scope is not None:
            self._drain_scope.cancel()

    async def stop_drain(self) -> None:
        """Stop draining and wait until the drain task has finished.

        Cancellation: shielded; always completes.
        """
        scope, done = self._drain_scope, self._drain_done
        self._drain_scope = self._drain_done = None
        if scope is None or done is None:
            return
        scope.cancel()
        if not done.is_set():
            with trio.CancelScope(shield=True):
                await done.wait()

    def close_master(self) -> None:
        if self.master is not None:
            fd, self.master = self.master, None
            trio.lowlevel.notify_closing(fd)
            os.close(fd)


class ChildTable:
    """Every child of the daemon, by id. Ids start at 1 and are never reused."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        buffer_limit: int,
        on_exit: Callable[[Child], None],
        on_change: Callable[[], None],
    ) -> None:
        self._nursery = nursery
        self._buffer_limit = buffer_limit
        self._on_exit = on_exit
        self._on_change = on_change
        self._children: dict[int, Child] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[Child]:
        return iter(list(self._children.values()))

    def get(self, child_id: int) -> Child | None:
        return self._children.get(child_id)

    def running_count(self) -> int:
        return sum(1 for c in self._children.values() if c.running)

    async def launch(
        self,
        *,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        rows: int,
        cols: int,
        name: str,
        linger: float | None,
        holder: Holder | None,
    ) -> Child:
        """Spawn a child; raises LaunchError (errno + one line) on bad input.

        Cancellation: shielded once the process exists; it is in the table.
        """
        if not argv or not all(argv):
            raise LaunchError(errno.EINVAL, "empty command")
        if not (1 <= rows <= 10000 and 1 <= cols <= 10000):
            raise LaunchError(errno.EINVAL, f"bad terminal size {rows}x{cols}")
        if linger is not None and not (0 <= linger < 10**9):
            raise LaunchError(errno.EINVAL, f"bad linger {linger}")
        if name and not NAME_RE.match(name):
            raise LaunchError(errno.EINVAL, f"bad session name {name!r}")
        if name and any(c.name == name for c in self._children.values()):
            raise LaunchError(errno.EEXIST, f"a session named {name!r} exists already")
        if any("\0" in a for a in (*argv, cwd, *env.keys(), *env.values())):
            raise LaunchError(errno.EINVAL, "a NUL byte in the command, cwd or environment")
        if any(not k or "=" in k for k in env):
            raise LaunchError(
                errno.EINVAL, "an environment variable with an empty name or '=' in it"
            )
        if not os.path.isabs(cwd):
            raise LaunchError(errno.EINVAL, f"cwd must be absolute: {cwd}")
        if not os.path.isdir(cwd):
            raise LaunchError(errno.ENOENT, f"no such directory: {cwd}")
        env = child_env(env)
        executable = resolve_executable(argv[0], env, cwd)
        try:
            pid, master, tty = _platform.spawn_on_pty(executable, argv, env, cwd, rows, cols)
        except ValueError as exc:
            raise LaunchError(errno.EINVAL, f"cannot start {argv[0]}: {exc}") from exc
        except OSError as exc:
            err = exc.errno or errno.EIO
            if err == errno.ENOENT:
                raise LaunchError(err, f"command not found: {argv[0]}") from exc
            raise LaunchError(err, f"cannot start {argv[0]}: {exc.strerror}") from exc
        child_id = next(self._ids)
        child = Child(
            id=child_id,
            pid=pid,
            master=master,
            tty=tty,
            name=name or str(child_id),
            argv=list(argv),
            cwd=cwd,
            rows=rows,
            cols=cols,
            linger=linger,
            buffer_limit=self._buffer_limit,
        )
        self._children[child_id] = child
        self._nursery.start_soon(self._watch, child)
        child.holder = holder
        if holder is None:
            await self.become_unheld(child)
        self._on_change()
        return child

    async def _watch(self, child: Child) -> None:
        try:
            code = await child.watch.wait()
        finally:
            child.watch.close()
        child.exit_code = code
        child.exited_at = time.time()
        child.exited.set()
        if child._linger_scope is not None:
            child._linger_scope.cancel()
        self._on_exit(child)
        self._on_change()

    async def become_unheld(self, child: Child) -> None:
        """Nobody holds ``child`` from now: drain it, start its linger clock."""
        child.holder = None
        if child.master is not None and not child.eof and child._drain_scope is None:
            await self._nursery.start(child._drain)
        if child.linger is not None and child.running and child._linger_scope is None:
            self._nursery.start_soon(self._linger, child)

    def hold(self, child: Child, holder: Holder, *, steal: bool) -> None:
        """Make ``holder`` the child's holder and tell its drain to stop
        (``handover`` waits for it). Raises LaunchError(EBUSY) if another
        client holds it and not ``steal``. Synchronous, so a claim is atomic:
        two claimers can never both get a child."""
        previous = child.holder
        if previous is not None and previous is not holder and not steal:
            raise LaunchError(errno.EBUSY, f"session {child.name} is held by another client")
        child.holder = holder
        if child._linger_scope is not None:
            child._linger_scope.cancel()
            child._linger_scope = None
        if previous is not None and previous is not holder:
            previous.notify(ChildTaken(id=child.id))
        child.cancel_drain()

    async def handover(self, child: Child, *, keep_output: bool = False) -> tuple[bytes, int]:
        """After ``hold``: wait until the drain has stopped, then return
        (buffered output, dropped count); the caller sends the fd (if the
        child runs). With ``keep_output`` the daemon keeps a copy.

        Cancellation: shielded; the drain is stopped either way.
        """
        await child.stop_drain()
        if not child.running:
            child.read_available()
        return child.buffer.peek() if keep_output else child.buffer.take()

    async def _linger(self, child: Child) -> None:
        assert child.linger is not None
        scope = trio.CancelScope()
        child._linger_scope = scope
        with scope:
            await trio.sleep(child.linger)
            await self.end(child)
        if child._linger_scope is scope:
            child._linger_scope = None

    async def end(self, child: Child) -> None:
        """SIGHUP the child's process group, SIGKILL after a grace period.

        Cancellation: the signals already sent stay sent.
        """
        _killpg(child.pid, signal.SIGHUP)
        with trio.move_on_after(KILL_GRACE):
            await child.exited.wait()
        if child.running:
            _killpg(child.pid, signal.SIGKILL)
            with trio.move_on_after(KILL_GRACE):
                await child.exited.wait()

    async def collect(self, child: Child) -> ChildInfo:
        """Remove a child from the table and close its master.

        Cancellation: shielded; always completes.
        """
        with trio.CancelScope(shield=True):
            await child.stop_drain()
        if not child.running:
            child.read_available()
        info = child.info()
        self._children.pop(child.id, None)
        child.close_master()
        self._on_change()
        return info


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
