"""The request core: given the daemon's state and one request, it decides the
state change and the replies, with the fds to send as owned objects.

Sans-IO, like the codec: no trio, no socket. The daemon (``_server.py``) and
the simulated daemon of ``multiserver.testing`` both drive it; they differ
only in their children (``ChildHost``: real PTYs, or socketpairs) and, for the
simulator, in the misbehaviour injected around it. So the harness can never
pass while the daemon answers otherwise: there is one set of rules.

Rules, all here:

- **One step.** ``handle`` is synchronous. Every fd that leaves the child table
  is duplicated (``OwnedFd``) in the same step that decides to send it, and
  every reply is encoded there too: no fd number crosses an ``await``. The
  driver queues the returned frames before its next checkpoint.
- **Transactional claim.** A claim first builds its whole answer (outputs
  peeked, fds duplicated, frames encoded); only when all of that succeeded do
  holders and buffers change. If it cannot be built (the daemon at its fd
  limit, an answer that cannot be framed), nothing changes, the output stays
  in the daemon, and the error says so. A failed batch of dups closes the
  dups it made.
- **Bounded answers.** No frame can exceed the maximum: a child's argv is
  shortened in answers (``argv_omitted`` counts what was left out; the child
  keeps it whole), listings come in pages (version 4), a claim's answer is
  split into as many ``Claimed`` frames as it needs, and a request may name
  at most ``MAX_REQUEST_IDS`` children.
- **Bytes.** An argv, cwd or environment that is not UTF-8 goes to the child
  as it came. An older client (before version 5) is shown such strings
  escaped (``caf\\xe9``), as every error message shows them: its codec could
  not read them otherwise.
- **Holders.** Who holds which child is the core's state: one client, or
  several that share it (version 9, docs/sharing.md: ``_sharing.Sharing``
  decides who reads the master and what each is owed; this module does
  what it says, through the host and each holder's ``Feed``). A client
  that goes away gives back everything it held.
- **Events.** What happens to a session (launched, held, let go, taken
  over, ended, writing) is recorded in the core's ``EventLog``
  (``_events``) in the step that decides it, in one place for each kind:
  ``_launch`` (created), ``_hold`` (joined, taken over), ``_let_go``
  (left), ``child_exited`` (exited, killed), ``output_seen`` (activity),
  ``upgraded``; watchers read them from there.
"""

from __future__ import annotations

import collections
import errno
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from multiserver.daemon._events import EventLog
from multiserver.daemon._fds import Feed, OwnedFd, close_all, dup_all
from multiserver.daemon._sharing import (
    AskBack,
    Give,
    Joined,
    ReadIt,
    Resume,
    Send,
    Sharing,
    StopReading,
    TellSkipped,
    redraw,
)
from multiserver.protocol._codec import MAX_FDS_PER_FRAME, FrameTooLarge
from multiserver.protocol._messages import (
    MIN_PROTOCOL_VERSION,
    NAME_RE,
    OS_BYTES_VERSION,
    PROTOCOL_VERSION,
    ChildError,
    ChildExited,
    ChildInfo,
    Children,
    ChildTaken,
    Claim,
    Claimed,
    ClaimedChild,
    Collect,
    Collected,
    Error,
    GiveBack,
    HandBack,
    HandedBack,
    Hello,
    Launch,
    Launched,
    ListChildren,
    Message,
    Ok,
    Peek,
    Peeked,
    Refused,
    Release,
    Released,
    Resize,
    Shared,
    Shutdown,
    Signal,
    Skipped,
    Upgrade,
    Watch,
    Watching,
    Welcome,
)
from multiserver.protocol._proto import (
    EVENTS_VERSION,
    SHARING_VERSION,
    UPGRADE_VERSION,
    select_problem,
    selected,
)
from multiserver.protocol._record import replaced
from multiserver.settings._env import child_env
from multiserver.system._osstr import escaped, is_utf8
from multiserver.terminal._buffer import OutputBuffer

# The most children one Claim or Release may name. An answer is a few dozen
# bytes per id: a bound keeps one request from filling the daemon's memory.
MAX_REQUEST_IDS = 100_000
# About how much of a child's argv an answer carries (characters, plus 3 for
# each argument's quotes and comma).
ARGV_LISTED = 4096
# A Claimed frame's outputs stay well under the frame limit.
CLAIM_BATCH_BYTES = 8 * 1024 * 1024
# Version 4 pages listings and shortens argv with a count of what it left out.
PAGED_VERSION = 4

# How long a client that reads a shared session's master has to give
# reading back (``GiveBack``) before it is disconnected: joins wait on it.
HANDBACK_TIMEOUT = 5.0
# What a holder's feed may hold before it is behind (``Sharing.bound``):
# the feed's own size, where the OS makes it smaller.
FEED_BOUND = 1024 * 1024
# A shared session is read at the pace of its holders that keep up: when
# one has less than a quarter of its feed free, the daemon stops reading
# the master (the program waits, as it would for one client), and reads
# again once each has half of it free, or LAG_WAIT later: a holder still
# full then falls behind and is skipped forward (``Skipped``). So a slow
# holder costs the others and the program at most LAG_WAIT each time it
# has caught up, never its own pace.
PAUSE_FREE, RESUME_FREE = 4, 2  # as fractions of a feed: 1/4, 1/2
LAG_WAIT = 0.1
# How often a paused session's feeds are looked at, and the others' waits.
PAUSED_TICK, WAIT_TICK = 0.002, 0.05
# How long the feed of a holder a takeover took a session from stays open
# (quiet), if its connection does not close first: its end would tell it
# to read the master, and it is told ChildTaken instead, which it has
# long read by then.
TAKEN_GRACE = 10.0
# A redraw after a skip: the end of the buffer, about a screen or two.
REDRAW_MAX = 64 * 1024

# The signal numbers this OS knows, built once: signal.valid_signals() makes
# a new set of enums on every call (0.4 ms).
VALID_SIGNALS = frozenset(int(s) for s in signal.valid_signals())


