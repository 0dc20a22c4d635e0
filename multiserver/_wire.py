"""Frames over a Unix stream socket, with fds: the only place that calls
``sendmsg`` / ``recvmsg``. Every read is a ``recvmsg`` with room for the
largest batch of fds, so the kernel never drops fds silently; received fds are
close-on-exec."""

from __future__ import annotations

import array
import os
import socket
from collections.abc import Sequence

import trio

from multiserver._codec import MAX_FDS_PER_FRAME, NEED_DATA, Codec, Event, ProtocolError
from multiserver._errors import ConnectionClosed, PeerProtocolError
from multiserver._messages import Message

RECV_SIZE = 256 * 1024
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS_PER_FRAME * array.array("i").itemsize)
_CLOEXEC_FLAG = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


def _unpack_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            usable = len(data) - (len(data) % arr.itemsize)
            arr.frombytes(data[:usable])
            fds.extend(arr)
    if not _CLOEXEC_FLAG:  # macOS: no MSG_CMSG_CLOEXEC
        for fd in fds:
            os.set_inheritable(fd, False)
    return fds


class FramedSocket:
    """A socket plus its codec. One task reads, one task writes (or a lock).
    It takes the socket's fd over from trio's wrapper (one fd per
    connection, owned here, closed by ``close``).

    Reads and writes go straight to the non-blocking stdlib socket and
    wait only when the kernel says so: a burst of frames (a claim of 200
    children) costs syscalls, not a trip through the scheduler per frame.
    Every ``FAIR_EVERY`` frames that needed no wait, a schedule point lets
    other tasks run, so a flooding peer cannot monopolize the event loop.
    """

    FAIR_EVERY = 32

    def __init__(self, sock: trio.socket.SocketType, codec: Codec) -> None:
        self.codec = codec
        self._eof = False
        # The stdlib socket, used without trio's wrapper (which is left empty).
        self._raw = socket.socket(fileno=sock.detach())
        self._raw.setblocking(False)
        self._unyielded = 0

    async def _fair(self) -> None:
        self._unyielded += 1
        if self._unyielded >= self.FAIR_EVERY:
            self._unyielded = 0
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _receive_chunk(self) -> tuple[bytes, list[int], bool] | None:
        """One non-blocking ``recvmsg``, or None if nothing is there."""
        try:
            data, ancdata, flags, _ = self._raw.recvmsg(RECV_SIZE, _ANCILLARY, _CLOEXEC_FLAG)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise ConnectionClosed(f"connection broken: {exc.strerror or exc}") from exc
        return data, _unpack_fds(ancdata), bool(flags & socket.MSG_CTRUNC)

    async def receive(self) -> Event:
        """The next event. Raises ConnectionClosed on EOF, PeerProtocolError
        (after closing every fd of the bad frame) on a protocol error.

        Cancellation: nothing is lost; bytes and fds already read stay in the
        codec for the next call.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                event = self.codec.next_event()
            except ProtocolError as exc:
                raise PeerProtocolError(str(exc)) from exc
            if event is not NEED_DATA:
                assert isinstance(event, Event)
                await self._fair()
                return event
            if self._eof:
                raise ConnectionClosed("connection closed by peer")
            chunk = self._receive_chunk()
            if chunk is None:
                self._unyielded = 0
                await trio.lowlevel.wait_readable(self._raw)
                continue
            data, fds, truncated = chunk
            if not data and not fds:
                self._eof = True
                if self.codec.buffered:
                    self.codec.close()
                    raise ConnectionClosed("connection closed in the middle of a frame")
                raise ConnectionClosed("connection closed by peer")
            try:
                self.codec.receive_data(data, fds, truncated=truncated)
            except ProtocolError as exc:
                raise PeerProtocolError(str(exc)) from exc

    async def send_frame(self, frame: bytes, fds: Sequence[int] = ()) -> None:
        """Send a whole encoded frame; the fds (still the caller's) go with
        its first byte, the rest of a partial send without ancillary data.

        Cancellation: the frame may be partly sent, which breaks the framing:
        close the connection.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        view = memoryview(frame)
        anc = (
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        )
        sent = 0
        while sent < len(view):
            try:
                if anc:
                    n = self._raw.sendmsg([view[sent:]], anc)
                    anc = []
                else:
                    n = self._raw.send(view[sent:])
            except BlockingIOError:
                self._unyielded = 0
                await trio.lowlevel.wait_writable(self._raw)
                continue
            except OSError as exc:
                raise ConnectionClosed(f"connection broken: {exc.strerror or exc}") from exc
            sent += n
        await self._fair()

    async def send(self, msg: Message, fds: Sequence[int] = ()) -> None:
        """Encode and send one message with its fds (which stay the caller's)."""
        await self.send_frame(self.codec.send(msg, len(fds)), fds)

    def close(self) -> None:
        self.codec.close()
        if self._raw.fileno() >= 0:
            trio.lowlevel.notify_closing(self._raw)
            self._raw.close()

    def fileno(self) -> int:
        """The socket's fd (-1 once closed); still owned here."""
        return self._raw.fileno()


__all__ = ["FramedSocket"]
