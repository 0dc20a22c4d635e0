"""Simulated multiserver daemons for your tests: no processes, no PTYs, no threads.

A ``SimDaemon`` speaks the real protocol (the real codec and wire layer) on a
real Unix socket bound in a directory your test gives, so the real client
library connects to it unchanged with ``open_client(path)``. Its children are
``SimChild`` objects: the "PTY master" a client receives is one end of a
``socket.socketpair``, and the test holds the other end as the child's side.
Everything runs in the test's own trio task tree and in-process socket I/O
completes in the kernel at once, so tests run under trio's autojump clock: a
30 s simulated delay takes no wall time. ``Behavior`` makes a daemon slow,
wedged or broken, per message type.

Example (pytest-trio; ``autojump_clock`` is pytest-trio's own fixture)::

    import trio
    from multiserver import open_client
    from multiserver.testing import Behavior, Claim, SimDaemon

    async def test_claim_gives_up_on_a_wedged_daemon(tmp_path, autojump_clock):
        sim = SimDaemon(tmp_path / "d.sock", behavior=Behavior.on(Claim, hang=True))
        sim.add_child(["bash"], name="editor")
        async with sim.serving(), open_client(sim.socket_path) as client:
            with trio.move_on_after(5) as scope:
                await client.claim([1])
            assert scope.cancelled_caught  # after 5 virtual seconds

fd ownership: each ``SimChild`` owns both ends of its socketpair; a client gets
a dup of the master end (sent with SCM_RIGHTS) and owns that copy. Every fd the
harness created is closed when ``serve`` returns (or by ``close()`` for a
daemon that never served). See docs/testing.md for what is not simulated.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import itertools
import os
import random
import secrets
import signal
import socket
import struct
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import attrs
import trio

from multiserver import _platform
from multiserver._buffer import OutputBuffer
from multiserver._children import child_env, launch_problem
from multiserver._codec import MAGIC, Codec, close_fds
from multiserver._config import DaemonConfig
from multiserver._errors import ConnectionClosed, PeerProtocolError
from multiserver._messages import (
    CLIENT_MESSAGES,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    ChildError,
    ChildExited,
    ChildInfo,
    Children,
    ChildTaken,
    Claim,
    Claimed,
    ClaimedChild,
    Collect,
    Collected,
    Error,
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
from multiserver._wire import FramedSocket

SERVER_NAME = "multiserver-sim/0.1"
# Above Linux's PID_MAX_LIMIT (2**22) and macOS's 99998: a fake pid can never
# name a real process, so a stray os.kill on it fails with ESRCH.
_fake_pids = itertools.count(5_000_000)
_VERSION_FIELD = struct.Struct("!H")  # the header's version, right after MAGIC
_GARBAGE_SIZE = 64


# --- behaviors ------------------------------------------------------------------


def _non_negative(_inst: object, _attr: object, value: float) -> None:
    if value < 0:
        raise ValueError(f"delay must be >= 0, got {value}")


@attrs.frozen
class Rule:
    """How a simulated daemon answers one type of message.

    Applied in this order: ``close`` (close at once, no answer), ``hang``
    (never answer), ``delay``, then the answer, altered by ``refuse`` (Hello
    only), ``wrong_version``, ``garbage`` and last ``crash_mid_frame``.
    """

    delay: float = attrs.field(default=0.0, validator=_non_negative)
    """Seconds to wait after reading the message before serving it. The
    connection serves requests in order, so later requests wait too."""
    hang: bool = False
    """Never answer this message or any later one on the connection; read and
    drop what the client sends, never close (until the client does or the
    daemon stops)."""
    close: bool = False
    """Close the connection on receiving this message, without answering."""
    refuse: bool = False
    """Hello only: answer ``Refused`` (the client raises VersionRefused), close."""
    wrong_version: bool = False
    """Hello: a Welcome picking a version the client does not speak. Other
    messages: reply frames whose header carries the wrong version."""
    garbage: bool = False
    """Send random bytes (never starting with the frame magic) instead of the
    answer; the connection stays open."""
    crash_mid_frame: bool = False
    """Send the first half of the first reply frame (with its fds), then close."""

    def __or__(self, other: Rule) -> Rule:
        """Both rules at once: flags are or'ed, the longer delay wins."""
        return Rule(
            delay=max(self.delay, other.delay),
            hang=self.hang or other.hang,
            close=self.close or other.close,
            refuse=self.refuse or other.refuse,
            wrong_version=self.wrong_version or other.wrong_version,
            garbage=self.garbage or other.garbage,
            crash_mid_frame=self.crash_mid_frame or other.crash_mid_frame,
        )