class LaunchError(Exception):
    """A child could not be started: an errno and one line for a person."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(message)
        self.errno = err
        self.message = message


def command_not_found(argv0: str) -> LaunchError:
    """The daemon's and the simulator's one wording, the name escaped."""
    return LaunchError(errno.ENOENT, f"command not found: {escaped(argv0)}")


def launch_problem(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    rows: int,
    cols: int,
    name: str,
    linger: float | None,
    name_taken: bool,
    *,
    cwd_must_exist: bool = True,
) -> tuple[int, str] | None:
    """(errno, one line) for a Launch refused before anything starts, or
    None. Pure but for the cwd's existence."""
    if not argv or not all(argv):
        return errno.EINVAL, "empty command"
    if not (1 <= rows <= 10000 and 1 <= cols <= 10000):
        return errno.EINVAL, f"bad terminal size {rows}x{cols}"
    if linger is not None and not (0 <= linger < 10**9):
        return errno.EINVAL, f"bad linger {linger}"
    if name and not NAME_RE.match(name):
        return errno.EINVAL, f"bad session name {name!r}"
    if name_taken:
        return errno.EEXIST, f"a session named {name!r} exists already"
    if any("\0" in a for a in (*argv, cwd, *env.keys(), *env.values())):
        return errno.EINVAL, "a NUL byte in the command, cwd or environment"
    if any(not k or "=" in k for k in env):
        return errno.EINVAL, "an environment variable with an empty name or '=' in it"
    if not os.path.isabs(cwd):
        return errno.EINVAL, f"cwd must be absolute: {escaped(cwd)}"
    if cwd_must_exist and not os.path.isdir(cwd):
        return errno.ENOENT, f"no such directory: {escaped(cwd)}"
    return None


def shorten_argv(argv: list[str], limit: int = ARGV_LISTED) -> tuple[list[str], int]:
    """(argv as an answer carries it, characters left out). Whole arguments
    while they fit in ``limit``; the first that does not is cut and ends in
    "…"; the rest are left out."""
    kept: list[str] = []
    room = limit
    omitted = 0
    for arg in argv:
        cost = len(arg) + 3
        if cost <= room:
            kept.append(arg)
            room -= cost
        elif room > 3:
            kept.append(arg[: room - 3] + "…")
            omitted += len(arg) - (room - 3)
            room = 0
        else:
            omitted += len(arg)
    return kept, omitted


def _argv_size(argv: Sequence[str] | None) -> int:
    return 0 if argv is None else sum(len(a) + 3 for a in argv)


def listed(info: ChildInfo, version: int) -> ChildInfo:
    """``info`` as an answer to a peer of ``version`` carries it: argv and
    the foreground argv shortened past ``ARGV_LISTED``; ``argv_omitted`` set
    only for peers that know it (version 4); strings that are not UTF-8
    escaped for peers that cannot read them (before version 5)."""
    if version < OS_BYTES_VERSION:
        info = _escaped(info)
    if _argv_size(info.argv) <= ARGV_LISTED and _argv_size(info.fg_argv) <= ARGV_LISTED:
        return info
    argv, omitted = shorten_argv(info.argv)
    fg_argv = None if info.fg_argv is None else shorten_argv(info.fg_argv)[0]
    return replaced(
        info,
        argv=argv,
        fg_argv=fg_argv,
        argv_omitted=omitted if version >= PAGED_VERSION else 0,
    )


def _escaped(info: ChildInfo) -> ChildInfo:
    """``info`` with its OS strings that are not UTF-8 escaped (``caf\\xe9``)."""
    fg_argv = info.fg_argv or []
    if all(map(is_utf8, (info.cwd, info.fg_cwd or "", *info.argv, *fg_argv))):
        return info
    return replaced(
        info,
        argv=[escaped(a) for a in info.argv],
        cwd=escaped(info.cwd),
        fg_cwd=None if info.fg_cwd is None else escaped(info.fg_cwd),
        fg_argv=None if info.fg_argv is None else [escaped(a) for a in info.fg_argv],
    )


# --- what the core needs from its drivers ----------------------------------------


class Peer(Protocol):
    """A client connection, as the core sees it."""

    @property
    def id(self) -> int:
        """The daemon's number of the connection (an event's ``client``)."""
        ...

    def events_ready(self) -> None:
        """Events were recorded (``EventLog.take`` reads them for a
        watcher); never blocks."""
        ...

    def encode(self, msg: Message, nfds: int = 0) -> bytes:
        """The frame for ``msg`` (raises FrameTooLarge)."""
        ...

    def notify(self, msg: Message) -> None:
        """Queue a pushed notice (ChildExited, ChildTaken); never blocks."""
        ...

    def queue(self, reply: Reply) -> None:
        """Queue an answer decided later than its request (a join that
        waited for the reader to give reading back); never blocks."""
        ...

    def disconnect(self) -> None:
        """Close the connection (it broke the rules)."""
        ...


class HostedChild(Protocol):
    """One child, as the core sees it."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def running(self) -> bool: ...

    @property
    def buffer(self) -> OutputBuffer: ...

    @property
    def master(self) -> int | None:
        """The table's own fd (never kept by the core past ``handle``)."""
        ...

    def read_available(self) -> None:
        """Move what the child's terminal still holds into the buffer
        (for an exited child)."""
        ...

    def describe(self, *, held: bool, foreground: bool = False) -> ChildInfo: ...


C = TypeVar("C", bound=HostedChild)


class ChildHost(Protocol[C]):
    """The children: what differs between the daemon and the simulator."""

    def get(self, child_id: int) -> C | None: ...

    def __iter__(self) -> Iterator[C]: ...

    def spawn(self, msg: Launch, env: dict[str, str]) -> C:
        """Start a child for a checked Launch (``env`` cleaned), not drained
        yet: the core then holds or unholds it. Raises LaunchError."""
        ...

    def hold(self, child: C) -> None:
        """A client holds ``child`` from now: stop draining it."""
        ...

    def unhold(self, child: C) -> None:
        """Nobody holds ``child`` from now: drain it (and start its linger)."""
        ...

    def collect(self, child: C) -> None:
        """Forget an exited child and close its fds."""
        ...

    def signal(self, child: C, signum: int) -> None: ...

    def resize(self, child: C, rows: int, cols: int) -> None: ...

    def share(self, child: C, tap: Callable[[bytes], None]) -> None:
        """Several clients hold ``child`` from now: the host reads it (into
        its buffer) and hands each read to ``tap`` (b"": its end); ``hold``
        or ``unhold`` ends that."""
        ...

    def pause(self, child: C) -> None:
        """Stop reading a shared ``child`` (from the read under way on):
        its holders are full."""
        ...

    def resume(self, child: C) -> None:
        """Read a paused shared ``child`` again."""
        ...

    def freed(self, nbytes: int) -> None:
        """``nbytes`` of buffered output left the table (handed over)."""
        ...


