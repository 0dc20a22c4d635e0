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
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import trio

from multiserver import _platform
from multiserver._codec import Codec, close_fds
from multiserver._config import DaemonConfig
from multiserver._core import Answer, Reply, RequestCore
from multiserver._errors import ConnectionClosed, PeerProtocolError
from multiserver._fds import OwnedFd, close_all
from multiserver._messages import Error, Message
from multiserver._wire import FramedSocket, IntakeBudget

log = logging.getLogger("multiserver.daemon")


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

    # --- for the core ---------------------------------------------------------

    def encode(self, msg: Message, nfds: int = 0) -> bytes:
        return self._framed.codec.send(msg, nfds)

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
            while not self._outbox:
                self._wake_writer = trio.Event()
                await self._wake_writer.wait()
            out = self._outbox[0]
            try:
                with trio.move_on_after(stall) as scope:
                    # The numbers are the outbox's own dups: valid until closed below.
                    await self._framed.send_frame(out.frame, [fd.fileno() for fd in out.fds])
            except ConnectionClosed as exc:
                log.info("client %d: %s", self.id, exc)
                self.disconnect()
                return
            finally:
                close_all(out.fds)
                self._outbox.popleft()
                self._outbox_bytes -= len(out.frame)
                if out.notice:
                    self._notices -= 1
                self._space.set()
            if scope.cancelled_caught:
                log.warning("client %d: not reading for %.0f s, disconnecting", self.id, stall)
                self.disconnect()
                return

    async def flush(self) -> None:
        """Wait until every queued frame is sent (or the client is gone)."""
        while self._outbox and not self._closed.is_set():
            self._space = trio.Event()
            await self._space.wait()

    def disconnect(self) -> None:
        self._cancel.cancel()

    # --- serving ----------------------------------------------------------------

    async def serve(self) -> None:
        try:
            with self._cancel:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    await self._serve_requests()
                    await self.flush()
                    nursery.cancel_scope.cancel()
        finally:
            self._closed.set()
            self._space.set()
            while self._outbox:
                close_all(self._outbox.popleft().fds)
            self._owner.connection_gone(self)
            self._framed.close()

    async def _serve_requests(self) -> None:
        try:
            uid = _platform.peer_uid(self._framed.fileno())
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
            with trio.move_on_after(self._config.hello_timeout) as hello:
                first = await self._framed.receive()
            if hello.cancelled_caught:
                log.info("client %d: no Hello within %g s", self.id, self._config.hello_timeout)
                self._queue_error(
                    errno.ETIMEDOUT, f"no Hello within {self._config.hello_timeout:g} s"
                )
                return
            event = first
            while True:
                close_fds(event.fds)  # no client message carries fds (the codec refuses them)
                if not await self._serve_one(event.message):
                    return
                event = await self._framed.receive()
        except ConnectionClosed:
            return
        except PeerProtocolError as exc:
            log.info("client %d: protocol error: %s", self.id, exc)
            self._queue_error(errno.EPROTO, f"protocol error: {exc}")

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
