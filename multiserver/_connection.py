"""The daemon's side of one client connection: serve its requests in order,
and send everything it says through its own outbox and writer task.

One connection never blocks another: requests of one client are served in
order by its own task; everything a connection sends goes through its own
writer task and outbox. A client that stops reading is disconnected once a
send makes no progress for ``stall_timeout`` seconds, or once its queued
notices pass a bound; reaping, draining and accepting go on meanwhile.
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from multiserver import _platform
from multiserver._codec import Codec, close_fds
from multiserver._errors import ConnectionClosed, PeerProtocolError
from multiserver._messages import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Children,
    Claim,
    Collect,
    Error,
    Hello,
    Launch,
    ListChildren,
    Message,
    Peek,
    Refused,
    Release,
    Resize,
    Shutdown,
    Signal,
    Welcome,
)
from multiserver._wire import FramedSocket

if TYPE_CHECKING:
    from multiserver._server import Daemon

log = logging.getLogger("multiserver.daemon")

SERVER_NAME = "multiserver-daemon/0.1"


@attrs.frozen
class _Outgoing:
    frame: bytes
    fds: list[int]  # dups owned by the outbox, closed once sent
    notice: bool


class ClientConnection:
    """The daemon's side of one client. Owns its socket and its outbox."""

    _ids = itertools.count(1)

    def __init__(self, daemon: Daemon, sock: trio.socket.SocketType) -> None:
        self.id = next(self._ids)
        self._daemon = daemon
        self._framed = FramedSocket(sock, Codec("daemon"))
        self.held: set[int] = set()
        self.ready = False  # hello done: receives notices
        # Frames waiting for the writer (the head one may be part-sent).
        self._outbox: collections.deque[_Outgoing] = collections.deque()
        self._outbox_bytes = 0
        self._notices = 0
        self._wake_writer = trio.Event()
        self._space = trio.Event()
        self._closed = trio.Event()
        self._cancel = trio.CancelScope()

    # --- sending --------------------------------------------------------------

    def _enqueue(self, msg: Message, fds: Sequence[int] = (), *, notice: bool = False) -> None:
        frame = self._framed.codec.send(msg, len(fds))
        owned = [os.dup(fd) for fd in fds]  # the child may be collected meanwhile
        self._outbox.append(_Outgoing(frame, owned, notice))
        self._outbox_bytes += len(frame)
        if notice:
            self._notices += 1
        self._wake_writer.set()

    async def send(self, msg: Message, fds: Sequence[int] = ()) -> None:
        """Queue a reply; waits while the outbox is over its high-water mark.

        Cancellation: the frame may or may not be queued.
        """
        while self._outbox_bytes > self._daemon.config.outbox_high_water:
            if self._closed.is_set():
                raise ConnectionClosed("client gone")
            self._space = trio.Event()
            await self._space.wait()
        self._enqueue(msg, fds)

    def notify(self, msg: Message) -> None:
        """Queue a pushed notice; never blocks. A client that lets notices
        pile up past the bound is disconnected."""
        if not self.ready or self._closed.is_set():
            return
        if self._notices >= self._daemon.config.max_queued_notices:
            log.warning("client %d: too many queued notices, disconnecting", self.id)
            self.disconnect()
            return
        self._enqueue(msg, notice=True)

    async def _writer(self) -> None:
        """Send the outbox in order. A frame stays at the head of the outbox
        until it is fully sent, so ``flush`` waits for it too. A peer that
        goes away or makes no progress for ``stall_timeout`` is disconnected."""
        stall = self._daemon.config.stall_timeout
        while True:
            while not self._outbox:
                self._wake_writer = trio.Event()
                await self._wake_writer.wait()
            out = self._outbox[0]
            try:
                with trio.move_on_after(stall) as scope:
                    await self._framed.send_frame(out.frame, out.fds)
            except ConnectionClosed as exc:
                log.info("client %d: %s", self.id, exc)
                self.disconnect()
                return
            finally:
                close_fds(out.fds)
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
                close_fds(self._outbox.popleft().fds)
            with trio.CancelScope(shield=True):
                await self._daemon.client_gone(self)
            self._framed.close()

    async def _serve_requests(self) -> None:
        try:
            uid = _platform.peer_uid(self._framed.fileno())
        except OSError as exc:
            log.warning("client %d: cannot read peer credentials: %s", self.id, exc)
            return
        if uid != os.getuid():
            log.warning("client %d: refused uid %d", self.id, uid)
            await self.send(
                Error(
                    req=None,
                    errno=errno.EACCES,
                    message=f"permission denied: uid {uid} is not the daemon's owner",
                )
            )
            return
        try:
            while True:
                event = await self._framed.receive()
                close_fds(event.fds)  # no client message carries fds
                try:
                    keep = await self._dispatch(event.message)
                except (ConnectionClosed, PeerProtocolError):
                    raise
                except Exception as exc:
                    # A bug must cost one request, never the daemon and the
                    # children of every other client.
                    log.exception(
                        "client %d: internal error serving %s",
                        self.id,
                        type(event.message).__name__,
                    )
                    req = getattr(event.message, "req", None)
                    await self.send(
                        Error(req=req, errno=errno.EIO, message=f"internal error: {exc}")
                    )
                    keep = req is not None
                if not keep:
                    return
        except ConnectionClosed:
            return
        except PeerProtocolError as exc:
            log.info("client %d: protocol error: %s", self.id, exc)
            await self.send(Error(req=None, errno=errno.EPROTO, message=f"protocol error: {exc}"))

    async def _dispatch(self, msg: Message) -> bool:
        """Serve one request. False: close the connection."""
        d = self._daemon
        match msg:
            case Hello():
                return await self._hello(msg)
            case Launch():
                await d.launch(self, msg)
            case Claim():
                await d.claim(self, msg)
            case Release():
                await d.release(self, msg)
            case Signal():
                await d.signal(self, msg)
            case Collect():
                await d.collect(self, msg)
            case ListChildren():
                await self.send(
                    Children(
                        req=msg.req,
                        children=[c.info(foreground=msg.foreground) for c in d.children],
                    )
                )
            case Peek():
                await d.peek(self, msg)
            case Resize():
                await d.resize(self, msg)
            case Shutdown():
                await d.shutdown(self, msg)
            case _:  # the codec admits only client messages
                raise AssertionError(msg)
        return True

    async def _hello(self, msg: Hello) -> bool:
        lo, hi = max(msg.min_version, MIN_PROTOCOL_VERSION), min(msg.max_version, PROTOCOL_VERSION)
        if lo > hi:
            await self.send(
                Refused(
                    reason=(
                        f"no common protocol version: client speaks {msg.min_version}..{msg.max_version}, "
                        f"daemon speaks {MIN_PROTOCOL_VERSION}..{PROTOCOL_VERSION}"
                    ),
                    min_version=MIN_PROTOCOL_VERSION,
                    max_version=PROTOCOL_VERSION,
                )
            )
            return False
        await self.send(
            Welcome(
                version=hi,
                instance_id=self._daemon.instance_id,
                pid=os.getpid(),
                server=SERVER_NAME,
                children=[c.info() for c in self._daemon.children] if msg.children else [],
            )
        )
        self.ready = True
        return True
