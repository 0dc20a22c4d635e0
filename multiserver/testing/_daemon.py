"""``SimDaemon``: listens on a real Unix socket, accepts connections and answers
each message as the real daemon would, under its ``Behavior``."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import random
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path

import trio

from multiserver import _platform
from multiserver._children import child_env, launch_problem
from multiserver._codec import MAGIC
from multiserver._config import DaemonConfig
from multiserver._messages import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    ChildError,
    ChildExited,
    Children,
    ChildTaken,
    Claim,
    Claimed,
    ClaimedChild,
    Collect,
    Collected,
    Hello,
    Launch,
    Launched,
    ListChildren,
    Message,
    Ok,
    Peek,
    Peeked,
    Refused,
    Release,
    Released,
    Resize,
    Shutdown,
    Signal,
    Welcome,
)
from multiserver._paths import ensure_private_dir, fits_sun_path
from multiserver._server import bind_listener, claim_batches
from multiserver.testing._behavior import Behavior, Rule
from multiserver.testing._children import SimChild, _fake_pids
from multiserver.testing._connection import _Answer, _error, _SimConnection, _with_version

SERVER_NAME = "multiserver-sim/0.1"
_GARBAGE_SIZE = 64


class SimDaemon:
    """An in-process daemon on a real Unix socket, with simulated children.

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
        self._behavior = behavior or Behavior()
        self._buffer_limit = buffer_limit
        self._children: dict[int, SimChild] = {}
        self._ids = itertools.count(1)
        self._conns: set[_SimConnection] = set()
        self._conn_numbers = itertools.count(1)
        self._changed = trio.Event()
        self._accept_scope: trio.CancelScope | None = None
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._served = False
        self._closed = False
        self._rng = random.Random(self.instance_id)

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
        return list(self._children.values())

    def child(self, child_id: int) -> SimChild:
        return self._children[child_id]

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
        taken = bool(name) and self._name_taken(name)
        problem = launch_problem(
            list(argv), dict(env or {}), cwd, rows, cols, name, linger, taken, cwd_must_exist=False
        )
        if problem is not None:
            raise ValueError(problem[1])
        return self._new_child(argv, name, cwd, dict(env or {}), rows, cols, linger)

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
        self._closed = True
        for child in self._children.values():
            child._close()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind and listen on ``socket_path`` (mode 0600), report
        ``task_status.started()`` once it listens, serve until ``stop()`` or a
        Shutdown.

        Cancellation: the same as stopping: every connection is closed, the
        socket unlinked and every fd the daemon created closed.
        """
        if self._served or self._closed:
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

    # --- internals ----------------------------------------------------------

    def _note_change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _name_taken(self, name: str) -> bool:
        return any(c.name == name for c in self._children.values())

    def _new_child(
        self,
        argv: Sequence[str],
        name: str,
        cwd: str,
        env: dict[str, str],
        rows: int,
        cols: int,
        linger: float | None,
    ) -> SimChild:
        if self._closed:
            raise RuntimeError("the daemon has stopped")
        child_id = next(self._ids)
        master, side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child = SimChild(
            self,
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
        self._children[child_id] = child
        return child

    def _child_exited(self, child: SimChild) -> None:
        assert child.exit_code is not None
        for conn in list(self._conns):
            conn.notify(ChildExited(id=child.id, exit_code=child.exit_code))

    def _connection_gone(self, conn: _SimConnection) -> None:
        self._conns.discard(conn)
        for child_id in sorted(conn.held):
            child = self._children.get(child_id)
            if child is not None and child._holder is conn:
                child._become_unheld()
        conn.held.clear()
        self._note_change()

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
            conn = _SimConnection(self, sock, next(self._conn_numbers))
            self._conns.add(conn)
            self._note_change()
            nursery.start_soon(conn.serve)

    async def _handle(self, conn: _SimConnection, msg: Message) -> bool:
        """Serve one message under the behavior's rule. False: close."""
        self.received.append(msg)
        rule = self._behavior.rule(type(msg))
        if rule.close:
            return False
        if rule.hang:
            await conn.wait_peer_closed()
            return False
        if rule.delay:
            await trio.sleep(rule.delay)
        answer = self._answer(conn, msg, rule)
        frames = [(conn.encode(reply, len(fds)), fds) for reply, fds in answer.replies]
        if rule.wrong_version and not isinstance(msg, Hello):
            frames = [(_with_version(frame, conn.version + 1), fds) for frame, fds in frames]
        if rule.garbage:
            frames = [(self._garbage(), [])]
        close = answer.close
        if rule.crash_mid_frame and frames:
            frame, fds = frames[0]
            frames = [(frame[: max(1, len(frame) // 2)], fds)]
            close = True
        for frame, fds in frames:
            conn.enqueue(frame, fds)
        if answer.stop:
            await conn._flush()
            self.stop()
        return not close

    def _garbage(self) -> bytes:
        data = bytearray(self._rng.randbytes(_GARBAGE_SIZE))
        if data[0] == MAGIC[0]:
            data[0] ^= 0xFF
        return bytes(data)

    def _answer(self, conn: _SimConnection, msg: Message, rule: Rule) -> _Answer:
        """What the real daemon answers (its errnos and messages), with every
        state change made before the first reply is queued."""
        match msg:
            case Hello():
                return self._on_hello(conn, msg, rule)
            case Launch():
                return self._on_launch(conn, msg)
            case Claim():
                return self._on_claim(conn, msg)
            case Release():
                return self._on_release(conn, msg)
            case ListChildren():
                infos = [c.info(foreground=msg.foreground) for c in self._children.values()]
                return _Answer([(Children(req=msg.req, children=infos), [])])
            case Shutdown():
                return self._on_shutdown(msg)
            case Signal() | Collect() | Peek() | Resize():
                child = self._children.get(msg.id)
                if child is None:
                    return _error(msg, errno.ENOENT, f"no child {msg.id}")
                return self._on_child_request(child, msg)
            case _:  # the codec admits only client messages
                raise AssertionError(msg)

    def _on_hello(self, conn: _SimConnection, msg: Hello, rule: Rule) -> _Answer:
        lo, hi = max(msg.min_version, MIN_PROTOCOL_VERSION), min(msg.max_version, PROTOCOL_VERSION)
        if lo > hi or rule.refuse:
            reason = (
                "refused by the simulated daemon"
                if rule.refuse
                else f"no common protocol version: client speaks {msg.min_version}..{msg.max_version}, "
                f"daemon speaks {MIN_PROTOCOL_VERSION}..{PROTOCOL_VERSION}"
            )
            refused = Refused(
                reason=reason, min_version=MIN_PROTOCOL_VERSION, max_version=PROTOCOL_VERSION
            )
            return _Answer([(refused, [])], close=True)
        welcome = Welcome(
            version=PROTOCOL_VERSION + 1 if rule.wrong_version else hi,
            instance_id=self.instance_id,
            pid=self.pid,
            server=SERVER_NAME,
            children=[c.info() for c in self._children.values()] if msg.children else [],
        )
        conn.ready = True
        return _Answer([(welcome, [])])

    def _on_launch(self, conn: _SimConnection, msg: Launch) -> _Answer:
        name_taken = bool(msg.name) and self._name_taken(msg.name)
        problem = launch_problem(
            msg.argv, msg.env, msg.cwd, msg.rows, msg.cols, msg.name, msg.linger, name_taken
        )
        if problem is None and msg.argv[0] in self.missing_commands:
            problem = errno.ENOENT, f"command not found: {msg.argv[0]}"
        if problem is not None:
            return _error(msg, *problem)
        child = self._new_child(
            msg.argv, msg.name, msg.cwd, child_env(msg.env), msg.rows, msg.cols, msg.linger
        )
        if msg.hold:
            child._holder = conn
            conn.held.add(child.id)
            return _Answer([(Launched(req=msg.req, child=child.info()), [child._master_fd()])])
        return _Answer([(Launched(req=msg.req, child=child.info()), [])])

    def _on_claim(self, conn: _SimConnection, msg: Claim) -> _Answer:
        parts: list[tuple[ClaimedChild, bytes, int | None]] = []
        for child_id in msg.ids:
            child = self._children.get(child_id)
            if child is None:
                parts.append(
                    (
                        ClaimedChild(
                            id=child_id, errno=errno.ENOENT, message=f"no child {child_id}"
                        ),
                        b"",
                        None,
                    )
                )
                continue
            previous = child._holder
            if previous is not None and previous is not conn and not msg.steal:
                busy = f"session {child.name} is held by another client"
                parts.append(
                    (ClaimedChild(id=child_id, errno=errno.EBUSY, message=busy), b"", None)
                )
                continue
            child._holder = conn
            if previous is not None and previous is not conn:
                previous.notify(ChildTaken(id=child_id))
                previous.held.discard(child_id)
            conn.held.add(child_id)
            output, dropped = child._take_output(keep=msg.keep_output)
            fd = child._master_fd() if child.running else None
            part = ClaimedChild(
                id=child_id,
                child=child.info(),
                dropped=dropped,
                output_len=len(output),
                fd=fd is not None,
            )
            parts.append((part, output, fd))
        batches = list(claim_batches(parts))
        return _Answer(
            [
                (
                    Claimed(
                        req=msg.req, children=children, last=i == len(batches) - 1, outputs=outputs
                    ),
                    fds,
                )
                for i, (children, outputs, fds) in enumerate(batches)
            ]
        )

    def _on_release(self, conn: _SimConnection, msg: Release) -> _Answer:
        replies: list[tuple[Message, list[int]]] = []
        released: list[int] = []
        for child_id in msg.ids:
            child = self._children.get(child_id)
            if child is None or child._holder is not conn:
                err, why = (
                    (errno.ENOENT, f"no child {child_id}")
                    if child is None
                    else (errno.EPERM, f"child {child_id} is not held by this client")
                )
                replies.append((ChildError(req=msg.req, id=child_id, errno=err, message=why), []))
                continue
            conn.held.discard(child_id)
            if msg.replace_output:
                child._buffer.replace(msg.output)
            child._become_unheld()
            released.append(child_id)
        replies.append((Released(req=msg.req, ids=released), []))
        return _Answer(replies)

    def _on_child_request(self, child: SimChild, msg: Signal | Collect | Peek | Resize) -> _Answer:
        match msg:
            case Signal():
                if msg.signum not in _platform.VALID_SIGNALS or msg.signum == 0:
                    return _error(msg, errno.EINVAL, f"bad signal {msg.signum}")
                if not child.running:
                    return _error(msg, errno.ESRCH, f"child {msg.id} has exited")
                child.signals.append(msg.signum)
                return _Answer([(Ok(req=msg.req), [])])
            case Collect():
                if child.running:
                    return _error(msg, errno.EBUSY, f"child {msg.id} is still running")
                if child._holder is not None:
                    child._holder.held.discard(child.id)
                child._drain_master()
                info = child.info()
                del self._children[child.id]
                child._close()
                return _Answer([(Collected(req=msg.req, child=info), [])])
            case Peek():
                if msg.max_bytes is not None and msg.max_bytes < 0:
                    return _error(msg, errno.EINVAL, "max_bytes must be >= 0")
                if not child.running and child._holder is None:
                    child._drain_master()
                output, dropped = child._buffer.peek(msg.max_bytes)
                peeked = Peeked(req=msg.req, child=child.info(), dropped=dropped, output=output)
                return _Answer([(peeked, [])])
            case Resize():
                if not (1 <= msg.rows <= 10000 and 1 <= msg.cols <= 10000):
                    return _error(msg, errno.EINVAL, f"bad terminal size {msg.rows}x{msg.cols}")
                child.rows, child.cols = msg.rows, msg.cols
                return _Answer([(Ok(req=msg.req), [])])

    def _on_shutdown(self, msg: Shutdown) -> _Answer:
        running = [c for c in self._children.values() if c.running]
        if running and not msg.force:
            return _error(
                msg,
                errno.EBUSY,
                f"{len(running)} session(s) still running; use --force to end them",
            )
        for child in running:  # the real daemon's SIGHUP
            child.exit(-signal.SIGHUP)
        for child in list(self._children.values()):
            del self._children[child.id]
            child._close()
        return _Answer([(Ok(req=msg.req), [])], stop=True)
