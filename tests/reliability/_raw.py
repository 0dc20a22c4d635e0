"""A blocking, synchronous client that speaks the real protocol with the
real codec over a plain socket, byte for byte where a test needs it.

The reliability tests use it where the client library would get in the way:
in a forked process that must stop at an exact byte of its traffic
(``_crash_client``), and in the hypothesis state machine, which runs in a
worker thread and sends frames the library never would (``test_hostile``).
It imports neither trio nor pytest, so a bare interpreter can run it.
"""

from __future__ import annotations

import array
import os
import socket
from collections.abc import Sequence

import attrs

from multiserver.protocol._codec import MAX_FDS_PER_FRAME, NEED_DATA, Codec, Event
from multiserver.protocol._messages import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    ChildExited,
    ChildTaken,
    Claimed,
    ClaimedChild,
    Hello,
    Message,
    Welcome,
)


@attrs.frozen
class ClaimPart:
    """One child of a Claim's answer, with its share of the blob and fds."""

    part: ClaimedChild
    output: bytes
    fd: int | None  # the caller's to close


_ANCILLARY = socket.CMSG_SPACE(MAX_FDS_PER_FRAME * array.array("i").itemsize)
NOTICES = (ChildExited, ChildTaken)


class RawConnection:
    """One connection. Owns its socket; every fd it receives is handed to the
    caller with its message (``Event.fds``) or closed by ``close``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.codec = Codec("client")
        self.notices: list[Message] = []
        self.eof = False

    @classmethod
    def connect(cls, path: str, *, timeout: float = 10.0) -> RawConnection:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    def hello(self, client: str = "reliability") -> Welcome:
        self.send(
            Hello(min_version=MIN_PROTOCOL_VERSION, max_version=PROTOCOL_VERSION, client=client)
        )
        event = self.next_event()
        assert event is not None, "daemon closed the connection instead of a Welcome"
        assert isinstance(event.message, Welcome), event.message
        return event.message

    def send(self, msg: Message) -> None:
        self.sock.sendall(self.codec.send(msg))

    def send_raw(self, data: bytes, fds: Sequence[int] = (), *, may_break: bool = False) -> None:
        """Send bytes as they are; ``fds`` go with the first one. With
        ``may_break``, a peer that closed meanwhile (it refused what it read
        first) is not an error: its answer is still there to read."""
        try:
            if fds:
                anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
                sent = self.sock.sendmsg([data], anc)
                data = data[sent:]
            if data:
                self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            if not may_break:
                raise

    def next_event(self) -> Event | None:
        """The next frame (notices included), or None once the daemon closed
        the connection. Raises ProtocolError if the daemon broke the protocol."""
        while True:
            event = self.codec.next_event()
            if event is not NEED_DATA:
                assert isinstance(event, Event)
                return event
            if self.eof:
                return None
            try:
                data, anc, flags, _ = self.sock.recvmsg(
                    256 * 1024, _ANCILLARY, getattr(socket, "MSG_CMSG_CLOEXEC", 0)
                )
            except ConnectionResetError:
                data, anc, flags = b"", [], 0
            fds: list[int] = []
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    arr = array.array("i")
                    arr.frombytes(raw[: len(raw) - len(raw) % arr.itemsize])
                    fds.extend(arr)
            if not data and not fds:
                self.eof = True
                continue
            self.codec.receive_data(data, fds, truncated=bool(flags & socket.MSG_CTRUNC))

    def replies(
        self, req: int, count: int | None, *, last: type[Message] | None = None
    ) -> list[Event]:
        """Read until ``count`` replies to ``req`` arrived, or, with ``last``,
        until a reply of that type (for ``Claimed``: the one marked last);
        notices go to ``self.notices``."""
        got: list[Event] = []
        while True:
            event = self.next_event()
            if event is None:
                raise ConnectionError(f"connection closed after {len(got)} replies to req {req}")
            msg = event.message
            if isinstance(msg, NOTICES):
                self.notices.append(msg)
                continue
            assert getattr(msg, "req", None) == req, f"reply {msg!r} is not for req {req}"
            got.append(event)
            if (
                last is not None
                and isinstance(msg, last)
                and (not isinstance(msg, Claimed) or msg.last)
            ):
                return got
            if count is not None and len(got) == count:
                return got

    def claim_answer(self, req: int) -> list[ClaimPart]:
        """The answer to Claim ``req``: one part per id asked, in order."""
        parts = []
        for event in self.replies(req, None, last=Claimed):
            msg = event.message
            assert isinstance(msg, Claimed), msg
            fds = iter(event.fds)
            pos = 0
            for child in msg.children:
                output = msg.outputs[pos : pos + child.output_len]
                pos += child.output_len
                parts.append(ClaimPart(child, output, next(fds) if child.fd else None))
            assert next(fds, None) is None
        return parts

    def until_closed(self) -> list[Message]:
        """Every message until the daemon closes the connection, notices left out."""
        got = []
        while (event := self.next_event()) is not None:
            for fd in event.fds:
                os.close(fd)
            if isinstance(event.message, NOTICES):
                self.notices.append(event.message)
            else:
                got.append(event.message)
        return got

    def close(self) -> None:
        self.codec.close()
        self.sock.close()
