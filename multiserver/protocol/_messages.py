"""The messages of the multiserver wire protocol: their one definition.

Each is a frozen record (``_record.record``: a dataclass to a type checker,
a few lines at run time, so that a command that reads a listing imports
neither attrs nor cattrs). Their fields, as annotated here, are the codec's
field table (``_codec`` reads the annotations as text: the forms it knows
are listed there).

Every message has a fixed type code (``TYPE``), stated once in ``MESSAGE_TYPES``.
A message may carry one ``bytes`` field (named by ``BLOB``), which travels as the
frame's raw blob instead of inside the JSON body. A message that travels with
fds says how many in ``nfds`` of its frame; the fds themselves are never part of
the message object (see ``_frames.Event``).

Any change to a message, its fields or its meaning bumps ``PROTOCOL_VERSION``.
See docs/protocol.md for the byte-level description.
"""

from __future__ import annotations

from multiserver.protocol._proto import (
    MIN_PROTOCOL_VERSION as MIN_PROTOCOL_VERSION,
    NAME_RE as NAME_RE,
    OS_BYTES_VERSION as OS_BYTES_VERSION,
    PROTOCOL_VERSION as PROTOCOL_VERSION,
    claimed_problem,
    describe_exit as describe_exit,
    exit_status as exit_status,
)
from multiserver.protocol._record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar, Literal, TypeAlias

    # A field that holds what the OS takes as bytes: argv, a cwd, the
    # environment (``_osstr`` says how such a string is held and carried).
    OsStr: TypeAlias = str
    ChildState: TypeAlias = Literal["running", "exited"]
    EventKind: TypeAlias = Literal[
        "created",
        "joined",
        "left",
        "taken_over",
        "exited",
        "killed",
        "daemon_upgraded",
        "activity",
    ]

# The Literal aliases above, as the codec reads them (it reads annotations
# as text, without importing typing). A test holds the two equal.
LITERALS: dict[str, tuple[str, ...]] = {
    "ChildState": ("running", "exited"),
    "EventKind": (
        "created",
        "joined",
        "left",
        "taken_over",
        "exited",
        "killed",
        "daemon_upgraded",
        "activity",
    ),
}


@record
class ChildInfo:
    """What the daemon knows of one child, without its fd."""

    id: int
    pid: int
    name: str
    argv: list[OsStr]
    cwd: OsStr
    tty: str
    rows: int
    cols: int
    state: ChildState
    exit_code: int | None  # negative signal number when killed by a signal
    held: bool
    buffered_bytes: int
    dropped_bytes: int
    started_at: float  # unix time
    exited_at: float | None
    linger: float | None
    # Filled only when asked (List.foreground): the foreground process of the
    # child's terminal, where the OS tells it.
    fg_pid: int | None = None
    fg_cwd: OsStr | None = None
    fg_argv: list[OsStr] | None = None
    # Version 4. Characters of argv left out of this answer (a listing is
    # bounded; the child keeps its whole argv). 0: argv is whole.
    argv_omitted: int = 0
    # Version 9. How many clients hold it (``held``: one or more), and how
    # many of those only watch (``Claim.read_only``). Omitted at 0.
    holders: int = 0
    watchers: int = 0


# --- handshake -------------------------------------------------------------


@record
class Hello:
    """Client -> daemon, first frame. Offers a range of protocol versions."""

    TYPE: ClassVar[int] = 1
    min_version: int
    max_version: int
    client: str = ""
    # Version 3. False: the Welcome lists no children (a client that
    # reattaches ids it knows need not pay for listing thousands). Omitted
    # from the body when true, so that Hello is the version-2 Hello; a
    # version-2 daemon refuses a Hello that carries it (unknown field).
    children: bool = True


@record
class Welcome:
    """Daemon -> client: the version picked and what the daemon holds."""

    TYPE: ClassVar[int] = 2
    version: int
    instance_id: str
    pid: int
    server: str
    children: list[ChildInfo]
    # Version 4: the listing goes on in ``Children`` frames with ``req`` 0
    # (the last one has ``last``), because it does not fit one frame.
    more: bool = False


