"""The sans-IO codec of the multiserver protocol: its frames.

It never touches a socket and imports neither trio nor socket: the I/O layer
feeds it what ``recvmsg`` returned (``receive_data(data, fds)``), asks for
parsed events (``next_event()``) and asks it to encode messages (``send``),
then sends the bytes with the fds itself. See docs/protocol.md.

The frames know nothing of what the bodies hold: a ``Family`` names the
message classes and the body codec that reads and writes them
(``_codec.MESSAGES``), so that this module imports neither.

Frame layout (network byte order)::

    offset size field
    0      2    magic b"MS"
    2      2    protocol version
    4      2    message type
    6      2    number of fds that travel with the frame (SCM_RIGHTS, sent
                with the frame's first byte)
    8      4    length of the JSON body (UTF-8 object)
    12     4    length of the blob (raw bytes of the message's BLOB field)
    16     ...  JSON body, then blob

Rules, all enforced here:

- A frame's total size is at most ``max_frame``.
- The first frame a daemon receives is ``Hello``; the first a client receives
  is ``Welcome``, ``Refused`` or ``Error``. Those handshake frames are read
  whatever their header version; once a version is negotiated every frame must
  carry it, and ``Hello``, ``Welcome`` and ``Refused`` may not come again.
- A body is a UTF-8 JSON object (RFC 8259: no NaN or Infinity, no lone
  surrogates in strings) whose fields match the message exactly.
- An OS string (``OsStr``: argv, cwd, the environment) whose bytes are not
  UTF-8 travels as ``{"b": base64}`` from version 5 (and an environment with
  such a name as a list of pairs); an older version cannot carry it, and
  ``send`` refuses it (``Unrepresentable``) rather than write a frame the
  peer cannot parse.
- Each side accepts only the messages the other side may send, and only the
  message types that may carry fds carry them (at most ``MAX_FDS`` each, never
  more than 253).
- fds belong to the frame whose first byte arrived in the same read. An fd
  that no frame claims, a frame that lacks its fds, or a read whose ancillary
  data was truncated is a protocol error. A daemon's codec refuses every fd
  as it arrives: no client message carries any.
- On any protocol error every fd the codec holds is closed, the codec is broken
  for good, and the error says what went wrong in one line.
"""

from __future__ import annotations

import collections
import os
import struct

from multiserver.protocol._proto import claimed_problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, Literal

    from multiserver.protocol._messages import Claimed, Message

    Role = Literal["client", "daemon"]

MAGIC = b"MS"
HEADER = struct.Struct("!2sHHHII")
HEADER_SIZE = HEADER.size
MAX_FRAME = 16 * 1024 * 1024
MAX_FDS_PER_FRAME = 253
# fds queued but not yet claimed by a parsed frame; more is hostile.
MAX_QUEUED_FDS = 4 * MAX_FDS_PER_FRAME

# The type codes the framing itself needs to know (``_messages`` states each).
HELLO, WELCOME, REFUSED, CLAIMED, ERROR = 1, 2, 3, 31, 38


class ProtocolError(Exception):
    """The peer broke the protocol. The message is one line for a human."""


class FrameTooLarge(ValueError):
    """``Codec.send``: the encoded frame exceeds the maximum; nothing was sent."""


class Unrepresentable(ValueError):
    """``Codec.send``: the message holds an OS string whose bytes are not
    UTF-8, and the negotiated version is older than 5; nothing was sent."""


class Family:
    """The message classes one side holds, and the body codec that reads
    and writes them: ``types`` (type code -> class), ``client`` (the codes a
    client may send), ``max_fds`` (code -> how many fds it may carry),
    ``encode_body(msg, version) -> (body, blob)`` (raises Unrepresentable)
    and ``decode_body(cls, body, blob) -> msg`` (raises ProtocolError)."""

    __slots__ = ("client", "decode_body", "encode_body", "max_fds", "types")

    def __init__(
        self,
        types: dict[int, type[Any]],
        client: frozenset[int],
        max_fds: dict[int, int],
        encode_body: Callable[[Any, int], tuple[bytes, bytes]],
        decode_body: Callable[[type[Any], bytes, bytes], Any],
    ) -> None:
        self.types = types
        self.client = client
        self.max_fds = max_fds
        self.encode_body = encode_body
        self.decode_body = decode_body


class Event:
    """A parsed message and the fds that travelled with it (now the caller's)."""

    __slots__ = ("fds", "message")

    def __init__(self, message: Message, fds: tuple[int, ...] = ()) -> None:
        self.message = message
        self.fds = fds

    def __repr__(self) -> str:
        return f"Event(message={self.message!r}, fds={self.fds!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not Event:
            return NotImplemented
        return (self.message, self.fds) == (other.message, other.fds)

    __hash__ = None  # type: ignore[assignment]


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


