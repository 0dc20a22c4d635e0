"""The messages of the multiserver wire protocol, as frozen attrs classes.

Every message has a fixed type code (``TYPE``), stated once in ``MESSAGE_TYPES``.
A message may carry one ``bytes`` field (named by ``BLOB``), which travels as the
frame's raw blob instead of inside the JSON body. A message that travels with
fds says how many in ``nfds`` of its frame; the fds themselves are never part of
the message object (see ``_codec.Event``).

Any change to a message, its fields or its meaning bumps ``PROTOCOL_VERSION``.
See docs/protocol.md for the byte-level description.
"""

from __future__ import annotations

import re
import signal
from typing import ClassVar, Literal

import attrs

from multiserver._osstr import OsStr

# 3: Hello.children. A version-2 client never sends it, so a version-3
# daemon serves version 2 unchanged.
# 4: listings in pages (Children.last, Welcome.more) and ChildInfo.argv_omitted.
# Each is left out of the body at its default, and a daemon sets none of them
# for an older client, so version 2 and 3 peers see the frames they know.
# 5: OS strings (argv, cwd, environment: ``OsStr``) whose bytes are not UTF-8
# travel as {"b": base64}. Anything else is version 4; a daemon shows an
# older client such a string escaped (``caf\xe9``), and a client refuses to
# send one to an older daemon.
PROTOCOL_VERSION = 5
MIN_PROTOCOL_VERSION = 2
OS_BYTES_VERSION = 5

ChildState = Literal["running", "exited"]

# What a session name (Launch.name) may be; the daemon refuses any other.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")


@attrs.frozen
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


def describe_exit(exit_code: int) -> str:
    """A child's end as a person reads it: "exited with code 3", or, for a
    negative ``ChildInfo.exit_code``, "killed by SIGHUP"."""
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    return f"killed by {name}"


def exit_status(exit_code: int) -> int:
    """A child's end as a shell reports it: its code, or 128+N for signal N."""
    return 128 - exit_code if exit_code < 0 else exit_code


# --- handshake -------------------------------------------------------------


@attrs.frozen
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


@attrs.frozen
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


@attrs.frozen
class Refused:
    """Daemon -> client: no common version (or another refusal); then it closes."""

    TYPE: ClassVar[int] = 3
    reason: str
    min_version: int
    max_version: int


# --- requests (client -> daemon); each carries a client-chosen `req` ----------


@attrs.frozen
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


@attrs.frozen
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


@attrs.frozen
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


@attrs.frozen
class Signal:
    TYPE: ClassVar[int] = 13
    req: int
    id: int
    signum: int


@attrs.frozen
class Collect:
    TYPE: ClassVar[int] = 14
    req: int
    id: int


@attrs.frozen
class ListChildren:
    TYPE: ClassVar[int] = 15
    req: int
    foreground: bool = False


@attrs.frozen
class Peek:
    TYPE: ClassVar[int] = 16
    req: int
    id: int
    max_bytes: int | None = None


@attrs.frozen
class Resize:
    TYPE: ClassVar[int] = 17
    req: int
    id: int
    rows: int
    cols: int


@attrs.frozen
class Shutdown:
    """Stop the daemon. Refused while children run unless ``force``."""

    TYPE: ClassVar[int] = 18
    req: int
    force: bool = False


# --- replies (daemon -> client); each echoes `req` -----------------------------


@attrs.frozen
class Launched:
    """Reply to Launch; travels with the master fd when the launch held it."""

    TYPE: ClassVar[int] = 30
    req: int
    child: ChildInfo


@attrs.frozen
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


@attrs.frozen
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
        want = sum(1 for c in self.children if c.fd)
        if want != nfds:
            return f"Claimed: {want} children say their fd comes with the frame, {nfds} fds came"
        if any(
            c.output_len < 0 or (c.child is None and (c.fd or c.output_len)) for c in self.children
        ):
            return "Claimed: a failed child carries output or an fd"
        if sum(c.output_len for c in self.children) != len(self.outputs):
            return "Claimed: the output lengths do not add up to the blob"
        return None


@attrs.frozen
class ChildError:
    """One child of a Release that could not be served."""

    TYPE: ClassVar[int] = 32
    req: int
    id: int
    errno: int
    message: str


@attrs.frozen
class Released:
    TYPE: ClassVar[int] = 33
    req: int
    ids: list[int]


@attrs.frozen
class Ok:
    TYPE: ClassVar[int] = 34
    req: int


@attrs.frozen
class Collected:
    TYPE: ClassVar[int] = 35
    req: int
    child: ChildInfo


@attrs.frozen
class Children:
    """A listing, or one page of it (version 4: pages until ``last``; ``req``
    0 for the pages that follow a ``Welcome`` with ``more``)."""

    TYPE: ClassVar[int] = 36
    req: int
    children: list[ChildInfo]
    last: bool = True


@attrs.frozen
class Peeked:
    TYPE: ClassVar[int] = 37
    BLOB: ClassVar[str] = "output"
    req: int
    child: ChildInfo
    dropped: int
    output: bytes = b""


@attrs.frozen
class Error:
    """A request failed (``req`` set; the connection stays healthy), or the
    peer broke the protocol (``req`` is None; the daemon closes after it)."""

    TYPE: ClassVar[int] = 38
    req: int | None
    errno: int
    message: str


# --- pushed notices (daemon -> client, no `req`) --------------------------------


@attrs.frozen
class ChildExited:
    TYPE: ClassVar[int] = 50
    id: int
    exit_code: int


@attrs.frozen
class ChildTaken:
    """Sent to the previous holder when another client claims its child."""

    TYPE: ClassVar[int] = 51
    id: int


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
)

MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Hello,
        Welcome,
        Refused,
        Launch,
        Claim,
        Release,
        Signal,
        Collect,
        ListChildren,
        Peek,
        Resize,
        Shutdown,
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
    )
}

# Which messages may travel with fds, and how many at most.
MAX_FDS: dict[type[Message], int] = {Launched: 1, Claimed: 253}

# Messages a client may send, and messages a daemon may send.
CLIENT_MESSAGES: frozenset[type[Message]] = frozenset(
    {Hello, Launch, Claim, Release, Signal, Collect, ListChildren, Peek, Resize, Shutdown}
)
DAEMON_MESSAGES: frozenset[type[Message]] = frozenset(MESSAGE_TYPES.values()) - CLIENT_MESSAGES