_NORMAL = Rule()


def _freeze_rules(rules: Mapping[type[Message], Rule]) -> Mapping[type[Message], Rule]:
    for kind, rule in rules.items():
        if kind not in CLIENT_MESSAGES:
            raise ValueError(f"{kind.__name__} is not a message a client sends")
        if rule.refuse and kind is not Hello:
            raise ValueError(f"refuse applies to Hello only, not {kind.__name__}")
    return MappingProxyType(dict(rules))


@attrs.frozen
class Behavior:
    """How a ``SimDaemon`` misbehaves: a ``Rule`` per client message type
    (``Hello``, ``Claim``, ...; absent types are answered normally) and
    ``accept_never`` (listen, but never accept a connection).

    Build with ``Behavior(rules={Claim: Rule(delay=5.0)})`` or
    ``Behavior.on(Claim, delay=5.0)``; combine with ``|``.
    """

    rules: Mapping[type[Message], Rule] = attrs.field(factory=dict, converter=_freeze_rules)
    accept_never: bool = False

    @classmethod
    def on(
        cls,
        message: type[Message],
        *,
        delay: float = 0.0,
        hang: bool = False,
        close: bool = False,
        refuse: bool = False,
        wrong_version: bool = False,
        garbage: bool = False,
        crash_mid_frame: bool = False,
    ) -> Behavior:
        """One rule for one message type."""
        rule = Rule(
            delay=delay,
            hang=hang,
            close=close,
            refuse=refuse,
            wrong_version=wrong_version,
            garbage=garbage,
            crash_mid_frame=crash_mid_frame,
        )
        return cls(rules={message: rule})

    def rule(self, message: type[Message]) -> Rule:
        return self.rules.get(message, _NORMAL)

    def __or__(self, other: Behavior) -> Behavior:
        """Both behaviors; rules for the same message type are combined."""
        rules = dict(self.rules)
        for kind, rule in other.rules.items():
            rules[kind] = rules[kind] | rule if kind in rules else rule
        return Behavior(rules=rules, accept_never=self.accept_never or other.accept_never)


# --- children -------------------------------------------------------------------


