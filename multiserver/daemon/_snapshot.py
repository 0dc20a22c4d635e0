"""The daemon's state as it crosses an in-place upgrade (``_upgrade.py``):
a documented, versioned snapshot that the new code reads from the old.

Pure: no trio, no socket. The snapshot names fds by number; they cross the
exec because the old daemon clears their close-on-exec flag just before it.

The bytes, in one anonymous file (docs/upgrade.md)::

    b"MSSNAP\\n" | 8-byte big-endian length of the header | header: JSON | blobs

The header is ``Snapshot`` in JSON; every ``Blob`` in it is a (start,
length) range of the blob area (output buffers, queued frames, unread
request bytes), so megabytes of output are copied once, not escaped.

Versions. ``format`` is what the writer wrote; ``readable_from`` the oldest
reader format that can serve it. A reader refuses a snapshot whose
``readable_from`` is newer than its own ``FORMAT``, or whose ``format`` is
older than ``OLDEST_READ``; it ignores fields it does not know (a newer
writer may add some, each with a default) and fills the defaults of fields
an older writer did not have. A change that an older reader would
misunderstand raises ``readable_from``.

Format history:

- 1 (multiserver 0.1): the first. Fields added since, each with a default
  (an older writer's snapshot gets it; an older reader ignores the field):
  ``child_nofile`` (issue 35); ``PeerState.watch``, ``events``,
  ``next_event_seq`` and ``signals_sent`` (protocol 8's events: an older
  writer had none, and its instance's events start at 1 in the new code).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import attrs
import cattrs

FORMAT = 1
OLDEST_READ = 1
MAGIC = b"MSSNAP\n"
_LENGTH = struct.Struct(">Q")
# Bigger than any header a daemon writes (1,000 children with long argvs
# are a few MB); a header past it is refused before it is parsed.
MAX_HEADER = 256 * 1024 * 1024


class SnapshotError(Exception):
    """A snapshot that cannot be served: one line for a person."""


@attrs.frozen
class Blob:
    """Bytes ``start:start+length`` of the blob area."""

    start: int = 0
    length: int = 0


@attrs.frozen
class ChildState:
    """One child of the table: its process, its PTY master (an fd that
    crosses the exec), and the output buffered while nobody held it."""

    id: int
    pid: int
    master: int | None  # None once the table closed it (collected children never are)
    tty: str
    name: str
    argv: list[str]
    cwd: str
    rows: int
    cols: int
    linger: float | None
    started_at: float
    exited_at: float | None = None
    # Set once the old daemon reaped it; a child that exited meanwhile is a
    # zombie the new daemon reaps.
    exit_code: int | None = None
    eof: bool = False
    buffer: Blob = Blob()
    dropped: int = 0
    # Seconds left on its linger clock (unheld, running, with a linger).
    linger_left: float | None = None


@attrs.frozen
class Outgoing:
    """A frame queued for a client: what is left of it to send, and the
    fds that go with its first byte (none once that byte went out)."""

    frame: Blob
    fds: list[int] = attrs.Factory(list)
    notice: bool = False


@attrs.frozen
class PeerState:
    """One client connection: its socket (an fd that crosses), the protocol
    version it negotiated (None before its Hello), the children it holds,
    request bytes read but not yet a whole frame, and its queued frames."""

    fd: int
    number: int
    version: int | None
    held: list[int] = attrs.Factory(list)
    unread: Blob = Blob()
    outbox: list[Outgoing] = attrs.Factory(list)
    # The Upgrade request this connection waits on: the new code answers it.
    upgrade_req: int | None = None
    # The event it reads next, if it watches (``_events``).
    watch: int | None = None
    # Of ``held``, those it can give reading back of (``Sharing.reader_shares``).
    shares: list[int] = attrs.Factory(list)


@attrs.frozen
class Snapshot:
    format: int
    readable_from: int
    server: str  # the writer's Welcome.server ("multiserver/0.5.0")
    instance_id: str
    pid: int
    # How it was started and since when (``_origin.DaemonOrigin``).
    started: str
    started_at: float | None
    idle_exit: float | None
    socket: str
    state_dir: str
    listener: int  # the listening socket's fd
    lock: int  # the lock file's fd (the flock crosses with it)
    socket_stat: list[int]  # os.lstat of the socket as bound (10 fields)
    config: dict[str, Any]  # DaemonConfig's fields
    next_child_id: int
    children: list[ChildState] = attrs.Factory(list)
    peers: list[PeerState] = attrs.Factory(list)
    # time.monotonic() when the daemon stopped serving (the system-wide
    # clock: the new code measures the pause against it), and time.time().
    paused_at: float = 0.0
    upgraded_at: float = 0.0
    # The soft RLIMIT_NOFILE the daemon's children get, the one it found at
    # start before raising its own (``_openfiles``); None: not known (an
    # older writer, which never raised its own: the new code's is it).
    child_nofile: int | None = None
    # The events kept (``_events.EventLog``): their bodies as the protocol
    # writes them (``_codec.encode_body``), one a line, in a blob; the seq
    # of the next; the signals clients sent to sessions that run ([id, signal]).
    events: Blob = Blob()
    next_event_seq: int = 1
    signals_sent: list[list[int]] = attrs.Factory(list)

    def fds(self) -> list[int]:
        """Every fd the snapshot names: what must cross the exec."""
        out = [self.listener, self.lock]
        out += [c.master for c in self.children if c.master is not None]
        for peer in self.peers:
            out.append(peer.fd)
            for item in peer.outbox:
                out += item.fds
        return out


_converter = cattrs.Converter()  # the snapshot's own: unknown keys are ignored


class BlobWriter:
    """Collects the blob area while a snapshot is built: the bytes given,
    not copies (a view of a child's buffer, which cannot grow until
    ``release``)."""

    def __init__(self) -> None:
        self._parts: list[bytes | memoryview] = []
        self._size = 0

    def add(self, data: bytes | memoryview) -> Blob:
        """Where ``data`` will be; a view given is this writer's to release."""
        if not data:
            if isinstance(data, memoryview):
                data.release()
            return Blob()
        blob = Blob(self._size, len(data))
        self._parts.append(data)
        self._size += len(data)
        return blob

    def parts(self) -> list[bytes | memoryview]:
        return self._parts

    def release(self) -> None:
        """Let go of what was added (the buffers viewed may grow again)."""
        for part in self._parts:
            if isinstance(part, memoryview):
                part.release()
        self._parts = []