# --- answers -----------------------------------------------------------------------


@attrs.define
class Reply:
    """One frame to send, with the fds that go with its first byte (the
    reply's own: closed once sent, or by ``Answer.discard``)."""

    message: Message
    frame: bytes
    fds: list[OwnedFd] = attrs.field(factory=list)


@attrs.define
class Answer:
    """What the driver sends, in order, and what it does then."""

    replies: list[Reply]
    close: bool = False  # close the connection once the replies are sent
    shutdown: bool = False  # end every child first, then send, then stop
    upgrade: bool = False  # the driver upgrades the daemon in place, then answers

    def discard(self) -> None:
        """Close every fd of replies that will not be sent."""
        for reply in self.replies:
            close_all(reply.fds)


@attrs.define
class _PeerState:
    version: int | None = None  # negotiated; None before the handshake
    held: set[int] = attrs.field(factory=set)


Part = tuple[ClaimedChild, bytes, int | None]  # one child of a Claimed answer
Build = Callable[[list[Part], bool], Message]


def claim_batches(parts: list[Part]) -> Iterator[list[Part]]:
    """Split a claim's answer into groups of at most 253 fds and about
    CLAIM_BATCH_BYTES of output; always at least one group."""
    batch: list[Part] = []
    fds = size = 0
    for part in parts:
        has_fd = part[2] is not None
        if batch and (fds + has_fd > MAX_FDS_PER_FRAME or size + len(part[1]) > CLAIM_BATCH_BYTES):
            yield batch
            batch, fds, size = [], 0, 0
        batch.append(part)
        fds += has_fd
        size += len(part[1])
    yield batch