class SimChild:
    """A simulated child. Made by ``SimDaemon.add_child`` or by a Launch.

    Owns both ends of a socketpair: the master end (dup'd to each client
    that claims it) and the child's side, which the test drives with
    ``write_output``, ``read_input`` and ``exit``.
    """

    def __init__(
        self,
        daemon: SimDaemon,
        *,
        id: int,
        name: str,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        rows: int,
        cols: int,
        linger: float | None,
        master: socket.socket,
        side: socket.socket,
        buffer_limit: int,
    ) -> None:
        self.id = id
        self.pid = next(_fake_pids)
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.tty = f"/dev/pts/sim{id}"
        self.rows = rows
        self.cols = cols
        self.linger = linger  # reported, never acted on
        self.started_at = time.time()
        self.exited_at: float | None = None
        self.exit_code: int | None = None
        self.signals: list[int] = []  # every signal a client sent, in order
        # What List(foreground=True) reports while the child runs.
        self.fg_pid: int | None = None
        self.fg_cwd: str | None = None
        self.fg_argv: list[str] | None = None
        self._daemon = daemon
        self._holder: _SimConnection | None = None
        self._buffer = OutputBuffer(buffer_limit)
        self._master = master
        self._side_sock = side  # the same socket: sync writes ...
        self._side = trio.socket.from_stdlib_socket(side)  # ... and awaited reads
        self._side_open = True
        self._closed = False

    @property
    def running(self) -> bool:
        return self.exit_code is None

    @property
    def held(self) -> bool:
        return self._holder is not None

    @property
    def holder(self) -> int | None:
        """The number of the connection that holds the child (1, 2, ...)."""
        return None if self._holder is None else self._holder.number

    @property
    def buffered(self) -> bytes:
        """Output written while nobody held the child, not yet handed over."""
        return self._buffer.peek()[0]

    def write_output(self, data: bytes) -> None:
        """The child writes ``data`` to its terminal: into the buffer while
        nobody holds it, else to the holder's fd. Raises BlockingIOError if
        the holder lets the socket fill (a few hundred KiB) without reading."""
        self._check_open()
        if not self.running:
            raise RuntimeError(f"child {self.id} has exited")
        if self._holder is None:
            self._buffer.append(data)
            return
        view = memoryview(data)
        while view:
            # MSG_DONTWAIT: never block the trio thread, whatever the file flags.
            view = view[self._side_sock.send(view, socket.MSG_DONTWAIT) :]

    async def read_input(self, max_bytes: int = 65536) -> bytes:
        """Wait for what a client typed on its fd: at least one byte, or b""
        once the child has exited (also for a read waiting when it exits).

        Cancellation: nothing was read.
        """
        self._check_open()
        if not self._side_open:
            return b""
        try:
            return await self._side.recv(max_bytes)
        except trio.ClosedResourceError:
            return b""

    def exit(self, code: int = 0) -> None:
        """The child exits with ``code`` (negative: killed by that signal).
        Its side closes (a holder reads the rest of the output, then EOF),
        every connected client gets ChildExited, and the daemon keeps it
        until a client collects it."""
        self._check_open()
        if not self.running:
            raise RuntimeError(f"child {self.id} has exited already")
        self.exit_code = code
        self.exited_at = time.time()
        self._close_side()
        self._daemon._child_exited(self)

    def info(self, *, foreground: bool = False) -> ChildInfo:
        """What the daemon reports of this child."""
        show_fg = foreground and self.running
        return ChildInfo(
            id=self.id,
            pid=self.pid,
            name=self.name,
            argv=list(self.argv),
            cwd=self.cwd,
            tty=self.tty,
            rows=self.rows,
            cols=self.cols,
            state="running" if self.running else "exited",
            exit_code=self.exit_code,
            held=self.held,
            buffered_bytes=len(self._buffer),
            dropped_bytes=self._buffer.dropped,
            started_at=self.started_at,
            exited_at=self.exited_at,
            linger=self.linger,
            fg_pid=self.fg_pid if show_fg else None,
            fg_cwd=self.fg_cwd if show_fg else None,
            fg_argv=list(self.fg_argv) if show_fg and self.fg_argv is not None else None,
        )

    # --- for the daemon -----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"child {self.id}: its daemon has stopped")

    def _master_fd(self) -> int:
        return self._master.fileno()

    def _become_unheld(self) -> None:
        """Nobody holds the child: take what the last holder left unread."""
        self._holder = None
        self._drain_master()

    def _drain_master(self) -> None:
        while True:
            try:
                data = self._master.recv(65536, socket.MSG_DONTWAIT)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            self._buffer.append(data)

    def _take_output(self, *, keep: bool) -> tuple[bytes, int]:
        if not self.running:
            self._drain_master()
        return self._buffer.peek() if keep else self._buffer.take()

    def _close_side(self) -> None:
        if self._side_open:
            self._side_open = False
            self._side.close()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_side()
            self._master.close()


# --- connections ----------------------------------------------------------------


