"""The daemon's children: each on its own PTY, drained while nobody holds it,
reaped by pid (never ``waitpid(-1)``), kept until its status is collected.

Ownership: a ``Child`` owns its master fd for its whole life in the table; a
client that holds the child has its own copy (passed with SCM_RIGHTS).

Two loops serve every child, whatever their number: the *drain loop* waits on
one ReadySet of the masters of unheld children and reads each ready one into
its buffer; the *reap loop* waits on one ExitSet and reaps exited children by
pid. No task per child, so memory and handover cost do not grow with tasks.

Handover without loss or duplication: a read and the append of what it read
happen with no checkpoint between them, and taking a master out of the drain
set is synchronous. So when a claim runs, the drain loop is parked between
reads; the claim removes the master from the set and takes the buffer, and
the bytes still in the kernel are read by the client from its fd.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import trio

from multiserver._durable import KEPT_OUTPUT
from multiserver.daemon._core import LaunchError, command_not_found
from multiserver.daemon._keeping import OutputKeeper
from multiserver.daemon._openfiles import FileBudget
from multiserver.daemon._snapshot import BlobWriter, ChildState, blob_view
from multiserver.protocol._messages import ChildInfo, Launch
from multiserver.system import _platform
from multiserver.system._osstr import escaped
from multiserver.terminal._buffer import OutputBuffer

log = logging.getLogger("multiserver.daemon")

# After SIGHUP, how long a lingering or force-stopped child gets before SIGKILL.
KILL_GRACE = 5.0
SHUTDOWN_CODES = frozenset({-signal.SIGHUP, -signal.SIGTERM, -signal.SIGKILL})
READ_SIZE = 65536
# The longest the drain loop reads before it lets the request handlers run.
DRAIN_SLICE = 0.005
# Once this much buffered output has left the table (handed over or
# collected), glibc is asked to give the freed pages back, TRIM_DELAY later
# (so the frames that carried it have gone out). Without it, a daemon that
# buffered 100 floods keeps 100 MiB resident after they are all collected.
TRIM_AFTER = 8 * 1024 * 1024
TRIM_DELAY = 1.0


def resolve_executable(argv0: str, env: dict[str, str], cwd: str) -> str:
    """Find argv[0] on the child's PATH (not the daemon's)."""
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else os.path.join(cwd, argv0)
        if not os.path.exists(path):
            raise command_not_found(argv0)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise LaunchError(errno.EACCES, f"permission denied: {escaped(argv0)}")
        return path
    found = shutil.which(argv0, path=env.get("PATH", os.defpath))
    if found is None:
        raise command_not_found(argv0)
    return found if os.path.isabs(found) else os.path.join(cwd, found)


class Child:
    """One child process on a PTY. Stateful; created only by ``ChildTable``."""

    __slots__ = (
        "_linger_at",
        "_linger_scope",
        "argv",
        "buffer",
        "cols",
        "cwd",
        "eof",
        "exit_code",
        "exited",
        "exited_at",
        "id",
        "linger",
        "master",
        "name",
        "paused",
        "pid",
        "rows",
        "started_at",
        "tap",
        "tty",
    )

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
        self.eof = False  # read to the end: the slave side is closed
        self.buffer = OutputBuffer(buffer_limit)
        # While several clients share it (``ChildTable.share``): each read,
        # as it is read (b"": the end of the PTY).
        self.tap: Callable[[bytes], None] | None = None
        self.paused = False  # shared, and its holders are full: not read
        self._linger_scope: trio.CancelScope | None = None
        self._linger_at = 0.0  # trio time its linger clock runs out

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def describe(self, *, held: bool, foreground: bool = False) -> ChildInfo:
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
            held=held,
            buffered_bytes=len(self.buffer),
            dropped_bytes=self.buffer.dropped,
            started_at=self.started_at,
            exited_at=self.exited_at,
            linger=self.linger,
            fg_pid=fg_pid,
            fg_cwd=fg_cwd,
            fg_argv=fg_argv,
        )

    def read_some(self, limit: int, keeper: OutputKeeper | None = None) -> int:
        """Read what the kernel holds now, up to about ``limit`` bytes, into
        the buffer (and ``keeper``), without waiting; sets ``eof`` at the
        end of the PTY. No checkpoint: a read and its append are never
        separated. Returns how many bytes it read."""
        if self.master is None or self.eof:
            return 0
        got = 0
        while got < limit and not self.paused:
            try:
                data = os.read(self.master, READ_SIZE)
            except BlockingIOError:
                break
            except OSError:  # EIO: the slave side is closed
                self.eof = True
                break
            if not data:
                self.eof = True
                break
            self.buffer.append(data)
            if keeper is not None:
                keeper.wrote(self, data)
            if self.tap is not None:
                self.tap(data)
            got += len(data)
        return got

    def read_available(self, keeper: OutputKeeper | None = None) -> None:
        """Everything the kernel holds now (for an exited child)."""
        self.read_some(1 << 62, keeper)


class ChildTable:
    """Every child of the daemon, by id. Ids start at 1 and are never reused.
    ``run`` runs the drain and reap loops; it must be running for the table
    to be served."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        buffer_limit: int,
        on_exit: Callable[[Child], None],
        on_change: Callable[[], None],
        on_output: Callable[[Child], None] = lambda child: None,
        output_dir: Path | None = None,
        child_nofile: int | None = None,
    ) -> None:
        self._nursery = nursery
        self._buffer_limit = buffer_limit
        # Each unheld child's output, kept on disk as it comes (``_keeping``).
        self.keeper = OutputKeeper(
            output_dir if buffer_limit else None, min(buffer_limit, KEPT_OUTPUT)
        )
        self._ending = False
        # The soft RLIMIT_NOFILE children get (``_openfiles``); None: the daemon's.
        self._child_nofile = child_nofile
        self._budget = FileBudget()
        self._on_exit = on_exit
        self._on_change = on_change
        self._on_output = on_output
        self._children: dict[int, Child] = {}
        self._by_pid: dict[int, Child] = {}
        self._next_id = 1
        self._draining: dict[int, Child] = {}  # master fd -> unheld child
        self._drain_set = _platform.ReadySet()
        self._exits = _platform.ExitSet()
        self._freed = 0  # bytes of output that left the table since the last trim
        self._freed_enough = trio.Event()

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[Child]:
        return iter(list(self._children.values()))

    def get(self, child_id: int) -> Child | None:
        return self._children.get(child_id)

    def running_count(self) -> int:
        return sum(1 for c in self._children.values() if c.running)

    async def run(self) -> None:
        """The drain and reap loops, until cancelled.

        Cancellation: the loops stop; children keep running; ``close``
        releases the sets.
        """
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._drain_loop)
            nursery.start_soon(self._reap_loop)
            nursery.start_soon(self._trim_loop)
            nursery.start_soon(self.keeper.run)

    def close(self) -> None:
        self._draining.clear()
        self._drain_set.close()
        self._exits.close()

    def _note_freed(self, size: int) -> None:
        self._freed += size
        if self._freed >= TRIM_AFTER:
            self._freed_enough.set()

    async def _trim_loop(self) -> None:
        """Give freed output memory back to the OS, at most once per
        TRIM_DELAY and only after TRIM_AFTER bytes left: an idle daemon
        never wakes for it."""
        while True:
            await self._freed_enough.wait()
            await trio.sleep(TRIM_DELAY)
            self._freed = 0
            self._freed_enough = trio.Event()
            _platform.release_free_memory()

    async def _drain_loop(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self._drain_set.fileno())
            # Up to READ_SIZE per ready child per round: a flooding child
            # cannot starve the others. A checkpoint between two children
            # once DRAIN_SLICE has passed: a round of a thousand flooding
            # children (~64 MB, a second) cannot starve the request handlers.
            # A child claimed meanwhile has left ``_draining``: skipped.
            slice_end = time.monotonic() + DRAIN_SLICE
            for fd in self._drain_set.ready():
                child = self._draining.get(fd)
                if child is None:
                    continue
                if child.read_some(READ_SIZE, self.keeper):
                    self._on_output(child)
                if child.eof:
                    self._stop_draining(child)
                    if child.tap is not None:
                        child.tap(b"")
                if time.monotonic() >= slice_end:
                    await trio.lowlevel.checkpoint()
                    slice_end = time.monotonic() + DRAIN_SLICE
            await trio.lowlevel.checkpoint()

    async def _reap_loop(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self._exits.fileno())
            for pid, code in self._exits.reap_exited():
                child = self._by_pid.pop(pid, None)
                if child is not None:
                    self._exited(child, code)

    def _exited(self, child: Child, code: int) -> None:
        child.exit_code = code
        child.exited_at = time.time()
        child.exited.set()
        # An end by a shutdown's signal (ours, or the machine's: SIGHUP,
        # SIGTERM, SIGKILL) is not kept as the program's own: after the
        # reboot, a restore starts the session again.
        if not self._ending and code not in SHUTDOWN_CODES:
            self.keeper.exited(child, code, child.exited_at)
        if child._linger_scope is not None:
            child._linger_scope.cancel()
        self._on_exit(child)
        self._on_change()

    def _start_draining(self, child: Child) -> None:
        if child.master is None or child.eof or child.master in self._draining:
            return
        # Another process may have made the shared open file blocking.
        os.set_blocking(child.master, False)
        self._draining[child.master] = child
        self._drain_set.add(child.master)

    def _stop_draining(self, child: Child) -> None:
        if child.master is not None and self._draining.pop(child.master, None) is not None:
            self._drain_set.remove(child.master)

    def spawn(self, msg: Launch, env: dict[str, str]) -> Child:
        """Start a child for a Launch the request core checked (``env``
        cleaned); not drained until ``unhold``. Raises LaunchError (EMFILE:
        it would leave the daemon without fds for its clients)."""
        problem = self._budget.problem(self.running_count())
        if problem is not None:
            raise LaunchError(errno.EMFILE, problem)
        argv = msg.argv
        executable = resolve_executable(argv[0], env, msg.cwd)
        try:
            pid, master, tty = _platform.spawn_on_pty(
                executable, argv, env, msg.cwd, msg.rows, msg.cols, self._child_nofile
            )
        except ValueError as exc:
            raise LaunchError(errno.EINVAL, f"cannot start {escaped(argv[0])}: {exc}") from exc
        except OSError as exc:
            err = exc.errno or errno.EIO
            if err == errno.ENOENT:
                raise command_not_found(argv[0]) from exc
            raise LaunchError(err, f"cannot start {escaped(argv[0])}: {exc.strerror}") from exc
        self._budget.launched()
        child_id, self._next_id = self._next_id, self._next_id + 1
        child = Child(
            id=child_id,
            pid=pid,
            master=master,
            tty=tty,
            name=msg.name or str(child_id),
            argv=list(argv),
            cwd=msg.cwd,
            rows=msg.rows,
            cols=msg.cols,
            linger=msg.linger,
            buffer_limit=self._buffer_limit,
        )
        self._children[child_id] = child
        self._by_pid[pid] = child
        self._exits.add(pid)
        log.info("child %d (pid %d) launched on %s", child.id, child.pid, child.tty)
        self._on_change()
        return child

    def unhold(self, child: Child, *, linger_left: float | None = None) -> None:
        """Nobody holds ``child`` from now: drain it, start its linger clock
        (with ``linger_left`` seconds instead of its whole linger: a clock
        that ran in the daemon before an upgrade)."""
        child.tap = None
        child.paused = False
        self.keeper.unhold(child)
        self._start_draining(child)
        if child.linger is not None and child.running and child._linger_scope is None:
            left = child.linger if linger_left is None else min(linger_left, child.linger)
            child._linger_scope = trio.CancelScope()
            child._linger_at = trio.current_time() + left
            self._nursery.start_soon(self._linger, child, child._linger_scope)

    def share(self, child: Child, tap: Callable[[bytes], None]) -> None:
        """Several clients hold ``child`` from now: the daemon reads it, as
        if nobody held it (its file kept here too), and hands each read to
        ``tap`` as it is read; no linger."""
        self.keeper.unhold(child)
        child.tap = tap
        child.paused = False
        self._start_draining(child)

    def pause(self, child: Child) -> None:
        child.paused = True
        self._stop_draining(child)

    def resume(self, child: Child) -> None:
        if child.tap is not None and child.paused:
            child.paused = False
            self._start_draining(child)

    def hold(self, child: Child) -> None:
        """A client holds ``child`` from now: stop draining it and its
        linger clock. Synchronous: the drain loop is parked between reads."""
        child.tap = None
        child.paused = False
        if child._linger_scope is not None:
            child._linger_scope.cancel()
            child._linger_scope = None
        self._stop_draining(child)
        self.keeper.hold(child)

    # --- across an upgrade (``_upgrade.py``) -------------------------------------

    def snapshot(self, blobs: BlobWriter) -> tuple[list[ChildState], int]:
        """(every child as it crosses an upgrade, the next child id).
        Synchronous: nothing changes while it runs. What waits for the
        output files is written first. The buffers go to ``blobs`` as
        views, not copies: release it before they may grow."""
        self.keeper.flush_all()
        now = trio.current_time()
        states = []
        for child in self._children.values():
            data, dropped = child.buffer.view()
            linger_left = None
            if child._linger_scope is not None:
                linger_left = max(0.0, child._linger_at - now)
            states.append(
                ChildState(
                    id=child.id,
                    pid=child.pid,
                    master=child.master,
                    tty=child.tty,
                    name=child.name,
                    argv=child.argv,
                    cwd=child.cwd,
                    rows=child.rows,
                    cols=child.cols,
                    linger=child.linger,
                    started_at=child.started_at,
                    exited_at=child.exited_at,
                    exit_code=child.exit_code,
                    eof=child.eof,
                    buffer=blobs.add(data),
                    dropped=dropped,
                    linger_left=linger_left,
                )
            )
        return states, self._next_id

    def adopt(self, states: list[ChildState], area: memoryview, next_id: int) -> list[Child]:
        """Take the children of a snapshot into the table (their masters
        too), neither drained nor lingering yet: the caller ``unhold``s
        those nobody holds. A child the old daemon had not reaped is
        watched (a zombie still has a pidfd). Raises SnapshotError."""
        adopted = []
        for state in states:
            child = Child(
                id=state.id,
                pid=state.pid,
                master=-1,
                tty=state.tty,
                name=state.name,
                argv=list(state.argv),
                cwd=state.cwd,
                rows=state.rows,
                cols=state.cols,
                linger=state.linger,
                buffer_limit=self._buffer_limit,
            )
            child.master = state.master
            child.started_at = state.started_at
            child.exited_at = state.exited_at
            child.eof = state.eof
            with blob_view(area, state.buffer) as data:  # one copy: into the buffer
                child.buffer.restore(data, state.dropped)
            if state.exit_code is not None:
                child.exit_code = state.exit_code
                child.exited.set()
            else:
                self._exits.add(child.pid)
                self._by_pid[child.pid] = child
            if child.master is not None:
                os.set_inheritable(child.master, False)
            self._children[child.id] = child
            adopted.append(child)
        self._next_id = max([next_id, *(s.id + 1 for s in states)])
        self._on_change()
        return adopted

    def freed(self, nbytes: int) -> None:
        self._note_freed(nbytes)

    def signal(self, child: Child, signum: int) -> None:
        _killpg(child.pid, signum)

    def resize(self, child: Child, rows: int, cols: int) -> None:
        if child.master is not None:
            _platform.set_winsize(child.master, rows, cols)
        child.rows, child.cols = rows, cols

    async def _linger(self, child: Child, scope: trio.CancelScope) -> None:
        assert child.linger is not None
        with scope:
            await trio.sleep_until(child._linger_at)
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

    def collect(self, child: Child, *, forget_output: bool = True) -> None:
        """Remove a child from the table and close its master; its kept
        output goes too, unless ``forget_output`` is false (a shutdown: a
        restore may want it)."""
        self._stop_draining(child)
        if not child.running:
            child.read_available(None if forget_output else self.keeper)
        if forget_output:
            self.keeper.forget(child)
        self._note_freed(len(child.buffer))
        self._children.pop(child.id, None)
        if child.master is not None:
            fd, child.master = child.master, None
            os.close(fd)
        self._on_change()

    async def end_all(self) -> None:
        """End every running child at once (SIGHUP, SIGKILL after a grace),
        then forget every child. Shielded: a shutdown finishes.

        Cancellation: none (shielded).
        """
        self._ending = True
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for child in self:
                    if child.running:
                        nursery.start_soon(self.end, child)
            for child in self:
                if not child.running:
                    self.collect(child, forget_output=False)
            self.keeper.flush_all()


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
