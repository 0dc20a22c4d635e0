"""Frames over a Unix stream socket, with fds, for trio: the calls
themselves are ``_sockio``'s, and this waits only when the kernel says so.

What a daemon reads is bounded (``frame_timeout``, ``IntakeBudget``): a frame
must be whole soon after its first byte, and the memory that incomplete
frames take grows with the bytes received, within one budget for all
connections; past it, a connection is not read (its bytes wait in the
kernel) until there is room again."""

from __future__ import annotations

import math
import socket
from collections.abc import Sequence

import trio

from multiserver._errors import ConnectionClosed, PeerProtocolError
from multiserver.protocol._codec import NEED_DATA, Codec, Event, ProtocolError
from multiserver.protocol._messages import Message
from multiserver.protocol._sockio import RECV_SIZE, receive_chunk, rights, send_some


class IntakeBudget:
    """Bytes of incomplete frames a daemon may hold, over all its connections.

    Each connection may hold ``free`` bytes of incomplete frames on its own
    (every ordinary request fits). A frame larger than that reserves its
    declared size from ``limit``, shared, before its body is read; the bytes
    themselves are allocated only as they arrive. A connection that finds no
    room does not read (its bytes wait in the kernel) until another gives
    its reservation back, and its frame's clock keeps running. Reserving a
    whole frame at once means two large frames can never each hold half the
    budget and wait for the other.
    """

    def __init__(self, limit: int, free: int) -> None:
        self.limit = limit
        self.free = free
        self.used = 0
        self._freed = trio.Event()

    def room(self) -> int:
        return max(0, self.limit - self.used)

    def adjust(self, delta: int) -> None:
        self.used += delta
        if delta < 0:
            self._freed.set()
            self._freed = trio.Event()

    async def wait_room(self) -> None:
        """Wait until some connection gives bytes back.

        Cancellation: nothing happened.
        """
        await self._freed.wait()


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

    def __init__(
        self,
        sock: trio.socket.SocketType,
        codec: Codec,
        *,
        frame_timeout: float | None = None,
        intake: IntakeBudget | None = None,
    ) -> None:
        self.codec = codec
        self._eof = False
        # The stdlib socket, used without trio's wrapper (which is left empty).
        self._raw = socket.socket(fileno=sock.detach())
        self._raw.setblocking(False)
        self._unyielded = 0
        self._frame_timeout = frame_timeout
        self._intake = intake
        self._charged = 0  # bytes reserved from the intake budget
        # When the first byte of the incomplete frame in the codec arrived
        # (trio time); None while the codec holds no partial frame.
        self._partial_since: float | None = None
        # Bytes of the frame being sent that went out (``send_frame``).
        self.partly_sent = 0

    async def _fair(self) -> None:
        self._unyielded += 1
        if self._unyielded >= self.FAIR_EVERY:
            self._unyielded = 0
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _receive_chunk(self, size: int) -> tuple[bytes, list[int], bool] | None:
        """One non-blocking ``recvmsg``, or None if nothing is there."""
        try:
            return receive_chunk(self._raw, size)
        except BlockingIOError:
            return None

    def _read_size(self) -> int:
        """How much one read may take (0: none, until the budget has room).
        A frame larger than the connection's own allowance first reserves
        its declared size."""
        if self._intake is None:
            return RECV_SIZE
        allowed = self._intake.free + self._charged - self.codec.buffered
        if allowed <= 0:
            need = max(0, (self.codec.frame_size or 0) - self._intake.free) - self._charged
            if 0 < need <= self._intake.room():
                self._intake.adjust(need)
                self._charged += need
                allowed += need
        return max(0, min(RECV_SIZE, allowed))

    def _account(self) -> None:
        """After a frame was parsed: give back what it reserved (bytes of the
        next frame already read stay charged), and start the clock of the
        next frame if its first bytes are in."""
        buffered = self.codec.buffered
        if self._intake is not None:
            charge = max(0, buffered - self._intake.free)
            self._intake.adjust(charge - self._charged)
            self._charged = charge
        self._partial_since = trio.current_time() if buffered else None

    async def _wait_for_data(self) -> None:
        """Wait until the socket is readable and the budget has room; a peer
        that leaves a frame incomplete past ``frame_timeout`` is dropped."""
        deadline = math.inf
        if self._frame_timeout is not None and self._partial_since is not None:
            deadline = self._partial_since + self._frame_timeout
        with trio.move_on_at(deadline) as scope:
            while self._read_size() == 0:
                assert self._intake is not None
                await self._intake.wait_room()
            await trio.lowlevel.wait_readable(self._raw)
        if scope.cancelled_caught:
            self.codec.close()
            raise PeerProtocolError(
                f"a frame was not completed within {self._frame_timeout:g} s of its first byte"
            )

    async def receive(self) -> Event:
        """The next event. Raises ConnectionClosed on EOF, PeerProtocolError
        (after closing every fd of the bad frame) on a protocol error or a
        frame left incomplete past ``frame_timeout``.

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
                self._account()
                await self._fair()
                return event
            if self._eof:
                raise ConnectionClosed("connection closed by peer")
            size = self._read_size()
            chunk = self._receive_chunk(size) if size else None
            if chunk is None:
                self._unyielded = 0
                await self._wait_for_data()
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
            if self._partial_since is None:
                self._partial_since = trio.current_time()

    async def send_frame(self, frame: bytes, fds: Sequence[int] = ()) -> None:
        """Send a whole encoded frame; the fds (still the caller's) go with
        its first byte, the rest of a partial send without ancillary data.

        Cancellation: the frame may be partly sent, which breaks the framing:
        close the connection, or send the rest (``partly_sent`` says how
        much went, its fds with the first byte).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        view = memoryview(frame)
        anc = rights(fds)
        self.partly_sent = 0
        while self.partly_sent < len(view):
            try:
                n = send_some(self._raw, view[self.partly_sent :], anc)
            except BlockingIOError:
                self._unyielded = 0
                await trio.lowlevel.wait_writable(self._raw)
                continue
            anc = []
            self.partly_sent += n
        self.partly_sent = 0
        await self._fair()

    async def send(self, msg: Message, fds: Sequence[int] = ()) -> None:
        """Encode and send one message with its fds (which stay the caller's)."""
        await self.send_frame(self.codec.send(msg, len(fds)), fds)

    def close(self) -> None:
        self.codec.close()
        if self._intake is not None:
            self._intake.adjust(-self._charged)
            self._charged = 0
        if self._raw.fileno() >= 0:
            trio.lowlevel.notify_closing(self._raw)
            self._raw.close()

    def fileno(self) -> int:
        """The socket's fd (-1 once closed); still owned here."""
        return self._raw.fileno()

    def unread(self) -> bytes:
        """The bytes of an incomplete request read so far (an upgrade
        carries them to the new code, which reads the rest)."""
        return self.codec.pending_bytes()

    def carry_in(self, unread: bytes) -> None:
        """Start with ``unread``: the incomplete request the daemon before
        an upgrade had read (its frame's clock starts again now)."""
        if unread:
            self.codec.receive_data(unread)
            self._partial_since = trio.current_time()