class RequestCore(Generic[C]):
    """The daemon's protocol state (peers, holders) over a ``ChildHost``."""

    def __init__(
        self,
        host: ChildHost[C],
        *,
        instance_id: str,
        pid: int,
        server: str,
        events: EventLog | None = None,
        share_size: str = "latest",
    ) -> None:
        self.host = host
        self.share_size = share_size
        self.instance_id = instance_id
        self.pid = pid
        self.server = server
        self.events = EventLog() if events is None else events
        self._peers: dict[Peer, _PeerState] = {}
        # Who holds each held child, and who reads its master (``_sharing``).
        self._sharing: dict[int, Sharing] = {}
        # The output feeds of holders the daemon reads for, by (child, peer).
        self._feeds: dict[tuple[int, Peer], Feed] = {}
        # Shared children whose master the daemon stopped reading, and since when.
        self._paused: dict[int, float] = {}
        # The feeds of holders a takeover took a child from, and when: kept
        # until they go, or TAKEN_GRACE (a client that stays never makes
        # the daemon run out of fds).
        self._taken_feeds: dict[Peer, list[tuple[float, Feed]]] = {}
        # A join's ``req``, while it waits for the reader to give reading back.
        self._joins: dict[tuple[int, Peer], int] = {}
        # When each reader that was asked to give reading back was asked.
        self._asked_at: dict[int, float] = {}
        # Called when ``tick`` has work (a reader asked, a holder behind),
        # and the clock ``tick`` is given the time of (the driver's).
        self.tick_wanted: Callable[[], None] = lambda: None
        self.clock: Callable[[], float] = time.monotonic
        # The daemon's own end, one at a time: a Shutdown accepted (it
        # stops), or an Upgrade under way (until ``upgrade_ended``).
        self._stopping = False
        self._upgrading = False

    # --- peers ----------------------------------------------------------------------

    def connect(self, peer: Peer) -> None:
        self._peers[peer] = _PeerState()

    def disconnect(self, peer: Peer) -> list[int]:
        """Every child ``peer`` held becomes unheld at once; returns their ids."""
        state = self._peers.pop(peer, None)
        self.events.unwatch(peer)
        for _, feed in self._taken_feeds.pop(peer, []):
            feed.close()
        if state is None:
            return []
        released = sorted(state.held)
        for child_id in released:
            child = self.host.get(child_id)
            sharing = self._sharing.get(child_id)
            if child is not None and sharing is not None and peer in sharing.holders:
                self._let_go(peer, child)
        for child_id, waiting in list(self._joins):
            if waiting is peer:  # a join that waited: gone with it
                del self._joins[child_id, peer]
                sharing = self._sharing.get(child_id)
                if sharing is not None:
                    sharing.leave(peer)
        return released

    @property
    def peers(self) -> int:
        return len(self._peers)

    def state_of(self, peer: Peer) -> tuple[int | None, list[int], int | None, list[int]]:
        """(the version ``peer`` negotiated, the ids it holds, the event it
        reads next if it watches, the ids of those it can give reading back
        of): what crosses an upgrade (``_upgrade.py``; none is shared then)."""
        state = self._peers[peer]
        shares = [i for i in sorted(state.held) if self._sharing[i].reader_shares]
        return state.version, sorted(state.held), self.events.cursor(peer), shares

    def adopt(
        self,
        peer: Peer,
        version: int | None,
        held: list[int],
        watch: int | None = None,
        shares: Sequence[int] = (),
    ) -> None:
        """A peer of the daemon before an upgrade, holding ``held`` (ids of
        children in the host; others are ignored), watching from ``watch``,
        able to give reading back of ``shares``."""
        state = self._peers[peer] = _PeerState(version)
        for child_id in held:
            if self.host.get(child_id) is not None and child_id not in self._sharing:
                state.held.add(child_id)
                self._sharing[child_id] = Sharing.sole(
                    peer, FEED_BOUND, self.share_size, shares=child_id in shares
                )
        if watch is not None:
            self.events.adopt_watcher(peer, watch)

    def upgraded(self) -> None:
        """The new code serves what the daemon before an upgrade served:
        its watchers are told (``daemon_upgraded``)."""
        self.events.record("daemon_upgraded", server=self.server)

    def holder(self, child_id: int) -> Peer | None:
        """The client that reads ``child_id``'s master, else the first that
        holds it; None if nobody does."""
        sharing = self._sharing.get(child_id)
        if sharing is None:
            return None
        return sharing.reader if sharing.reader is not None else next(iter(sharing.holders), None)

    def child_exited(self, child_id: int, exit_code: int) -> None:
        """Tell every client past its handshake, and the watchers."""
        child = self.host.get(child_id)
        self.events.ended(child_id, "" if child is None else child.name, exit_code)
        notice = ChildExited(id=child_id, exit_code=exit_code)
        for peer, state in list(self._peers.items()):
            if state.version is not None:
                peer.notify(notice)

    def output_seen(self, child: C) -> None:
        """The daemon read output of ``child``, which nobody holds: an
        activity event, at most one a second (``EventLog.activity``). Not
        once it has ended: what it wrote last is read after its end was
        told, and is no news."""
        if child.running:
            self.events.activity(child.id, child.name)

    def forget(self, child_id: int) -> None:
        """``child_id`` left the table without a Collect (a shutdown)."""
        self.events.forget(child_id)
        self._end_feeds(child_id)
        self._asked_at.pop(child_id, None)
        sharing = self._sharing.pop(child_id, None)
        for peer in [] if sharing is None else sharing.holders:
            if peer in self._peers:
                self._peers[peer].held.discard(child_id)

    # --- requests -------------------------------------------------------------------

    def handle(self, peer: Peer, msg: Message) -> Answer:
        """Decide one request: the state change is made and the replies are
        encoded, with their fds, before this returns. Raises only on a bug
        (the driver answers EIO and keeps serving)."""
        match msg:
            case Hello():
                return self._hello(peer, msg)
            case Launch():
                return self._launch(peer, msg)
            case Claim():
                return self._claim(peer, msg)
            case Release():
                return self._release(peer, msg)
            case ListChildren():
                return self._list(peer, msg)
            case Shutdown():
                return self._shutdown(peer, msg)
            case Upgrade():
                return self._upgrade(peer, msg)
            case Watch():
                return self._watch(peer, msg)
            case HandBack():
                return self._hand_back(peer, msg)
            case Signal() | Collect() | Peek() | Resize():
                child = self.host.get(msg.id)
                if child is None:
                    return self.error(peer, msg.req, errno.ENOENT, f"no child {msg.id}")
                return self._child_request(peer, child, msg)
            case _:  # the codec admits only client messages
                raise AssertionError(msg)

    def error(self, peer: Peer, req: int | None, err: int, text: str) -> Answer:
        return Answer([_reply(peer, Error(req=req, errno=err, message=text))])

    def _version(self, peer: Peer) -> int:
        return self._peers[peer].version or MIN_PROTOCOL_VERSION

    def _info(self, peer: Peer, child: C, *, held: bool, foreground: bool = False) -> ChildInfo:
        info = listed(child.describe(held=held, foreground=foreground), self._version(peer))
        sharing = self._sharing.get(child.id)
        if sharing is None or self._version(peer) < SHARING_VERSION:
            return info
        return replaced(info, holders=len(sharing.holders), watchers=sharing.watchers)

    def _hold(self, peer: Peer, child: C, *, shares: bool = False) -> None:
        """``peer`` alone holds ``child`` from now and reads its master (a
        claim that takes it, a launch; ``shares``: it can give reading
        back): every other holder is told it was taken, a join that waited
        is refused."""
        before = self._sharing.get(child.id)
        others = (
            []
            if before is None
            else [p for p in (*before.holders, *before.waiting) if p is not peer]
        )
        # Their feeds go quiet but stay open until they go (or TAKEN_GRACE):
        # the end of a feed tells a holder to read the master, and these are
        # told ChildTaken instead (on another channel, which may come later).
        for key in [key for key in self._feeds if key[0] == child.id]:
            self._taken_feeds.setdefault(key[1], []).append((self.clock(), self._feeds.pop(key)))
            self.tick_wanted()
        self._asked_at.pop(child.id, None)
        self._sharing[child.id] = Sharing.sole(peer, FEED_BOUND, self.share_size, shares=shares)
        self._peers[peer].held.add(child.id)
        self.host.hold(child)
        if before is None or (peer not in before.holders and not others):
            self.events.record("joined", child.id, child.name, client=peer.id)
        if not others:
            return
        self.events.record("taken_over", child.id, child.name, client=peer.id)
        for previous in others:
            req = self._joins.pop((child.id, previous), None)
            if req is not None:
                why = f"session {child.name} was taken over by another client"
                previous.queue(_failed_claim(previous, req, child.id, errno.EBUSY, why))
                continue
            if previous in self._peers:
                self._peers[previous].held.discard(child.id)
            previous.notify(ChildTaken(id=child.id))
            self.events.record("left", child.id, child.name, client=previous.id)

    def _let_go(self, peer: Peer, child: C) -> None:
        """``peer`` holds ``child`` no more (released, or gone). Nobody
        does: the host drains it; else the others go on (the one left
        may read the master itself again)."""
        sharing = self._sharing[child.id]
        feed = self._feeds.pop((child.id, peer), None)
        if feed is not None:
            feed.close()
        actions = sharing.leave(peer)
        self.events.record("left", child.id, child.name, client=peer.id)
        if not sharing.holders:
            del self._sharing[child.id]
            self._asked_at.pop(child.id, None)
            self.host.unhold(child)
            return
        self._act(child, sharing, actions)
        size = sharing.size()
        if size is not None:
            self.host.resize(child, *size)
        self._tell_shared(child, sharing)

    # --- several holders (docs/sharing.md) ------------------------------------------

    def _join(self, peer: Peer, msg: Claim) -> Answer:
        """A Claim with ``join`` or ``read_only``: hold the child beside its
        holders. The answer waits while its reader gives reading back."""
        if self._version(peer) < SHARING_VERSION:
            text = f"a join needs protocol version {SHARING_VERSION}"
            return self.error(peer, msg.req, errno.EPROTO, text)
        if len(msg.ids) != 1:
            text = f"a join names one session; {len(msg.ids)} were named"
            return self.error(peer, msg.req, errno.EINVAL, text)
        child = self.host.get(msg.ids[0])
        sharing = None if child is None else self._sharing.get(child.id)
        if child is None or not child.running or (sharing is None and not msg.read_only):
            # Nobody to join: a claim as ever (the master handed over, or
            # the end of an exited session shown), by a client that shares.
            return self._claim(peer, replaced(msg, join=False, read_only=False), shares=True)
        if sharing is not None and (peer in sharing.holders or peer in sharing.waiting):
            return self.error(
                peer, msg.req, errno.EBUSY, f"this client holds session {child.name} already"
            )
        reader = None if sharing is None else sharing.reader
        if reader is not None and sharing is not None and not sharing.reader_shares:
            text = f"session {child.name} is held by a client that does not share it"
            return self.error(peer, msg.req, errno.EBUSY, text)
        if sharing is None:  # only watchers: the daemon reads
            sharing = self._sharing[child.id] = Sharing(FEED_BOUND, self.share_size)
            self.host.hold(child)  # no linger while anybody watches
            self.host.share(child, self._tap_of(child.id))
        self._joins[child.id, peer] = msg.req
        replies = self._act(child, sharing, sharing.join(peer, read_only=msg.read_only), peer)
        self._tell_shared(child, sharing)
        return Answer(replies)

    def _hand_back(self, peer: Peer, msg: HandBack) -> Answer:
        """The reader stopped reading: the daemon reads from here, and
        feeds it too."""
        child = self.host.get(msg.id)
        sharing = self._sharing.get(msg.id)
        if child is None or sharing is None or sharing.reader is not peer or not sharing.asked:
            text = f"child {msg.id}: reading was not asked back of this client"
            return self.error(peer, msg.req, errno.EINVAL, text)
        try:
            read_end = self._new_feed(child.id, peer, sharing)
        except OSError as exc:  # it reads on; the joins wait for the timeout
            text = f"no feed for child {msg.id}: {exc.strerror}"
            return self.error(peer, msg.req, exc.errno or errno.EIO, text)
        reply = _reply(peer, HandedBack(req=msg.req, id=msg.id), [read_end])
        replies = [reply, *self._act(child, sharing, sharing.handed_back(peer, msg.shown), peer)]
        self._tell_shared(child, sharing)
        return Answer(replies)

    def _act(
        self, child: C, sharing: Sharing, actions: list[Any], current: Peer | None = None
    ) -> list[Reply]:
        """Do what ``sharing`` decided; the answers to ``current``'s own
        join are returned, the others' queued."""
        replies: list[Reply] = []
        work = collections.deque(actions)
        while work:
            match work.popleft():
                case Give():
                    raise AssertionError("a join is never handed the master")
                case AskBack(peer=reader):
                    reader.notify(GiveBack(id=child.id))
                    self._asked_at[child.id] = self.clock()
                    self.tick_wanted()
                case Resume(shown=shown):
                    self._asked_at.pop(child.id, None)
                    if shown:
                        child.buffer.replace(shown)
                    self.host.share(child, self._tap_of(child.id))
                case Joined(peer=joiner):
                    reply, undo = self._joined(joiner, child, sharing)
                    work.extend(undo)
                    if joiner is current:
                        replies.append(reply)
                    else:
                        joiner.queue(reply)
                case Send(peer=holder, data=data):
                    feed = self._feeds.get((child.id, holder))
                    sent = 0 if feed is None else feed.write(data)
                    if sent < len(data):
                        sharing.behind(holder, len(data) - sent)
                        self.tick_wanted()
                case TellSkipped(peer=holder, missed=missed):
                    feed = self._feeds.get((child.id, holder))
                    if feed is not None:
                        room = min(REDRAW_MAX, feed.capacity - feed.unread())
                        feed.write(redraw(child.buffer.peek()[0], room))
                    holder.notify(Skipped(id=child.id, missed=missed))
                case StopReading():
                    self.host.hold(child)
                case ReadIt(peer=holder):
                    feed = self._feeds.pop((child.id, holder), None)
                    if feed is not None:
                        feed.close()
        return replies

    def _joined(self, joiner: Peer, child: C, sharing: Sharing) -> tuple[Reply, list[Any]]:
        """The answer to ``joiner``'s join: the buffer's replay, the master
        (to type into) unless it only watches, and its feed. If that cannot
        be made, it holds nothing (and what that changes is returned)."""
        req = self._joins.pop((child.id, joiner))
        read_only = sharing.holders[joiner].read_only
        output, dropped = child.buffer.peek()
        fds: list[OwnedFd] = []
        try:
            if not read_only and child.master is not None:
                fds.append(OwnedFd.dup_of(child.master))
            fds.append(self._new_feed(child.id, joiner, sharing))
        except OSError as exc:
            close_all(fds)
            why = f"cannot hand over session {child.name}: {exc.strerror}"
            return _failed_claim(joiner, req, child.id, exc.errno or errno.EIO, why), sharing.leave(
                joiner
            )
        self._peers[joiner].held.add(child.id)
        self.events.record("joined", child.id, child.name, client=joiner.id)
        part = ClaimedChild(
            id=child.id,
            child=self._info(joiner, child, held=True),
            dropped=dropped,
            output_len=len(output),
            fd=len(fds) == 2,
            feed=True,
        )
        return _reply(joiner, Claimed(req=req, children=[part], outputs=output), fds), []

    def _new_feed(self, child_id: int, holder: Peer, sharing: Sharing) -> OwnedFd:
        """A feed for ``holder``; its read end, to hand over. Raises OSError."""
        feed, read_end = Feed.open()
        self._feeds[child_id, holder] = feed
        sharing.bound = min(sharing.bound, feed.capacity)
        return read_end

    def _tap_of(self, child_id: int) -> Callable[[bytes], None]:
        return lambda data: self._tap(child_id, data)

    def _tap(self, child_id: int, data: bytes) -> None:
        """The host read ``data`` from a shared child's master (b"": its
        end, and every feed ends with it)."""
        child = self.host.get(child_id)
        sharing = self._sharing.get(child_id)
        if child is None or sharing is None:
            return
        if not data:
            self._end_feeds(child_id)
            return
        self._act(child, sharing, [*self._taken(child_id, sharing), *sharing.read(data)])
        if self._least_free(child_id, sharing) < sharing.bound // PAUSE_FREE:
            self.host.pause(child)  # until they have read (``tick``)
            self._paused[child_id] = self.clock()
            self.tick_wanted()

    def _least_free(self, child_id: int, sharing: Sharing) -> int:
        """The least room in the feed of a holder that keeps up (not
        skipped), as last counted (``_taken``, then what was sent since);
        unbounded when none does (nobody to wait for)."""
        lagging = set(sharing.lagging)
        free = [
            feed.capacity - sharing.owed(holder)
            for holder in sharing.holders
            if holder not in lagging and (feed := self._feeds.get((child_id, holder))) is not None
        ]
        return min(free, default=1 << 62)

    def _taken(self, child_id: int, sharing: Sharing) -> list[Any]:
        """What each holder read of its feed since the last look."""
        actions: list[Any] = []
        for holder in list(sharing.holders):
            feed = self._feeds.get((child_id, holder))
            if feed is not None:
                owed = sharing.owed(holder)
                if owed:
                    actions += sharing.taken(holder, owed - feed.unread())
        return actions

    def tick(self, now: float) -> float | None:
        """Look again at what waits on time: a reader asked to give reading
        back too long ago is disconnected; a holder that was behind and has
        read its feed empty is told what it missed; a paused master is read
        again once its holders have read enough (``_tap`` paused it). The
        seconds until the next look, or None: nothing waits."""
        wait: float | None = None
        for child_id, since in list(self._paused.items()):
            sharing = self._sharing.get(child_id)
            child = self.host.get(child_id)
            if child is None or sharing is None or sharing.reader is not None:
                del self._paused[child_id]  # not read by the daemon any more
                continue
            self._act(child, sharing, self._taken(child_id, sharing))
            if now - since >= LAG_WAIT or (
                self._least_free(child_id, sharing) >= sharing.bound // RESUME_FREE
            ):
                del self._paused[child_id]
                self.host.resume(child)
            else:
                wait = PAUSED_TICK
        again = False
        for child_id, sharing in list(self._sharing.items()):
            asked = self._asked_at.get(child_id)
            if asked is not None and sharing.reader is not None:
                if now - asked > HANDBACK_TIMEOUT:
                    del self._asked_at[child_id]
                    sharing.reader.disconnect()
                else:
                    again = True
            child = self.host.get(child_id)
            if child is not None and sharing.lagging:
                self._act(child, sharing, self._taken(child_id, sharing))
                again = again or bool(sharing.lagging)
        if self._close_taken_feeds(now):
            again = True
        return wait if wait is not None or not again else WAIT_TICK

    def _close_taken_feeds(self, now: float) -> bool:
        """Close the feeds of taken holders that were told TAKEN_GRACE ago;
        True while some wait still."""
        for peer, feeds in list(self._taken_feeds.items()):
            for since, feed in [f for f in feeds if now - f[0] >= TAKEN_GRACE]:
                feed.close()
                feeds.remove((since, feed))
            if not feeds:
                del self._taken_feeds[peer]
        return bool(self._taken_feeds)

    def _tell_shared(self, child: C, sharing: Sharing) -> None:
        """Every holder that knows sharing is told how many hold and watch
        the child, its size, and whether that is theirs."""
        info = child.describe(held=True)
        for holder in sharing.holders:
            if self._version(holder) >= SHARING_VERSION:
                notice = Shared(
                    id=child.id,
                    holders=len(sharing.holders),
                    watchers=sharing.watchers,
                    rows=info.rows,
                    cols=info.cols,
                    yours=sharing.sizes.get(holder) == (info.rows, info.cols),
                )
                holder.notify(notice)

    def _end_feeds(self, child_id: int) -> None:
        for key in [key for key in self._feeds if key[0] == child_id]:
            self._feeds.pop(key).close()

    def _hello(self, peer: Peer, msg: Hello) -> Answer:
        lo, hi = max(msg.min_version, MIN_PROTOCOL_VERSION), min(msg.max_version, PROTOCOL_VERSION)
        if lo > hi:
            refused = Refused(
                reason=(
                    f"no common protocol version: client speaks {msg.min_version}..{msg.max_version}, "
                    f"daemon speaks {MIN_PROTOCOL_VERSION}..{PROTOCOL_VERSION}"
                ),
                min_version=MIN_PROTOCOL_VERSION,
                max_version=PROTOCOL_VERSION,
            )
            return Answer([_reply(peer, refused)], close=True)
        self._peers[peer].version = hi
        infos = (
            [self._info(peer, c, held=c.id in self._sharing) for c in self.host]
            if msg.children
            else []
        )

        def build(items: list[ChildInfo], last: bool, first: bool) -> Message:
            if first:
                welcome = Welcome(
                    version=hi,
                    instance_id=self.instance_id,
                    pid=self.pid,
                    server=self.server,
                    children=items,
                    more=not last,
                )
                return welcome
            return Children(req=0, children=items, last=last)

        try:
            return Answer(self._pages(peer, infos, build, hi))
        except FrameTooLarge:
            self._peers[peer].version = None
            return Answer(
                [
                    _reply(
                        peer,
                        Error(
                            req=None,
                            errno=errno.E2BIG,
                            message=f"the listing of {len(infos)} children does not fit one frame of"
                            f" protocol version {hi}: upgrade the client (version {PAGED_VERSION} pages it)",
                        ),
                    )
                ],
                close=True,
            )

    def _list(self, peer: Peer, msg: ListChildren) -> Answer:
        version = self._version(peer)
        problem = select_problem(msg.prefixes, msg.ids)
        if problem is not None:
            return self.error(peer, msg.req, errno.E2BIG, problem)
        ids = None if msg.ids is None else frozenset(msg.ids)
        infos = [
            self._info(peer, c, held=c.id in self._sharing, foreground=msg.foreground)
            for c in self.host
            if selected(c.name, c.id, msg.prefixes, ids)
        ]

        def build(items: list[ChildInfo], last: bool, first: bool) -> Message:
            return Children(req=msg.req, children=items, last=last)

        try:
            return Answer(self._pages(peer, infos, build, version))
        except FrameTooLarge:
            return self.error(
                peer,
                msg.req,
                errno.E2BIG,
                f"the listing of {len(infos)} children does not fit one frame of protocol"
                f" version {version}: upgrade the client (version {PAGED_VERSION} pages it)",
            )

    def _pages(
        self,
        peer: Peer,
        infos: list[ChildInfo],
        build: Callable[[list[ChildInfo], bool, bool], Message],
        version: int,
    ) -> list[Reply]:
        """A listing in as many frames as it needs (one, before version 4)."""
        if version < PAGED_VERSION:
            return [_reply(peer, build(infos, True, True))]
        return [
            Reply(m, f)
            for m, f in _fit(peer, infos, lambda items, last, first: (build(items, last, first), 0))
        ]

    def _launch(self, peer: Peer, msg: Launch) -> Answer:
        name_taken = bool(msg.name) and any(c.name == msg.name for c in self.host)
        problem = launch_problem(
            msg.argv, msg.env, msg.cwd, msg.rows, msg.cols, msg.name, msg.linger, name_taken
        )
        if problem is not None:
            return self.error(peer, msg.req, *problem)
        try:
            child = self.host.spawn(msg, child_env(msg.env))
        except LaunchError as exc:
            return self.error(peer, msg.req, exc.errno, exc.message)
        self.events.record("created", child.id, child.name, client=peer.id)
        if not msg.hold:
            self.host.unhold(child)
            launched = Launched(req=msg.req, child=self._info(peer, child, held=False))
            return Answer([_reply(peer, launched)])
        assert child.master is not None
        try:
            fds = dup_all([child.master])
        except OSError as exc:
            self.host.unhold(child)
            return self.error(
                peer,
                msg.req,
                exc.errno or errno.EIO,
                f"session {child.name} started, but its terminal could not be handed over"
                f" ({exc.strerror}); it runs detached",
            )
        launched = Launched(req=msg.req, child=self._info(peer, child, held=True))
        reply = _reply(peer, launched, fds)
        self._hold(peer, child, shares=msg.share and self._version(peer) >= SHARING_VERSION)
        return Answer([reply])

    def _claim(self, peer: Peer, msg: Claim, *, shares: bool = False) -> Answer:
        if msg.join or msg.read_only:
            return self._join(peer, msg)
        if len(msg.ids) > MAX_REQUEST_IDS:
            return self.error(
                peer,
                msg.req,
                errno.EINVAL,
                f"a claim of {len(msg.ids)} children; at most {MAX_REQUEST_IDS} in one request",
            )
        # 1. The whole answer, nothing changed yet.
        parts: list[Part] = []
        taking: dict[int, C] = {}
        for child_id in msg.ids:
            child = self.host.get(child_id)
            if child is None:
                parts.append(
                    (
                        ClaimedChild(
                            id=child_id, errno=errno.ENOENT, message=f"no child {child_id}"
                        ),
                        b"",
                        None,
                    )
                )
                continue
            sharing = self._sharing.get(child_id)
            others = sharing is not None and any(
                p is not peer for p in (*sharing.holders, *sharing.waiting)
            )
            if others and not msg.steal:
                busy = f"session {child.name} is held by another client"
                parts.append(
                    (ClaimedChild(id=child_id, errno=errno.EBUSY, message=busy), b"", None)
                )
                continue
            if child_id in taking:  # asked twice: its output went with the first
                output, dropped = b"", 0
            else:
                if not child.running:
                    child.read_available()  # into the buffer: nothing lost if we stop here
                output, dropped = child.buffer.peek()
                taking[child_id] = child
            fd = child.master if child.running else None
            part = ClaimedChild(
                id=child_id,
                child=self._info(peer, child, held=True),
                dropped=dropped,
                output_len=len(output),
                fd=fd is not None,
            )
            parts.append((part, output, fd))
        # 2. Its fds, duplicated now, all or none.
        try:
            owned = dup_all(fd for _, _, fd in parts if fd is not None)
        except OSError as exc:
            return self.error(
                peer,
                msg.req,
                exc.errno or errno.EIO,
                f"cannot hand over {sum(1 for p in parts if p[2] is not None)} terminal(s):"
                f" {exc.strerror}; nothing was claimed and the output is kept",
            )
        # 3. Its frames.
        try:
            replies = self._claimed_frames(peer, msg.req, parts, owned)
        except FrameTooLarge as exc:
            close_all(owned)
            return self.error(
                peer,
                msg.req,
                errno.E2BIG,
                f"the answer cannot be framed ({exc}); nothing was claimed and the output is kept",
            )
        except BaseException:
            close_all(owned)
            raise
        # 4. Only now: holders and buffers.
        for child in taking.values():
            self._hold(peer, child, shares=shares)
            if not msg.keep_output:
                output, _ = child.buffer.take()
                self.host.freed(len(output))
        return Answer(replies)

    def _claimed_frames(
        self, peer: Peer, req: int, parts: list[Part], owned: list[OwnedFd]
    ) -> list[Reply]:
        def build(items: list[Part], last: bool, first: bool) -> tuple[Message, int]:
            claimed = Claimed(
                req=req,
                children=[p for p, _, _ in items],
                last=last,
                outputs=b"".join(o for _, o, _ in items),
            )
            return claimed, sum(1 for _, _, fd in items if fd is not None)

        batches = list(claim_batches(parts))
        replies: list[Reply] = []
        next_fd = iter(owned)
        for i, batch in enumerate(batches):
            for message, frame in _fit(peer, batch, build, last=i == len(batches) - 1):
                assert isinstance(message, Claimed)
                fds = [next(next_fd) for c in message.children if c.fd]
                replies.append(Reply(message, frame, fds))
        return replies

    def _release(self, peer: Peer, msg: Release) -> Answer:
        if len(msg.ids) > MAX_REQUEST_IDS:
            return self.error(
                peer,
                msg.req,
                errno.EINVAL,
                f"a release of {len(msg.ids)} children; at most {MAX_REQUEST_IDS} in one request",
            )
        replies: list[Reply] = []
        released: list[int] = []
        for child_id in msg.ids:
            child = self.host.get(child_id)
            sharing = self._sharing.get(child_id)
            if child is None or sharing is None or peer not in sharing.holders:
                err, why = (
                    (errno.ENOENT, f"no child {child_id}")
                    if child is None
                    else (errno.EPERM, f"child {child_id} is not held by this client")
                )
                failed = ChildError(req=msg.req, id=child_id, errno=err, message=why)
                replies.append(_reply(peer, failed))
                continue
            self._peers[peer].held.discard(child_id)
            if msg.replace_output and sharing.reader is peer:  # it alone read the master
                child.buffer.replace(msg.output)
            self._let_go(peer, child)
            released.append(child_id)
        replies.append(_reply(peer, Released(req=msg.req, ids=released)))
        return Answer(replies)

    def _child_request(self, peer: Peer, child: C, msg: Signal | Collect | Peek | Resize) -> Answer:
        held = child.id in self._sharing
        match msg:
            case Signal():
                if msg.signum not in VALID_SIGNALS or msg.signum == 0:
                    return self.error(peer, msg.req, errno.EINVAL, f"bad signal {msg.signum}")
                if not child.running:
                    return self.error(peer, msg.req, errno.ESRCH, f"child {msg.id} has exited")
                self.host.signal(child, msg.signum)
                self.events.signalled(child.id, msg.signum)
                return Answer([_reply(peer, Ok(req=msg.req))])
            case Collect():
                if child.running:
                    return self.error(
                        peer, msg.req, errno.EBUSY, f"child {msg.id} is still running"
                    )
                child.read_available()
                collected = Collected(req=msg.req, child=self._info(peer, child, held=held))
                reply = _reply(peer, collected)
                self.forget(child.id)
                self.host.collect(child)
                return Answer([reply])
            case Peek():
                if msg.max_bytes is not None and msg.max_bytes < 0:
                    return self.error(peer, msg.req, errno.EINVAL, "max_bytes must be >= 0")
                if not child.running and not held:
                    child.read_available()
                output, dropped = child.buffer.peek(msg.max_bytes)
                peeked = Peeked(
                    req=msg.req,
                    child=self._info(peer, child, held=held),
                    dropped=dropped,
                    output=output,
                )
                return Answer([_reply(peer, peeked)])
            case Resize():
                if not (1 <= msg.rows <= 10000 and 1 <= msg.cols <= 10000):
                    return self.error(
                        peer, msg.req, errno.EINVAL, f"bad terminal size {msg.rows}x{msg.cols}"
                    )
                sharing = self._sharing.get(child.id)
                if sharing is None or peer not in sharing.holders:
                    self.host.resize(child, msg.rows, msg.cols)
                elif (size := sharing.resized(peer, msg.rows, msg.cols)) is not None:
                    self.host.resize(child, *size)  # by the size policy
                    if sharing.shared:
                        self._tell_shared(child, sharing)
                return Answer([_reply(peer, Ok(req=msg.req))])

    # --- the daemon's own end: a Shutdown or an Upgrade, one at a time ----------
    #
    # A Shutdown that ends the sessions while an upgrade replaces the code
    # left the daemon running with none, the stop's connection cut, and
    # clients paused until the sessions had ended (issue 35). The first
    # to come wins; the other is refused (EBUSY) in one line.

    def _shutdown(self, peer: Peer, msg: Shutdown) -> Answer:
        if self._upgrading:
            return self.error(
                peer,
                msg.req,
                errno.EBUSY,
                "the daemon is being upgraded: not stopped; stop it once the upgrade is done",
            )
        running = sum(1 for c in self.host if c.running)
        if running and not msg.force:
            return self.error(
                peer,
                msg.req,
                errno.EBUSY,
                f"{running} session(s) still running; use --force to end them",
            )
        self._stopping = True
        return Answer([_reply(peer, Ok(req=msg.req))], shutdown=True)

    def _upgrade(self, peer: Peer, msg: Upgrade) -> Answer:
        if self._version(peer) < UPGRADE_VERSION:
            text = f"Upgrade needs protocol version {UPGRADE_VERSION}"
            return self.error(peer, msg.req, errno.EPROTO, text)
        if self._stopping:
            return self.error(peer, msg.req, errno.EBUSY, "the daemon is stopping")
        if self._upgrading:
            return self.error(peer, msg.req, errno.EBUSY, "an upgrade is already under way")
        shared = [i for i, sharing in self._sharing.items() if sharing.shared]
        if shared:
            text = (
                f"{len(shared)} session(s) are shared or watched by several clients: the"
                " daemon upgrades once each is held by one client or none (detach the others)"
            )
            return self.error(peer, msg.req, errno.EBUSY, text)
        self._upgrading = True
        return Answer([], upgrade=True)

    def _watch(self, peer: Peer, msg: Watch) -> Answer:
        if self._version(peer) < EVENTS_VERSION:
            text = f"Watch needs protocol version {EVENTS_VERSION}"
            return self.error(peer, msg.req, errno.EPROTO, text)
        problem = self.events.watch(peer, msg.since)
        if problem is not None:
            return self.error(peer, msg.req, errno.EINVAL, problem)
        return Answer([_reply(peer, Watching(req=msg.req, next_seq=self.events.next_seq))])

    def upgrade_ended(self) -> None:
        """The driver's upgrade did not replace the code (refused, failed):
        a Shutdown or another Upgrade may come."""
        self._upgrading = False


