"""The daemon's side of one client connection: read its requests in order,
have the request core decide each one, and send everything through one
outbox and one writer task.

The same class serves the real daemon and the simulated one of
``multiserver.testing``; the simulator only adds an ``Intercept`` (injected
delays, hangs, broken frames) around the core's answers.

One connection never blocks another: requests of one client are served in
order by its own task; everything a connection sends goes through its own
writer task and outbox. A client that stops reading is disconnected once a
send makes no progress for ``stall_timeout`` seconds, or once its queued
notices pass a bound; reaping, draining and accepting go on meanwhile.

fd ownership: the outbox owns the fds of every queued frame (``OwnedFd``,
duplicated by the core in the step that decided to send them) and closes each
once its frame is sent or dropped.

Events (``Watch``): a watcher's writer reads them from the core's
``EventLog`` when it has sent everything else, ``EVENT_BATCH`` at a time
(one ``sendmsg``), so a watcher holds no queue of its own in the daemon:
one that reads slowly falls behind in the log (and is told what it
missed), one that stops reading is disconnected by the stall rule above.
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import trio

from multiserver._errors import ConnectionClosed, PeerProtocolError
from multiserver.daemon._core import Answer, Reply, RequestCore
from multiserver.daemon._fds import OwnedFd, close_all
from multiserver.daemon._snapshot import BlobWriter, Outgoing, PeerState, blob as snapshot_blob
from multiserver.protocol._codec import Codec, Event, close_fds
from multiserver.protocol._messages import Error, Message
from multiserver.protocol._wire import FramedSocket, IntakeBudget
from multiserver.settings._config import DaemonConfig
from multiserver.system import _peer

log = logging.getLogger("multiserver.daemon")

# Events a watcher's writer reads from the log at once: one write of a
# few KiB, then the outbox is empty again for replies.
EVENT_BATCH = 64


class Owner(Protocol):
    """The daemon a connection belongs to (real or simulated)."""

    @property
    def config(self) -> DaemonConfig: ...

    @property
    def core(self) -> RequestCore[Any]: ...

    @property
    def intake(self) -> IntakeBudget: ...

    def connection_gone(self, conn: ClientConnection) -> None: ...

    async def end_children(self) -> None:
        """An accepted Shutdown: end every child before the Ok goes out."""
        ...

    def stop(self) -> None: ...

    async def upgrade(self, conn: ClientConnection, req: int) -> Answer:
        """An Upgrade: the answer if the daemon goes on with its code (the
        new code answers otherwise, on this connection)."""
        ...


class Intercept(Protocol):
    """Misbehaviour around the core (the simulator's ``Behavior``)."""

    async def before(self, conn: ClientConnection, msg: Message) -> bool:
        """Called for each message read; False: close without answering."""
        ...

    def after(self, conn: ClientConnection, msg: Message, answer: Answer) -> Answer:
        """May alter the answer's frames (closing the fds it drops)."""
        ...


@attrs.frozen
class _Outgoing:
    frame: bytes
    fds: list[OwnedFd]  # the outbox's own, closed once sent or dropped
    notice: bool


class ClientConnection:
    """The daemon's side of one client. Owns its socket and its outbox."""

    _ids = itertools.count(1)

    def __init__(
        self,
        owner: Owner,
        sock: trio.socket.SocketType,
        *,
        number: int | None = None,
        intercept: Intercept | None = None,
    ) -> None:
        self.id = next(self._ids) if number is None else number
        self._owner = owner
        self._config = owner.config
        self._intercept = intercept
        self._framed = FramedSocket(
            sock, Codec("daemon"), frame_timeout=self._config.frame_timeout, intake=owner.intake
        )
        # Frames waiting for the writer (the head one may be part-sent).
        self._outbox: collections.deque[_Outgoing] = collections.deque()
        self._outbox_bytes = 0
        self._notices = 0
        self._wake_writer = trio.Event()
        self._space = trio.Event()
        self._closed = trio.Event()
        self._cancel = trio.CancelScope()
        # Pausing for an upgrade (``_upgrade.py``): the request task parks
        # before it reads the next request, the writer between frames or
        # in the middle of one (what is left of it is kept).
        self._pausing = False
        self._reading: trio.CancelScope | None = None  # while it waits for a request
        self._sending: trio.CancelScope | None = None  # while a frame goes out
        self._reader_parked = self._writer_parked = False
        self._finishing = False  # no more requests: sending what is queued, then closing
        self._quiet = trio.Event()
        self._resumed = trio.Event()
        # The Upgrade this connection waits on (its answer comes from the new code).
        self.upgrade_req: int | None = None

    # --- for the core ---------------------------------------------------------

    def encode(self, msg: Message, nfds: int = 0) -> bytes:
        return self._framed.codec.send(msg, nfds)

    def events_ready(self) -> None:
        """Events were recorded: the writer reads them once it has sent
        what is queued (``_take_events``)."""
        self._wake_writer.set()

    def notify(self, msg: Message) -> None:
        """Queue a pushed notice; never blocks. A client that lets notices
        pile up past the bound is disconnected."""
        if self._closed.is_set():
            return
        if self._notices >= self._config.max_queued_notices:
            log.warning("client %d: too many queued notices, disconnecting", self.id)
            self.disconnect()
            return
        self._queue(Reply(msg, self.encode(msg)), notice=True)

    @property
    def version(self) -> int | None:
        """The negotiated protocol version (None before the handshake)."""
        return self._framed.codec.version

    # --- sending --------------------------------------------------------------

    def _queue(self, reply: Reply, *, notice: bool = False) -> None:
        if self._closed.is_set():
            close_all(reply.fds)
            return
        self._outbox.append(_Outgoing(reply.frame, reply.fds, notice))
        self._outbox_bytes += len(reply.frame)
        if notice:
            self._notices += 1
        self._wake_writer.set()

    def _queue_answer(self, answer: Answer) -> None:
        for reply in answer.replies:
            self._queue(reply)

    async def _wait_room(self) -> None:
        """Wait while the outbox is over its high-water mark.

        Cancellation: nothing happened.
        """
        while self._outbox_bytes > self._config.outbox_high_water:
            if self._closed.is_set():
                raise ConnectionClosed("client gone")
            self._space = trio.Event()
            await self._space.wait()

    async def _writer(self) -> None:
        """Send the outbox in order. A frame stays at the head of the outbox
        until it is fully sent, so ``flush`` waits for it too. A peer that
        goes away or makes no progress for ``stall_timeout`` is disconnected."""
        stall = self._config.stall_timeout
        while True:
            while True:
                if self._pausing and not self._finishing:
                    self._park(writer=True)
                elif self._outbox or self._take_events():
                    break
                self._wake_writer = trio.Event()
                await self._wake_writer.wait()
            out = self._outbox[0]
            self._sending = sending = trio.CancelScope()
            try:
                with trio.move_on_after(stall) as scope, sending:
                    # The numbers are the outbox's own dups: valid until closed.
                    await self._framed.send_frame(out.frame, [fd.fileno() for fd in out.fds])
            except ConnectionClosed as exc:
                log.info("client %d: %s", self.id, exc)
                self.disconnect()
                self._drop_head()
                return
            finally:
                self._sending = None
            if sending.cancelled_caught:
                self._keep_rest_of_head()  # paused in the middle of it
                continue
            self._drop_head()
            if scope.cancelled_caught:
                log.warning("client %d: not reading for %.0f s, disconnecting", self.id, stall)
                self.disconnect()
                return

    def _take_events(self) -> bool:
        """Queue the next events of a watcher (one outgoing entry of up to
        ``EVENT_BATCH`` frames); False if there are none. None once the
        connection is closing."""
        if self._finishing or self._closed.is_set():
            return False
        events = self._owner.core.events.take(self, EVENT_BATCH)
        if not events:
            return False
        frame = b"".join(self.encode(event) for event in events)
        self._queue(Reply(events[-1], frame), notice=True)
        return True

    def _drop_head(self) -> None:
        out = self._outbox.popleft()
        close_all(out.fds)
        self._outbox_bytes -= len(out.frame)
        if out.notice:
            self._notices -= 1
        self._space.set()

    def _keep_rest_of_head(self) -> None:
        """The head frame was cut short by a pause: keep what is left of it
        (its fds went with its first byte)."""
        sent = self._framed.partly_sent
        if sent:
            out = self._outbox[0]
            close_all(out.fds)
            self._outbox[0] = _Outgoing(out.frame[sent:], [], out.notice)
            self._outbox_bytes -= sent
            self._framed.partly_sent = 0

    async def flush(self) -> None:
        """Wait until every queued frame is sent (or the client is gone)."""
        while self._outbox and not self._closed.is_set():
            self._space = trio.Event()
            await self._space.wait()

    def disconnect(self) -> None:
        self._cancel.cancel()

    # --- pausing for an upgrade -------------------------------------------------

    def pause(self) -> None:
        """Stop reading requests and sending frames at the next safe point:
        the request task before it reads the next request (bytes of one
        already read stay in the codec), the writer between frames or in
        the middle of one. ``wait_quiet`` waits for both."""
        self._pausing = True
        self._resumed = trio.Event()
        if self._reading is not None:
            self._reading.cancel()
        if self._sending is not None:
            self._sending.cancel()
        self._wake_writer.set()

    def resume(self) -> None:
        """Serve again (the upgrade did not happen)."""
        self._pausing = False
        self._reader_parked = self._writer_parked = False
        self._quiet = trio.Event()
        self._resumed.set()
        self._wake_writer.set()

    async def wait_quiet(self) -> None:
        """Wait until paused (or closed).

        Cancellation: nothing happened.
        """
        await self._quiet.wait()

    @property
    def quiet(self) -> bool:
        return self._quiet.is_set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def queue(self, reply: Reply) -> None:
        """Queue a frame that answers no request of this connection (the
        new code's answer to the Upgrade)."""
        self._queue(reply)

    @classmethod
    def number_from(cls, first: int) -> None:
        """Number new connections from ``first`` (after an upgrade: the
        numbers of those taken over are not given again)."""
        cls._ids = itertools.count(first)

    def _park(self, *, writer: bool = False, reader: bool = False) -> None:
        self._writer_parked |= writer
        self._reader_parked |= reader
        if self._writer_parked and (self._reader_parked or self.upgrade_req is not None):
            self._quiet.set()

    async def _next_request(self) -> Event:
        """The next request, unless a pause parks this first.

        Cancellation: what was read stays in the codec.
        """
        while True:
            if self._pausing:
                self._park(reader=True)
                await self._resumed.wait()
                continue
            self._reading = reading = trio.CancelScope()
            try:
                with reading:
                    return await self._framed.receive()
            finally:
                self._reading = None

    def export(self, blobs: BlobWriter) -> PeerState:
        """What crosses an upgrade (paused; synchronous). The connection
        keeps its fds until the exec."""
        version, held, watch, shares = self._owner.core.state_of(self)
        outbox = [
            Outgoing(blobs.add(out.frame), [fd.fileno() for fd in out.fds], out.notice)
            for out in self._outbox
        ]
        return PeerState(
            fd=self._framed.fileno(),
            number=self.id,
            version=version,
            held=held,
            unread=blobs.add(self._framed.unread()),
            outbox=outbox,
            upgrade_req=self.upgrade_req,
            watch=watch,
            shares=shares,
        )

    @classmethod
    def adopt(cls, owner: Owner, state: PeerState, area: memoryview) -> ClientConnection:
        """A connection of the daemon before an upgrade, with its socket,
        its version, its unread bytes and its queued frames (their fds),
        taken over. The caller tells the core (``RequestCore.adopt``).
        Raises SnapshotError if a blob is not there."""
        unread = snapshot_blob(area, state.unread)
        frames = [snapshot_blob(area, out.frame) for out in state.outbox]
        os.set_inheritable(state.fd, False)
        conn = cls(owner, trio.socket.from_stdlib_socket(socket.socket(fileno=state.fd)))
        conn.id = state.number
        if state.version is not None:
            conn._framed.codec.set_version(state.version)
        conn._framed.carry_in(unread)
        for out, frame in zip(state.outbox, frames, strict=True):
            for fd in out.fds:
                os.set_inheritable(fd, False)
            conn._outbox.append(_Outgoing(frame, [OwnedFd(fd) for fd in out.fds], out.notice))
            conn._outbox_bytes += len(frame)
            conn._notices += out.notice
        conn.upgrade_req = state.upgrade_req
        return conn

    # --- serving ----------------------------------------------------------------

    async def serve(self) -> None:
        try:
            with self._cancel:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    await self._serve_requests()
                    # Closing: what is queued goes out, even during a pause.
                    self._finishing = True
                    self._wake_writer.set()
                    await self.flush()
                    nursery.cancel_scope.cancel()
        finally:
            self._closed.set()
            self._quiet.set()
            self._space.set()
            while self._outbox:
                close_all(self._outbox.popleft().fds)
            self._owner.connection_gone(self)
            self._framed.close()

    async def _serve_requests(self) -> None:
        try:
            uid = _peer.peer_uid(self._framed.fileno())
        except OSError as exc:
            log.warning("client %d: cannot read peer credentials: %s", self.id, exc)
            return
        if uid != os.getuid():
            log.warning("client %d: refused uid %d", self.id, uid)
            self._queue_error(
                errno.EACCES, f"permission denied: uid {uid} is not the daemon's owner"
            )
            return
        try:
            if self.version is not None:  # past its Hello before an upgrade
                await self._serve_all(await self._next_request())
                return
            with trio.move_on_after(self._config.hello_timeout) as hello:
                first = await self._next_request()
            if hello.cancelled_caught:
                log.info("client %d: no Hello within %g s", self.id, self._config.hello_timeout)
                self._queue_error(
                    errno.ETIMEDOUT, f"no Hello within {self._config.hello_timeout:g} s"
                )
                return
            await self._serve_all(first)
        except ConnectionClosed:
            return
        except PeerProtocolError as exc:
            log.info("client %d: protocol error: %s", self.id, exc)
            self._queue_error(errno.EPROTO, f"protocol error: {exc}")

    async def _serve_all(self, event: Event) -> None:
        while True:
            close_fds(event.fds)  # no client message carries fds (the codec refuses them)
            if not await self._serve_one(event.message):
                return
            event = await self._next_request()

    def _queue_error(self, err: int, text: str) -> None:
        """An Error with no ``req``: the connection closes after it."""
        msg = Error(req=None, errno=err, message=text)
        self._queue(Reply(msg, self.encode(msg)))

    async def _serve_one(self, msg: Message) -> bool:
        """Serve one request. False: close the connection."""
        if self._intercept is not None and not await self._intercept.before(self, msg):
            return False
        await self._wait_room()
        # From the core's decision to the queued frames: no checkpoint.
        core = self._owner.core
        try:
            answer = core.handle(self, msg)
        except Exception as exc:
            # A bug must cost one request, never the daemon and the
            # children of every other client.
            log.exception("client %d: internal error serving %s", self.id, type(msg).__name__)
            req = getattr(msg, "req", None)
            answer = core.error(self, req, errno.EIO, f"internal error: {exc}")
            answer.close = req is None
        if self._intercept is not None:
            answer = self._intercept.after(self, msg, answer)
        if answer.shutdown:
            await self._owner.end_children()
        if answer.upgrade:
            try:
                answer = await self._owner.upgrade(self, getattr(msg, "req", 0))
            finally:
                core.upgrade_ended()  # reached only if this code goes on
        self._queue_answer(answer)
        if answer.shutdown:
            await self.flush()
            self._owner.stop()
        return not answer.close

    async def read_until_closed(self, seen: Callable[[Message], None]) -> None:
        """Read and drop everything until the client closes (a wedged
        daemon, for the simulator), calling ``seen`` for each message.

        Cancellation: what was read was dropped anyway.
        """
        try:
            while True:
                event = await self._framed.receive()
                close_fds(event.fds)
                seen(event.message)
        except (ConnectionClosed, PeerProtocolError):
            return
