"""What a request to a daemon returns, for the trio client (``_client``)
and the blocking one (``_sync``) alike. Every ``master`` fd in a result is
the caller's to close."""

from __future__ import annotations

from multiserver._errors import ChildFailed, PeerProtocolError, RequestFailed, VersionRefused
from multiserver.protocol._messages import Children, Error, Hello, Refused, Welcome
from multiserver.protocol._proto import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION
from multiserver.protocol._record import record, replaced

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver.protocol._messages import ChildInfo, Claimed, Message


# Records (multiserver.record), not attrs: the blocking client imports no attrs.
@record
class LaunchResult:
    child: ChildInfo
    master: int | None  # the caller's; None when launched detached


@record
class ClaimResult:
    """One child of a claim: either ``child`` (with ``master`` if it runs,
    the output buffered while unheld and the count dropped past the bound)
    or ``error``. A join (version 9) has ``feed``: the fd its output comes
    on while the daemon reads the master (``master`` then only takes what
    is typed, and is None for a watcher); docs/sharing.md."""

    id: int
    child: ChildInfo | None = None
    master: int | None = None
    output: bytes = b""
    dropped: int = 0
    error: ChildFailed | None = None
    feed: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def without_master(self) -> ClaimResult:
        """The same result, its master fd handed on (or closed)."""
        return ClaimResult(self.id, self.child, None, self.output, self.dropped, self.error, None)


@record
class PeekResult:
    child: ChildInfo
    output: bytes
    dropped: int


def claim_results(msg: Claimed, fds: tuple[int, ...]) -> list[ClaimResult]:
    """Split one Claimed frame into results (the codec checked that the fds
    and output lengths add up)."""
    results: list[ClaimResult] = []
    pos = 0
    next_fd = iter(fds)
    for part in msg.children:
        output = msg.outputs[pos : pos + part.output_len]
        pos += part.output_len
        if part.child is None:
            results.append(
                ClaimResult(part.id, error=ChildFailed(part.id, part.errno, part.message))
            )
            continue
        master = next(next_fd) if part.fd else None
        feed = next(next_fd) if part.feed else None
        results.append(ClaimResult(part.id, part.child, master, output, part.dropped, None, feed))
    return results


def hello(children: bool) -> Hello:
    """The Hello every client of this library sends."""
    return Hello(
        min_version=MIN_PROTOCOL_VERSION,
        max_version=PROTOCOL_VERSION,
        client="multiserver-client",
        children=children,
    )


class WelcomeReader:
    """The daemon's side of the handshake, frame by frame: ``feed`` each
    message read after the Hello; it returns the Welcome once it is whole
    (version 4 pages a long listing after it), else None. Raises
    VersionRefused, RequestFailed (e.g. a refused uid) or PeerProtocolError."""

    def __init__(self) -> None:
        self._welcome: Welcome | None = None
        self._listing: list[ChildInfo] = []

    def feed(self, msg: Message) -> Welcome | None:
        if self._welcome is None:
            if isinstance(msg, Refused):
                raise VersionRefused(msg.reason)
            if isinstance(msg, Error):
                raise RequestFailed(msg.errno, msg.message)
            assert isinstance(msg, Welcome)  # the codec admits nothing else first
            if not MIN_PROTOCOL_VERSION <= msg.version <= PROTOCOL_VERSION:
                raise VersionRefused(
                    f"daemon picked protocol version {msg.version}; this client speaks "
                    f"{MIN_PROTOCOL_VERSION}..{PROTOCOL_VERSION}"
                )
            if not msg.more:
                return msg
            self._welcome, self._listing = msg, list(msg.children)
            return None
        if isinstance(msg, Error):
            raise RequestFailed(msg.errno, msg.message)
        if not isinstance(msg, Children) or msg.req != 0:
            raise PeerProtocolError(f"expected the rest of the listing, got {type(msg).__name__}")
        self._listing += msg.children
        if msg.last:
            return replaced(self._welcome, children=self._listing, more=False)
        return None