@record
class Refused:
    """Daemon -> client: no common version (or another refusal); then it closes."""

    TYPE: ClassVar[int] = 3
    reason: str
    min_version: int
    max_version: int


# --- requests (client -> daemon); each carries a client-chosen `req` ----------


@record
class Launch:
    TYPE: ClassVar[int] = 10
    req: int
    argv: list[OsStr]
    env: dict[OsStr, OsStr]
    cwd: OsStr
    rows: int = 24
    cols: int = 80
    name: str = ""
    linger: float | None = None
    hold: bool = True  # False: launch detached, the daemon drains it
    # Version 9: the holder can give reading back (it answers GiveBack), so
    # other clients may join (docs/sharing.md); a claim with ``join`` says
    # so too. Omitted at False.
    share: bool = False


@record
class Claim:
    """Claim several children in one request. Answered by ``Claimed``
    frames (one result per id, in the order asked)."""

    TYPE: ClassVar[int] = 11
    req: int
    ids: list[int]
    steal: bool = False  # take over children held by another client
    # Hand over a copy of the buffered output and keep it in the daemon: for a
    # claimer that will release without reading (e.g. `multiserver restore`).
    keep_output: bool = False
    # Version 9 (docs/sharing.md). ``join``: hold the child beside the
    # clients that hold it (``steal`` is then ignored); ``read_only`` too,
    # and only watch: no master fd, and its size never counts. A join
    # names one child. Omitted at False.
    join: bool = False
    read_only: bool = False


@record
class Release:
    """Give children back; the daemon drains them again. With
    ``replace_output``, each child's kept output becomes ``output``: what
    the releasing client last showed (so the next claim replays the screen
    it left), in place of the output this client claimed and showed."""

    TYPE: ClassVar[int] = 12
    BLOB: ClassVar[str] = "output"
    req: int
    ids: list[int]
    replace_output: bool = False
    output: bytes = b""


@record
class Signal:
    TYPE: ClassVar[int] = 13
    req: int
    id: int
    signum: int


@record
class Collect:
    TYPE: ClassVar[int] = 14
    req: int
    id: int


@record
class ListChildren:
    TYPE: ClassVar[int] = 15
    req: int
    foreground: bool = False
    # Version 7. Only the children whose name begins with one of
    # ``prefixes`` or whose id is one of ``ids`` (``_proto.selected``): a
    # command about one session need not pay for listing thousands. None
    # (both): every child. Omitted from the body at None.
    prefixes: list[str] | None = None
    ids: list[int] | None = None


@record
class Peek:
    TYPE: ClassVar[int] = 16
    req: int
    id: int
    max_bytes: int | None = None


@record
class Resize:
    TYPE: ClassVar[int] = 17
    req: int
    id: int
    rows: int
    cols: int


@record
class Shutdown:
    """Stop the daemon. Refused while children run unless ``force``."""

    TYPE: ClassVar[int] = 18
    req: int
    force: bool = False


@record
class Upgrade:
    """Version 6. Replace the daemon's code with the installed one, in
    place (``_upgrade.py``); the answer comes from the new code
    (``Upgraded``), or an ``Error`` from the old, which goes on serving."""

    TYPE: ClassVar[int] = 19
    req: int


@record
class Watch:
    """Version 8. Follow the daemon's events on this connection: answered
    by ``Watching``, then ``SessionEvent`` frames (and ``EventsMissed``)
    pushed until the connection closes (docs/events.md). ``since``: replay
    the events from that ``seq`` that the daemon still holds first; None:
    only the events to come."""

    TYPE: ClassVar[int] = 20
    req: int
    since: int | None = None


@record
class HandBack:
    """Version 9. The answer to ``GiveBack``: this client stopped reading
    child ``id``'s master; ``shown`` is what it showed (as a release's
    ``replace_output``). Answered by ``HandedBack`` with the feed it reads
    from now on."""

    TYPE: ClassVar[int] = 21
    BLOB: ClassVar[str] = "shown"
    req: int
    id: int
    shown: bytes = b""


