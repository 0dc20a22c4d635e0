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
- **Holders.** Who holds which child is the core's state: a child has at
  most one holder; a client that goes away gives back everything it held.
- **Events.** What happens to a session (launched, held, let go, taken
  over, ended, writing) is recorded in the core's ``EventLog``
  (``_events``) in the step that decides it, in one place for each kind:
  ``_launch`` (created), ``_hold`` (joined, taken over), ``_let_go``
  (left), ``child_exited`` (exited, killed), ``output_seen`` (activity),
  ``upgraded``; watchers read them from there.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

import attrs

from multiserver.daemon._events import EventLog
from multiserver.daemon._fds import OwnedFd, close_all, dup_all
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
    Shutdown,
    Signal,
    Upgrade,
    Watch,
    Watching,
    Welcome,
)
from multiserver.protocol._proto import (
    EVENTS_VERSION,
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
    ) -> None:
        self.host = host
        self.instance_id = instance_id
        self.pid = pid
        self.server = server
        self.events = EventLog() if events is None else events
        self._peers: dict[Peer, _PeerState] = {}
        self._holders: dict[int, Peer] = {}
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
        if state is None:
            return []
        released = sorted(state.held)
        for child_id in released:
            child = self.host.get(child_id)
            if self._holders.get(child_id) is peer:
                del self._holders[child_id]
                if child is not None:
                    self._let_go(peer, child)
        return released

    @property
    def peers(self) -> int:
        return len(self._peers)

    def state_of(self, peer: Peer) -> tuple[int | None, list[int], int | None]:
        """(the version ``peer`` negotiated, the ids it holds, the event it
        reads next if it watches): what crosses an upgrade (``_upgrade.py``)."""
        state = self._peers[peer]
        return state.version, sorted(state.held), self.events.cursor(peer)

    def adopt(
        self, peer: Peer, version: int | None, held: list[int], watch: int | None = None
    ) -> None:
        """A peer of the daemon before an upgrade, holding ``held`` (ids of
        children in the host; others are ignored), watching from ``watch``."""
        state = self._peers[peer] = _PeerState(version)
        for child_id in held:
            if self.host.get(child_id) is not None and child_id not in self._holders:
                state.held.add(child_id)
                self._holders[child_id] = peer
        if watch is not None:
            self.events.adopt_watcher(peer, watch)

    def upgraded(self) -> None:
        """The new code serves what the daemon before an upgrade served:
        its watchers are told (``daemon_upgraded``)."""
        self.events.record("daemon_upgraded", server=self.server)

    def holder(self, child_id: int) -> Peer | None:
        return self._holders.get(child_id)

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
        peer = self._holders.pop(child_id, None)
        if peer is not None and peer in self._peers:
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
        return listed(child.describe(held=held, foreground=foreground), self._version(peer))

    def _hold(self, peer: Peer, child: C) -> None:
        previous = self._holders.get(child.id)
        self._holders[child.id] = peer
        self._peers[peer].held.add(child.id)
        self.host.hold(child)
        if previous is None:
            self.events.record("joined", child.id, child.name, client=peer.id)
        elif previous is not peer:
            if previous in self._peers:
                self._peers[previous].held.discard(child.id)
            previous.notify(ChildTaken(id=child.id))
            self.events.record("taken_over", child.id, child.name, client=peer.id)
            self.events.record("left", child.id, child.name, client=previous.id)

    def _let_go(self, peer: Peer, child: C) -> None:
        """``peer`` holds ``child`` no more (released, or gone), and nobody
        does: the host drains it."""
        self.host.unhold(child)
        self.events.record("left", child.id, child.name, client=peer.id)

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
            [self._info(peer, c, held=c.id in self._holders) for c in self.host]
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
            self._info(peer, c, held=c.id in self._holders, foreground=msg.foreground)
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
        self._hold(peer, child)
        return Answer([reply])

    def _claim(self, peer: Peer, msg: Claim) -> Answer:
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
            holder = self._holders.get(child_id)
            if holder is not None and holder is not peer and not msg.steal:
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
            self._hold(peer, child)
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
            if child is None or self._holders.get(child_id) is not peer:
                err, why = (
                    (errno.ENOENT, f"no child {child_id}")
                    if child is None
                    else (errno.EPERM, f"child {child_id} is not held by this client")
                )
                failed = ChildError(req=msg.req, id=child_id, errno=err, message=why)
                replies.append(_reply(peer, failed))
                continue
            del self._holders[child_id]
            self._peers[peer].held.discard(child_id)
            if msg.replace_output:
                child.buffer.replace(msg.output)
            self._let_go(peer, child)
            released.append(child_id)
        replies.append(_reply(peer, Released(req=msg.req, ids=released)))
        return Answer(replies)

    def _child_request(self, peer: Peer, child: C, msg: Signal | Collect | Peek | Resize) -> Answer:
        held = child.id in self._holders
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
                self.host.resize(child, msg.rows, msg.cols)
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
