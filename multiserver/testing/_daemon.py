"""``SimDaemon``: listens on a real Unix socket, accepts connections and answers
each message as the real daemon would, under its ``Behavior``."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import trio

from multiserver.daemon._connection import ClientConnection
from multiserver.daemon._core import Answer, RequestCore, command_not_found, launch_problem
from multiserver.daemon._server import bind_listener, sharing_ticks
from multiserver.protocol._messages import Launch, Message
from multiserver.protocol._wire import IntakeBudget
from multiserver.settings._config import DaemonConfig
from multiserver.system._paths import fits_sun_path
from multiserver.system._trust import ensure_private_dir
from multiserver.testing._behavior import Behavior
from multiserver.testing._children import SimChild, _fake_pids
from multiserver.testing._intercept import BehaviorIntercept

SERVER_NAME = "multiserver-sim/0.1"


class _SimHost:
    """The simulated children, as the request core sees them (``ChildHost``)."""

    def __init__(self, daemon: SimDaemon, buffer_limit: int) -> None:
        self._daemon = daemon
        self._buffer_limit = buffer_limit
        self.children: dict[int, SimChild] = {}
        self._ids = itertools.count(1)
        self.closed = False

    def get(self, child_id: int) -> SimChild | None:
        return self.children.get(child_id)

    def __iter__(self) -> Iterator[SimChild]:
        return iter(list(self.children.values()))

    def new_child(
        self,
        argv: Sequence[str],
        name: str,
        cwd: str,
        env: dict[str, str],
        rows: int,
        cols: int,
        linger: float | None,
    ) -> SimChild:
        if self.closed:
            raise RuntimeError("the daemon has stopped")
        child_id = next(self._ids)
        master, side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child = SimChild(
            self._daemon,
            id=child_id,
            name=name or str(child_id),
            argv=list(argv),
            cwd=cwd,
            env=env,
            rows=rows,
            cols=cols,
            linger=linger,
            master=master,
            side=side,
            buffer_limit=self._buffer_limit,
        )
        self.children[child_id] = child
        self._daemon._note_change()
        return child

    def spawn(self, msg: Launch, env: dict[str, str]) -> SimChild:
        if msg.argv[0] in self._daemon.missing_commands:
            raise command_not_found(msg.argv[0])
        return self.new_child(msg.argv, msg.name, msg.cwd, env, msg.rows, msg.cols, msg.linger)

    def hold(self, child: SimChild) -> None:
        child.tap = None  # nothing drains a simulated child: its output waits in the socket

    def share(self, child: SimChild, tap: Callable[[bytes], None]) -> None:
        child.tap = tap
        child.read_available()  # what the reader left unread, then every write

    def pause(self, child: SimChild) -> None:
        pass  # the test writes what it writes: a sim child never waits

    def resume(self, child: SimChild) -> None:
        pass

    def unhold(self, child: SimChild) -> None:
        child.tap = None
        before = len(child.buffer) + child.buffer.dropped
        child.read_available()  # what the last holder left unread
        if len(child.buffer) + child.buffer.dropped > before:  # as the daemon's drain reads it
            self._daemon._child_output(child)

    def collect(self, child: SimChild) -> None:
        del self.children[child.id]
        child._close()

    def signal(self, child: SimChild, signum: int) -> None:
        child.signals.append(signum)

    def resize(self, child: SimChild, rows: int, cols: int) -> None:
        child.rows, child.cols = rows, cols

    def freed(self, nbytes: int) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        for child in self.children.values():
            child._close()


class SimDaemon:
    """An in-process daemon on a real Unix socket, with simulated children.

    It runs the daemon's own request core and client connections
    (``multiserver.daemon._core``, ``multiserver.daemon._connection``): only its children
    (socketpairs) and its ``Behavior`` are simulated.

    ``socket_path`` is where it listens; its directory is created 0700 if
    missing and must be private (as the client checks). ``behavior`` may be
    replaced at any time; it applies to messages read (and, for
    ``accept_never``, connections accepted) from then on. A Launch whose
    ``argv[0]`` is in ``missing_commands`` fails like an unknown command.

    A SimDaemon serves once; to simulate a restart, make a new one on the
    same path.
    """

    def __init__(
        self,
        socket_path: Path | str,
        *,
        instance_id: str | None = None,
        behavior: Behavior | None = None,
        buffer_limit: int = DaemonConfig().buffer_limit,
        missing_commands: Iterable[str] = (),
    ) -> None:
        self.socket_path = Path(socket_path)
        self.instance_id = instance_id or secrets.token_hex(16)
        self.pid = next(_fake_pids)
        self.missing_commands = frozenset(missing_commands)
        self.received: list[Message] = []  # every message read, in order
        self.config = DaemonConfig(buffer_limit=buffer_limit)
        self.intake = IntakeBudget(self.config.intake_limit, self.config.intake_free)
        self._behavior = behavior or Behavior()
        self._host = _SimHost(self, buffer_limit)
        self.core = RequestCore(
            self._host, instance_id=self.instance_id, pid=self.pid, server=SERVER_NAME
        )
        self._intercept = BehaviorIntercept(self)
        self._conns: set[ClientConnection] = set()
        self._conn_numbers = itertools.count(1)
        self._changed = trio.Event()
        self._accept_scope: trio.CancelScope | None = None
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._served = False

    # --- for tests ----------------------------------------------------------

    @property
    def behavior(self) -> Behavior:
        return self._behavior

    @behavior.setter
    def behavior(self, behavior: Behavior) -> None:
        self._behavior = behavior
        if self._accept_scope is not None and behavior.accept_never:
            self._accept_scope.cancel()
        self._note_change()

    @property
    def children(self) -> list[SimChild]:
        """Every child not yet collected, by id."""
        return list(self._host.children.values())

    def child(self, child_id: int) -> SimChild:
        return self._host.children[child_id]

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return len(self._conns)

    async def wait_connections(self, count: int) -> None:
        """Wait until exactly ``count`` client connections are open.

        Cancellation: nothing happened.
        """
        while len(self._conns) != count:
            await self._changed.wait()

    async def wait_children(self, count: int) -> None:
        """Wait until at least ``count`` children are there (launched or
        added): a test waits on the launch itself, not on a poll that moves
        a mock clock on.

        Cancellation: nothing happened.
        """
        while len(self._host.children) < count:
            await self._changed.wait()

    def add_child(
        self,
        argv: Sequence[str] = ("sh",),
        *,
        name: str = "",
        cwd: str = "/",
        env: Mapping[str, str] | None = None,
        rows: int = 24,
        cols: int = 80,
        linger: float | None = None,
    ) -> SimChild:
        """A running, unheld child, as if launched detached earlier. Raises
        ValueError where the daemon would refuse the launch (``cwd`` need
        not exist)."""
        taken = bool(name) and any(c.name == name for c in self._host)
        problem = launch_problem(
            list(argv), dict(env or {}), cwd, rows, cols, name, linger, taken, cwd_must_exist=False
        )
        if problem is not None:
            raise ValueError(problem[1])
        return self._host.new_child(argv, name, cwd, dict(env or {}), rows, cols, linger)

    def stop(self) -> None:
        """Make ``serve`` return: every connection is closed, the socket
        unlinked, every fd closed."""
        self._stop.set()

    async def wait_stopped(self) -> None:
        """Wait until ``serve`` has returned (after ``stop()``, a Shutdown or
        cancellation): connections closed, socket unlinked, fds closed.

        Cancellation: nothing happened.
        """
        await self._stopped.wait()

    def close(self) -> None:
        """Close every child's fds. ``serve`` does it when it returns; call it
        for a daemon that never served. Idempotent."""
        self._host.close()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind and listen on ``socket_path`` (mode 0600), report
        ``task_status.started()`` once it listens, serve until ``stop()`` or a
        Shutdown.

        Cancellation: the same as stopping: every connection is closed, the
        socket unlinked and every fd the daemon created closed.
        """
        if self._served or self._host.closed:
            raise RuntimeError("a SimDaemon serves once; make a new one to simulate a restart")
        self._served = True
        try:
            if not fits_sun_path(self.socket_path):
                raise ValueError(f"socket path too long for sun_path: {self.socket_path}")
            ensure_private_dir(self.socket_path.parent)
            listener = bind_listener(str(self.socket_path))
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._accept_loop, listener, nursery)
                    nursery.start_soon(sharing_ticks, self.core)
                    task_status.started()
                    await self._stop.wait()
                    nursery.cancel_scope.cancel()
            finally:
                listener.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.socket_path)
        finally:
            self.close()
            self._stopped.set()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[SimDaemon]:
        """``serve`` for the length of the block; stops on the way out.

        Cancellation: as ``serve``.
        """
        async with trio.open_nursery() as nursery:
            await nursery.start(self.serve)
            try:
                yield self
            finally:
                self.stop()

    # --- for the connections and children --------------------------------------

    def connection_gone(self, conn: ClientConnection) -> None:
        self._conns.discard(conn)
        self.core.disconnect(conn)
        self._note_change()

    async def end_children(self) -> None:
        """An accepted Shutdown: the real daemon's SIGHUP, then every child
        is forgotten."""
        for child in self._host:
            if child.running:
                child.exit(-signal.SIGHUP)
        for child in self._host:
            self.core.forget(child.id)
            self._host.collect(child)

    async def upgrade(self, conn: ClientConnection, req: int) -> Answer:
        """An Upgrade: a simulated daemon has no code to replace."""
        return self.core.error(conn, req, errno.EOPNOTSUPP, "a simulated daemon cannot upgrade")

    def _holder_number(self, child_id: int) -> int | None:
        holder = self.core.holder(child_id)
        return holder.id if isinstance(holder, ClientConnection) else None

    def _child_exited(self, child: SimChild) -> None:
        assert child.exit_code is not None
        self.core.child_exited(child.id, child.exit_code)

    def _child_output(self, child: SimChild) -> None:
        self.core.output_seen(child)

    # --- internals ----------------------------------------------------------

    def _note_change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _accept_loop(self, listener: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        while True:
            if self._behavior.accept_never:
                await self._changed.wait()
                continue
            sock: trio.socket.SocketType | None = None
            with trio.CancelScope() as self._accept_scope:
                sock, _ = await listener.accept()
            self._accept_scope = None
            if sock is None:
                continue
            conn = ClientConnection(
                self, sock, number=next(self._conn_numbers), intercept=self._intercept
            )
            self._conns.add(conn)
            self.core.connect(conn)
            self._note_change()
            nursery.start_soon(conn.serve)