# --- replies (daemon -> client); each echoes `req` -----------------------------


@record
class Launched:
    """Reply to Launch; travels with the master fd when the launch held it."""

    TYPE: ClassVar[int] = 30
    req: int
    child: ChildInfo


@record
class ClaimedChild:
    """One child of a ``Claimed`` frame: its info (None when its claim
    failed, with ``errno`` and ``message``), the count of bytes dropped past
    the bound since the last handover, the length of its buffered output
    (the next ``output_len`` bytes of the frame's blob), and whether its
    master fd travels with the frame (the next fd, in order; none for an
    exited child)."""

    id: int
    child: ChildInfo | None = None
    dropped: int = 0
    output_len: int = 0
    fd: bool = False
    errno: int = 0
    message: str = ""
    # Version 9: the read end of the child's output feed travels too (after
    # the master's fd, if both): the daemon reads the master, and this
    # client reads the feed instead (docs/sharing.md). Omitted at False.
    feed: bool = False


@record
class Claimed:
    """The answer to a Claim: one ``ClaimedChild`` per id, in the order
    asked, in one frame or more (at most 253 fds a frame); ``last`` marks the
    final frame of the answer. The blob is the children's buffered outputs,
    concatenated in order."""

    TYPE: ClassVar[int] = 31
    BLOB: ClassVar[str] = "outputs"
    req: int
    children: list[ClaimedChild]
    last: bool = True
    outputs: bytes = b""

    def check(self, nfds: int) -> str | None:
        """Why the frame is inconsistent with the fds that came with it."""
        return claimed_problem(self.children, self.outputs, nfds)


@record
class ChildError:
    """One child of a Release that could not be served."""

    TYPE: ClassVar[int] = 32
    req: int
    id: int
    errno: int
    message: str


@record
class Released:
    TYPE: ClassVar[int] = 33
    req: int
    ids: list[int]


@record
class Ok:
    TYPE: ClassVar[int] = 34
    req: int


@record
class Upgraded:
    """Reply to Upgrade, from the new code: the daemon's pid (unchanged),
    the code it ran and runs now (``Welcome.server``), and for how long it
    served nobody (from its last answer to its first in the new code)."""

    TYPE: ClassVar[int] = 39
    req: int
    pid: int
    old_server: str
    server: str
    paused: float  # seconds


@record
class Watching:
    """Reply to Watch: the ``seq`` the next event to happen will carry
    (replayed ones, from ``Watch.since``, come before it). A watcher that
    reconnects asks ``since`` the seq after the last it saw, or this one."""

    TYPE: ClassVar[int] = 40
    req: int
    next_seq: int


@record
class HandedBack:
    """Reply to HandBack; travels with the read end of the child's output
    feed (docs/sharing.md)."""

    TYPE: ClassVar[int] = 41
    req: int
    id: int


@record
class Collected:
    TYPE: ClassVar[int] = 35
    req: int
    child: ChildInfo


@record
class Children:
    """A listing, or one page of it (version 4: pages until ``last``; ``req``
    0 for the pages that follow a ``Welcome`` with ``more``)."""

    TYPE: ClassVar[int] = 36
    req: int
    children: list[ChildInfo]
    last: bool = True


@record
class Peeked:
    TYPE: ClassVar[int] = 37
    BLOB: ClassVar[str] = "output"
    req: int
    child: ChildInfo
    dropped: int
    output: bytes = b""


@record
class Error:
    """A request failed (``req`` set; the connection stays healthy), or the
    peer broke the protocol (``req`` is None; the daemon closes after it)."""

    TYPE: ClassVar[int] = 38
    req: int | None
    errno: int
    message: str


# --- pushed notices (daemon -> client, no `req`) --------------------------------


@record
class ChildExited:
    TYPE: ClassVar[int] = 50
    id: int
    exit_code: int


@record
class ChildTaken:
    """Sent to the previous holder when another client claims its child."""

    TYPE: ClassVar[int] = 51
    id: int