class _SimConnection:
    """The simulated daemon's side of one client: serves its requests in
    order; one writer task sends what the outbox holds (replies and notices,
    in the order they were queued). Owns its socket and the outbox's fds."""

    def __init__(self, daemon: SimDaemon, sock: trio.socket.SocketType, number: int) -> None:
        self.number = number
        self.held: set[int] = set()
        self.ready = False  # Welcome sent: receives notices
        self._daemon = daemon
        self._framed = FramedSocket(sock, Codec("daemon"))
        self._outbox: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self._wake_writer = trio.Event()
        self._sending = False
        self._idle = trio.Event()
        self._closed = False
        self._cancel = trio.CancelScope()

    @property
    def version(self) -> int:
        return self._framed.codec.version or PROTOCOL_VERSION

    def encode(self, msg: Message, nfds: int = 0) -> bytes:
        return self._framed.codec.send(msg, nfds)

    def enqueue(self, frame: bytes, fds: Sequence[int] = ()) -> None:
        """Queue raw bytes with dups of ``fds`` (the outbox owns the dups)."""
        if self._closed:
            return
        self._outbox.append((frame, [os.dup(fd) for fd in fds]))
        self._wake_writer.set()

    def notify(self, msg: Message) -> None:
        if self.ready:
            self.enqueue(self.encode(msg))

    async def serve(self) -> None:
        try:
            with self._cancel:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    await self._serve_requests()
                    await self._flush()
                    nursery.cancel_scope.cancel()
        finally:
            self._closed = True
            while self._outbox:
                close_fds(self._outbox.popleft()[1])
            self._daemon._connection_gone(self)
            self._framed.close()

    async def _serve_requests(self) -> None:
        try:
            while True:
                event = await self._framed.receive()
                close_fds(event.fds)  # no client message carries fds
                if not await self._daemon._handle(self, event.message):
                    return
        except ConnectionClosed:
            return
        except PeerProtocolError as exc:
            error = Error(req=None, errno=errno.EPROTO, message=f"protocol error: {exc}")
            self.enqueue(self.encode(error))

    async def wait_peer_closed(self) -> None:
        """Read and drop everything until the client closes (a hung daemon)."""
        try:
            while True:
                event = await self._framed.receive()
                close_fds(event.fds)
                self._daemon.received.append(event.message)
        except (ConnectionClosed, PeerProtocolError):
            return

    async def _writer(self) -> None:
        while True:
            while not self._outbox:
                self._idle.set()
                self._wake_writer = trio.Event()
                await self._wake_writer.wait()
            frame, fds = self._outbox.popleft()
            self._sending = True
            try:
                await self._framed.send_frame(frame, fds)
            except ConnectionClosed:
                self._cancel.cancel()  # the client is gone: so is this connection
                return
            finally:
                self._sending = False
                close_fds(fds)

    async def _flush(self) -> None:
        while self._outbox or self._sending:
            self._idle = trio.Event()
            await self._idle.wait()


@attrs.frozen
class _Answer:
    replies: list[tuple[Message, list[int]]]  # fds still owned by the children
    close: bool = False  # close the connection once they are sent
    stop: bool = False  # then stop the daemon (an accepted Shutdown)


def _error(msg: Message, err: int, message: str) -> _Answer:
    req: int | None = getattr(msg, "req", None)
    return _Answer([(Error(req=req, errno=err, message=message), [])])


def _with_version(frame: bytes, version: int) -> bytes:
    out = bytearray(frame)
    _VERSION_FIELD.pack_into(out, len(MAGIC), version)
    return bytes(out)


# --- the daemon -----------------------------------------------------------------


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


__all__ = [
    # The messages a client sends, re-exported to key a Behavior's rules.
    "Behavior",
    "Claim",
    "Collect",
    "Hello",
    "Launch",
    "ListChildren",
    "Peek",
    "Release",
    "Resize",
    "Rule",
    "Shutdown",
    "Signal",
    "SimChild",
    "SimDaemon",
]
