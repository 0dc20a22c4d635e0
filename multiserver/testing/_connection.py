"""The simulated daemon's side of one client connection: requests read in
order, replies and notices sent from one outbox, and the answer a request gets."""

from __future__ import annotations

import collections
import errno
import os
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from multiserver._codec import MAGIC, Codec, close_fds
from multiserver._errors import ConnectionClosed, PeerProtocolError
from multiserver._messages import PROTOCOL_VERSION, Error, Message
from multiserver._wire import FramedSocket

if TYPE_CHECKING:
    from multiserver.testing._daemon import SimDaemon

_VERSION_FIELD = struct.Struct("!H")  # the header's version, right after MAGIC


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