def encode(snapshot: Snapshot, blobs: BlobWriter) -> list[bytes | memoryview]:
    """The snapshot's bytes, as parts to write in order."""
    header = json.dumps(_converter.unstructure(snapshot), separators=(",", ":")).encode()
    return [MAGIC, _LENGTH.pack(len(header)), header, *blobs.parts()]


def decode(data: bytes | memoryview) -> tuple[Snapshot, memoryview]:
    """(the snapshot, its blob area). Raises SnapshotError with one line."""
    view = memoryview(data)
    start = len(MAGIC) + _LENGTH.size
    if bytes(view[: len(MAGIC)]) != MAGIC or len(view) < start:
        raise SnapshotError("not a multiserver snapshot")
    (size,) = _LENGTH.unpack(view[len(MAGIC) : start])
    if size > MAX_HEADER or start + size > len(view):
        raise SnapshotError(f"a snapshot header of {size} bytes does not fit in the file")
    try:
        raw = json.loads(bytes(view[start : start + size]))
    except (ValueError, RecursionError) as exc:
        raise SnapshotError(f"the snapshot header is not JSON: {exc}") from None
    if type(raw) is not dict:
        raise SnapshotError("the snapshot header is not a JSON object")
    check_readable(raw.get("format"), raw.get("readable_from"))
    try:
        snapshot = _converter.structure(raw, Snapshot)
    except Exception as exc:  # cattrs' ClassValidationError and friends
        raise SnapshotError(f"the snapshot does not read: {_first_line(exc)}") from None
    return snapshot, view[start + size :]


def check_readable(fmt: object, readable_from: object) -> None:
    """Refuse a snapshot this code cannot serve (SnapshotError)."""
    if type(fmt) is not int or type(readable_from) is not int:
        raise SnapshotError("the snapshot has no format number")
    if readable_from > FORMAT:
        raise SnapshotError(
            f"snapshot format {fmt} needs a reader of format {readable_from};"
            f" this code reads up to {FORMAT}"
        )
    if fmt < OLDEST_READ:
        raise SnapshotError(
            f"snapshot format {fmt} is older than this code reads (from {OLDEST_READ})"
        )


def blob(area: memoryview, ref: Blob) -> bytes:
    """The bytes ``ref`` names (a copy). Raises SnapshotError if they are
    not there."""
    with blob_view(area, ref) as view:
        return bytes(view)


def blob_view(area: memoryview, ref: Blob) -> memoryview:
    """The bytes ``ref`` names, not copied: release the view (``with``)
    before the area is. Raises SnapshotError if they are not there."""
    if ref.start < 0 or ref.length < 0 or ref.start + ref.length > len(area):
        raise SnapshotError(f"a blob ({ref.start}+{ref.length}) lies outside the snapshot")
    return area[ref.start : ref.start + ref.length]


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError) and exc.exceptions:
        return _first_line(exc.exceptions[0])
    return (str(exc).splitlines() or [type(exc).__name__])[0]