def _failed_claim(peer: Peer, req: int, child_id: int, err: int, why: str) -> Reply:
    """The answer to a join that holds nothing after all."""
    part = ClaimedChild(id=child_id, errno=err, message=why)
    return _reply(peer, Claimed(req=req, children=[part]))


def _reply(peer: Peer, msg: Message, fds: list[OwnedFd] | None = None) -> Reply:
    """Encode ``msg`` for ``peer``; its fds are closed if that fails."""
    fds = fds or []
    try:
        return Reply(msg, peer.encode(msg, len(fds)), fds)
    except BaseException:
        close_all(fds)
        raise


T = TypeVar("T")


def _fit(
    peer: Peer,
    items: list[T],
    build: Callable[[list[T], bool, bool], tuple[Message, int]],
    last: bool = True,
    first: bool = True,
) -> list[tuple[Message, bytes]]:
    """``items`` in as few frames as fit: one if it can, else halves, each
    split again as needed. ``build(items, last, first)`` makes one frame's
    message and says how many fds go with it. Raises FrameTooLarge if one
    item alone does not fit."""
    message, nfds = build(items, last, first)
    try:
        return [(message, peer.encode(message, nfds))]
    except FrameTooLarge:
        if len(items) <= 1:
            raise
    mid = len(items) // 2
    return _fit(peer, items[:mid], build, False, first) + _fit(
        peer, items[mid:], build, last, False
    )