def close_fds(fds: Sequence[int]) -> None:
    """Close fds the caller owns, ignoring ones already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def encode_frame(family: Family, msg: Message, version: int, nfds: int = 0) -> bytes:
    body, blob = family.encode_body(msg, version)
    return HEADER.pack(MAGIC, version, msg.TYPE, nfds, len(body), len(blob)) + body + blob


# --- the codec ------------------------------------------------------------------


class _FdBatch:
    __slots__ = ("end", "fds", "start")

    def __init__(self, start: int, end: int, fds: collections.deque[int]) -> None:
        self.start = start  # stream offset of the first byte read with these fds
        self.end = end
        self.fds = fds


class Codec:
    """One side of one connection. Not thread-safe; owns the fds it queues."""

    def __init__(self, role: Role, family: Family, *, max_frame: int = MAX_FRAME) -> None:
        self._role: Role = role
        self._family = family
        client = family.client
        daemon = frozenset(family.types) - client
        self._accepts = client if role == "daemon" else daemon
        self._sends = daemon if role == "daemon" else client
        self._max_frame = max_frame
        # No message a client sends carries fds: a daemon's codec refuses
        # any at once, rather than queue them for a frame that may never
        # complete (a peer could pin a thousand of the daemon's fds so).
        self._max_queued_fds = (
            MAX_QUEUED_FDS if any(family.max_fds.get(t, 0) for t in self._accepts) else 0
        )
        self._buf = bytearray()
        self._offset = 0  # stream offset of self._buf[0]
        self._batches: collections.deque[_FdBatch] = collections.deque()
        self._received = 0  # stream offset of the end of what was received
        self._version: int | None = None
        self._broken: ProtocolError | None = None

    @property
    def version(self) -> int | None:
        """The negotiated version, or None before the handshake."""
        return self._version

    def set_version(self, version: int) -> None:
        self._version = version

    @property
    def queued_fds(self) -> int:
        return sum(len(b.fds) for b in self._batches)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def pending_bytes(self) -> bytes:
        """The bytes received and not yet parsed (an incomplete frame)."""
        return bytes(self._buf)

    @property
    def frame_size(self) -> int | None:
        """The size its header declares for the frame at the head of the
        buffer (None until the header is in)."""
        if len(self._buf) < HEADER_SIZE:
            return None
        *_, body_len, blob_len = HEADER.unpack_from(self._buf)
        return int(HEADER_SIZE + body_len + blob_len)

    def _fail(self, message: str, extra_fds: Sequence[int] = ()) -> ProtocolError:
        close_fds(extra_fds)
        self.close()
        self._broken = ProtocolError(message)
        return self._broken

    def close(self) -> None:
        """Close every fd still queued and let go of the bytes of an
        incomplete frame (up to 16 MiB of a peer that stalled); the codec
        reads nothing more. Safe to call more than once."""
        while self._batches:
            close_fds(self._batches.popleft().fds)
        if self._buf:
            self._offset += len(self._buf)
            self._buf = bytearray()
        if self._broken is None:
            self._broken = ProtocolError("the connection is closed")

    def receive_data(
        self, data: bytes, fds: Sequence[int] = (), *, truncated: bool = False
    ) -> None:
        """Feed what one read returned. The codec owns ``fds`` from here on.

        ``truncated`` is MSG_CTRUNC: the kernel dropped fds, a protocol error.
        Raises ProtocolError (after closing every fd it holds).
        """
        if self._broken is not None:
            close_fds(fds)
            raise self._broken
        start = self._received
        self._received += len(data)
        if fds:
            self._batches.append(_FdBatch(start, self._received, collections.deque(fds)))
        if truncated:
            raise self._fail("ancillary data truncated (MSG_CTRUNC): fds were lost")
        if fds and not data:
            raise self._fail("fds arrived without data")
        if fds and not self._max_queued_fds:
            raise self._fail(
                f"{len(fds)} fds arrived; no message a {self._peer_role()} sends carries fds"
            )
        if self.queued_fds > self._max_queued_fds:
            raise self._fail(f"too many fds queued ({self.queued_fds})")
        self._buf += data

    def next_event(self) -> Event | _NeedData:
        """The next complete message, or NEED_DATA. Raises ProtocolError."""
        if self._broken is not None:
            raise self._broken
        frame_start = self._offset
        self._check_orphan_fds(frame_start)
        if len(self._buf) < HEADER_SIZE:
            if self._buf and self._buf[: len(MAGIC)] != MAGIC[: len(self._buf)]:
                raise self._fail("bad magic: not a multiserver frame")
            return NEED_DATA
        magic, version, mtype, nfds, body_len, blob_len = HEADER.unpack_from(self._buf)
        if magic != MAGIC:
            raise self._fail("bad magic: not a multiserver frame")
        cls = self._family.types.get(mtype)
        if cls is None:
            raise self._fail(f"unknown message type {mtype}")
        if mtype not in self._accepts:
            raise self._fail(f"{cls.__name__} may not be sent by a {self._peer_role()}")
        self._check_version(mtype, version)
        total = HEADER_SIZE + body_len + blob_len
        if total > self._max_frame:
            raise self._fail(f"frame of {total} bytes exceeds the maximum of {self._max_frame}")
        if nfds > min(self._family.max_fds.get(mtype, 0), MAX_FDS_PER_FRAME):
            raise self._fail(f"{cls.__name__} may not carry {nfds} fds")
        if nfds > self._available_fds(frame_start):
            raise self._fail(f"{cls.__name__} announces {nfds} fds, fewer arrived")
        if len(self._buf) < total:
            return NEED_DATA
        fds = self._take_fds(frame_start, nfds)
        body = bytes(self._buf[HEADER_SIZE : HEADER_SIZE + body_len])
        blob = bytes(self._buf[HEADER_SIZE + body_len : total])
        del self._buf[:total]
        self._offset += total
        try:
            msg = self._family.decode_body(cls, body, blob)
        except ProtocolError as exc:
            raise self._fail(str(exc), fds) from None
        problem = _problem(msg, len(fds))
        if problem is not None:
            raise self._fail(problem, fds)
        self._after_handshake(msg)
        self._check_orphan_fds(self._offset, fds)
        return Event(msg, tuple(fds))

    def send(self, msg: Message, nfds: int = 0) -> bytes:
        """Encode ``msg`` into a frame; the caller sends ``nfds`` fds with its
        first byte. Raises FrameTooLarge, or Unrepresentable for what the
        negotiated version cannot carry."""
        mtype = msg.TYPE
        if self._family.types.get(mtype) is not type(msg) or mtype not in self._sends:
            raise ValueError(f"a {self._role} may not send {type(msg).__name__}")
        if nfds > min(self._family.max_fds.get(mtype, 0), MAX_FDS_PER_FRAME):
            raise ValueError(f"{type(msg).__name__} may not carry {nfds} fds")
        problem = _problem(msg, nfds)
        if problem is not None:
            raise ValueError(problem)
        if mtype == WELCOME:
            version = msg.version  # type: ignore[union-attr]
        elif mtype in (REFUSED, HELLO):
            version = msg.max_version  # type: ignore[union-attr]
        else:
            version = self._version or 0
        frame = encode_frame(self._family, msg, version, nfds)
        if len(frame) > self._max_frame:
            raise FrameTooLarge(
                f"{type(msg).__name__}: frame of {len(frame)} bytes exceeds the maximum of {self._max_frame}"
            )
        if mtype == WELCOME:
            self._version = version
        return frame

    # --- internals -------------------------------------------------------------

    def _peer_role(self) -> str:
        return "client" if self._role == "daemon" else "daemon"

    def _check_version(self, mtype: int, version: int) -> None:
        handshake = (HELLO,) if self._role == "daemon" else (WELCOME, REFUSED, ERROR)
        name = self._family.types[mtype].__name__
        if self._version is None:
            if mtype not in handshake:
                names = " or ".join(self._family.types[t].__name__ for t in handshake)
                raise self._fail(f"expected {names} first, got {name}")
            return
        if mtype == HELLO:
            raise self._fail("Hello sent twice")
        if mtype in (WELCOME, REFUSED):
            raise self._fail(f"{name} after the handshake")
        if version != self._version:
            raise self._fail(f"frame has protocol version {version}, negotiated {self._version}")

    def _after_handshake(self, msg: Message) -> None:
        if msg.TYPE == WELCOME:
            self._version = msg.version  # type: ignore[union-attr]

    def _available_fds(self, frame_start: int) -> int:
        return sum(len(b.fds) for b in self._batches if b.start <= frame_start < b.end)

    def _take_fds(self, frame_start: int, n: int) -> list[int]:
        taken: list[int] = []
        for batch in self._batches:
            if len(taken) == n:
                break
            if batch.start <= frame_start < batch.end:
                while batch.fds and len(taken) < n:
                    taken.append(batch.fds.popleft())
        while self._batches and not self._batches[0].fds:
            self._batches.popleft()
        return taken

    def _check_orphan_fds(self, upto: int, taken: Sequence[int] = ()) -> None:
        """fds read with bytes before ``upto`` that no frame started there:
        nobody will ever claim them. ``taken``: fds of the frame just parsed,
        closed too on error since its event is never returned."""
        for batch in self._batches:
            if batch.fds and batch.end <= upto:
                raise self._fail(f"{len(batch.fds)} fds arrived that no frame announced", taken)


def _problem(msg: Message, nfds: int) -> str | None:
    """Why a frame is inconsistent with the fds that came with it (only a
    ``Claimed`` says how many it carries)."""
    if msg.TYPE != CLAIMED:
        return None
    claimed: Claimed = msg  # type: ignore[assignment]  # its code says so
    return claimed_problem(claimed.children, claimed.outputs, nfds)