@record
class SessionEvent:
    """Version 8, pushed to a watcher (``Watch``): one thing that happened,
    numbered ``seq`` in the daemon's one order (1 for its first; an
    instance's numbers go on across an upgrade, and start again with a new
    instance: ``Welcome.instance_id``). ``id`` and ``name`` are the
    session's (0 and "" for ``daemon_upgraded``), ``at`` is Unix time,
    ``exit_code`` is set for ``exited`` and ``killed`` (negative: the
    signal), ``client`` is the daemon's number of the connection that
    launched, joined, left or took over (0: none), ``server`` what the
    daemon runs after ``daemon_upgraded``."""

    TYPE: ClassVar[int] = 52
    seq: int
    kind: EventKind
    id: int
    name: str
    at: float
    exit_code: int | None = None
    client: int = 0
    server: str = ""


@record
class EventsMissed:
    """Version 8, pushed to a watcher: the events ``first_missing`` up to
    ``next_seq`` (not included) will not come (it fell behind by more than
    the daemon keeps, or ``Watch.since`` asked for ones it no longer
    holds); the next event comes with ``next_seq``. What it missed is read
    again from the daemon's state (``ListChildren``)."""

    TYPE: ClassVar[int] = 53
    first_missing: int
    next_seq: int


@record
class GiveBack:
    """Version 9, pushed to the client that reads child ``id``'s master:
    another client joins. Stop reading the master and answer with
    ``HandBack``; from then on the daemon reads it and feeds every holder."""

    TYPE: ClassVar[int] = 54
    id: int


@record
class Shared:
    """Version 9, pushed to every holder of child ``id`` when its holders or
    its size change: how many hold it and watch it, the size it has, and
    whether that is this client's (``yours``; under the "latest" size
    policy, a holder that types while it is not sends its size)."""

    TYPE: ClassVar[int] = 55
    id: int
    holders: int
    watchers: int
    rows: int
    cols: int
    yours: bool


@record
class Skipped:
    """Version 9, pushed to a holder that fell behind child ``id``'s output
    by more than its feed holds: ``missed`` bytes were not sent to it; a
    redraw from the buffer followed them in its feed."""

    TYPE: ClassVar[int] = 56
    id: int
    missed: int


Message = (
    Hello
    | Welcome
    | Refused
    | Launch
    | Claim
    | Release
    | Signal
    | Collect
    | ListChildren
    | Peek
    | Resize
    | Shutdown
    | Upgrade
    | Launched
    | Claimed
    | ChildError
    | Released
    | Ok
    | Collected
    | Children
    | Peeked
    | Error
    | ChildExited
    | ChildTaken
    | Upgraded
    | Watch
    | Watching
    | SessionEvent
    | EventsMissed
    | HandBack
    | HandedBack
    | GiveBack
    | Shared
    | Skipped
)

# Messages a client may send, and messages a daemon may send.
_CLIENT: tuple[type[Message], ...] = (
    Hello,
    Launch,
    Claim,
    Release,
    Signal,
    Collect,
    ListChildren,
    Peek,
    Resize,
    Shutdown,
    Upgrade,
    Watch,
    HandBack,
)
_DAEMON: tuple[type[Message], ...] = (
    Welcome,
    Refused,
    Launched,
    Claimed,
    ChildError,
    Released,
    Ok,
    Collected,
    Children,
    Peeked,
    Error,
    ChildExited,
    ChildTaken,
    Upgraded,
    Watching,
    SessionEvent,
    EventsMissed,
    HandedBack,
    GiveBack,
    Shared,
    Skipped,
)
MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls for cls in sorted((*_CLIENT, *_DAEMON), key=lambda cls: cls.TYPE)
}
CLIENT_MESSAGES: frozenset[type[Message]] = frozenset(_CLIENT)
DAEMON_MESSAGES: frozenset[type[Message]] = frozenset(_DAEMON)

# Which messages may travel with fds, and how many at most.
MAX_FDS: dict[type[Message], int] = {Launched: 1, Claimed: 253, HandedBack: 1}
