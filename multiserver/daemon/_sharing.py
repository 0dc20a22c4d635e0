"""Several clients on one session: who reads its PTY master, and what each
client that holds it is owed (pure: events in, actions out; issue 38).

With one client the master is handed over, as ever: that client reads it
itself (``Give``). When a second joins, reading comes back to the daemon
first: the reader is asked (``AskBack``), stops reading, and answers with
what it showed (``handed_back``); only then does the daemon read, so no
byte is read by both or by neither. From there every read goes to every
holder (``Send``), after the replay each got on joining (``Joined``).
When one typing holder is left, the daemon stops reading and tells it to
read the master itself again (``ReadIt``), after every ``Send`` before it
on the same connection: again no byte is lost, doubled or reordered.

A holder whose connection has not taken more than ``bound`` bytes of this
session's output is not sent more: what it misses is counted, and once
it has taken what it was sent it is told how much it missed, with a
redraw (``TellSkipped``). The program and the other holders never wait for
it. A read-only holder (``attach -r``) is never handed the master.

One PTY has one size. With several holders it follows the size policy
(``SIZE_POLICIES``): "latest", the size of the holder that typed or
resized last (tmux's default since 3.1), or "smallest", the smallest
rows and columns of them all. A read-only holder's size never counts.

The caller (the request core) owns the I/O: it hands the fd, asks, reads,
sends, and tells this module what happened (``join``, ``leave``,
``handed_back``, ``read``, ``taken``, ``resized``).
"""

from __future__ import annotations

from multiserver.protocol._record import mutable_record, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # A client, as its caller knows it (hashable; the core's connections).
    Peer = Any


@record
class Give:
    """Hand ``peer`` the master: it reads it itself (with the buffer's
    replay before, as a claim has it)."""

    peer: Peer


@record
class AskBack:
    """Ask ``peer``, which reads the master, to stop and answer with what
    it showed; the daemon does not read until it has (``handed_back``)."""

    peer: Peer


@record
class Resume:
    """Reading came back: the buffer takes ``shown`` (what the reader
    showed, as a release's ``replace_output``), and the daemon reads the
    master from here on."""

    shown: bytes


@record
class Joined:
    """Answer ``peer``'s join: the buffer's replay, then every read."""

    peer: Peer


@record
class Send:
    """Output the daemon read, for ``peer``."""

    peer: Peer
    data: bytes


@record
class TellSkipped:
    """``peer`` missed ``missed`` bytes while it was behind: tell it, with
    a redraw from the buffer."""

    peer: Peer
    missed: int


@record
class StopReading:
    """The daemon stops reading the master (a holder will)."""


@record
class ReadIt:
    """``peer`` reads the master itself again (after every ``Send``
    before this on its connection)."""

    peer: Peer


SIZE_POLICIES = ("latest", "smallest")

Action = Give | AskBack | Resume | Joined | Send | TellSkipped | StopReading | ReadIt


@mutable_record
class _Holder:
    read_only: bool
    owed: int = 0  # sent, and not yet taken by its connection
    missed: int = 0  # not sent while it was behind; said once it catches up


class Sharing:
    """One session's holders, in the order they joined, and who reads."""

    def __init__(self, bound: int, policy: str = "latest") -> None:
        if policy not in SIZE_POLICIES:
            raise ValueError(f"size policy must be one of {', '.join(SIZE_POLICIES)}: {policy!r}")
        self.bound = bound
        self.policy = policy
        self.holders: dict[Peer, _Holder] = {}
        self.sizes: dict[Peer, tuple[int, int]] = {}  # typing holders' sizes, latest last
        self.reader: Peer | None = None  # a holder reading the master; None: the daemon
        self._asked = False  # the reader was asked to hand reading back
        # The reader can give reading back: it joined, or said so when it
        # took the session; one that did not is never asked.
        self.reader_shares = True
        self._waiting: dict[Peer, bool] = {}  # joins waiting for that (read_only)

    @classmethod
    def sole(
        cls, peer: Peer, bound: int, policy: str = "latest", *, shares: bool = False
    ) -> Sharing:
        """``peer`` alone holds the session and reads its master (a claim
        that takes it, a launch that holds it); ``shares``: it can give
        reading back (it said so), so others may join."""
        sharing = cls(bound, policy)
        sharing.holders[peer] = _Holder(read_only=False)
        sharing.reader = peer
        sharing.reader_shares = shares
        return sharing

    @property
    def shared(self) -> bool:
        """The daemon reads the master (or is about to) and feeds the
        holders: more than one holds it, or only watchers do."""
        return self.reader is None or self._asked or len(self.holders) > 1

    @property
    def watchers(self) -> int:
        return sum(1 for holder in self.holders.values() if holder.read_only)

    def join(self, peer: Peer, *, read_only: bool = False) -> list[Action]:
        if peer in self.holders or peer in self._waiting:
            raise ValueError("this client holds the session already")
        if self._asked:
            self._waiting[peer] = read_only
            return []
        if not self.holders and not read_only:
            self.holders[peer] = _Holder(read_only=False)
            self.reader = peer
            return [Give(peer)]
        if self.reader is not None:
            self._asked = True
            self._waiting[peer] = read_only
            return [AskBack(self.reader)]
        self.holders[peer] = _Holder(read_only)
        return [Joined(peer)]

    def handed_back(self, peer: Peer, shown: bytes) -> list[Action]:
        """The reader stopped reading; ``shown``: what it showed."""
        if not self._asked or peer != self.reader:
            raise ValueError("reading was not asked back of this client")
        self._asked = False
        self.reader = None
        actions: list[Action] = [Resume(shown)]
        waiting, self._waiting = self._waiting, {}
        for joiner, read_only in waiting.items():
            self.holders[joiner] = _Holder(read_only)
            actions.append(Joined(joiner))
        return actions + self._settle()

    @property
    def asked(self) -> bool:
        """The reader was asked to give reading back and has not yet."""
        return self._asked

    @property
    def waiting(self) -> list[Peer]:
        """Joins waiting for the reader's answer, in order."""
        return list(self._waiting)

    def behind(self, peer: Peer, missed: int) -> None:
        """``missed`` bytes sent to ``peer`` did not reach it after all (its
        feed had less room than counted): it is behind, as if not sent."""
        holder = self.holders.get(peer)
        if holder is not None:
            holder.missed += missed

    def owed(self, peer: Peer) -> int:
        """What was sent to ``peer`` and not yet taken, as last counted."""
        holder = self.holders.get(peer)
        return 0 if holder is None else holder.owed

    @property
    def lagging(self) -> list[Peer]:
        """Holders told nothing yet of what they missed."""
        return [peer for peer, holder in self.holders.items() if holder.missed]

    def resized(self, peer: Peer, rows: int, cols: int) -> tuple[int, int] | None:
        """``peer`` has a terminal of ``rows`` x ``cols`` and typed or
        resized: the session's size by the policy, or None if it does not
        count (a read-only holder, or not a holder)."""
        holder = self.holders.get(peer)
        if holder is None or holder.read_only:
            return None
        self.sizes.pop(peer, None)
        self.sizes[peer] = (rows, cols)
        return self.size()

    def size(self) -> tuple[int, int] | None:
        """The session's size by the policy, from the typing holders'
        sizes known; None if none is."""
        if not self.sizes:
            return None
        if self.policy == "smallest":
            return min(r for r, _ in self.sizes.values()), min(c for _, c in self.sizes.values())
        return next(reversed(self.sizes.values()))

    def leave(self, peer: Peer) -> list[Action]:
        """``peer`` released the session or went away."""
        self._waiting.pop(peer, None)
        self.sizes.pop(peer, None)
        if self.holders.pop(peer, None) is None:
            return []
        if peer == self.reader:
            # Its copy of the master went with it: the daemon reads, as after
            # a release; a join that waited on its answer is answered now.
            self.reader = None
            self._asked = False
            actions: list[Action] = [Resume(b"")]
            waiting, self._waiting = self._waiting, {}
            for joiner, read_only in waiting.items():
                self.holders[joiner] = _Holder(read_only)
                actions.append(Joined(joiner))
            return actions + self._settle()
        return self._settle()

    def read(self, data: bytes) -> list[Action]:
        """The daemon read ``data`` from the master (only while it reads)."""
        if self.reader is not None:
            raise ValueError("a client reads this master: the daemon does not")
        actions: list[Action] = []
        for peer, holder in self.holders.items():
            if holder.missed or holder.owed + len(data) > self.bound:
                holder.missed += len(data)
                continue
            holder.owed += len(data)
            actions.append(Send(peer, data))
        return actions

    def taken(self, peer: Peer, nbytes: int) -> list[Action]:
        """``peer``'s connection took ``nbytes`` of what it was sent."""
        holder = self.holders.get(peer)
        if holder is None:
            return []
        holder.owed = max(0, holder.owed - nbytes)
        if holder.owed == 0 and holder.missed:
            missed, holder.missed = holder.missed, 0
            return [TellSkipped(peer, missed)]
        return []

    def _settle(self) -> list[Action]:
        """One typing holder left, and nobody asked: it reads again."""
        if self.reader is not None or self._asked or len(self.holders) != 1:
            return []
        ((peer, holder),) = self.holders.items()
        if holder.read_only:
            return []
        self.reader = peer
        actions: list[Action] = [StopReading()]
        if holder.missed:
            actions.append(TellSkipped(peer, holder.missed))
            holder.missed = 0
        holder.owed = 0
        return [*actions, ReadIt(peer)]


# What starts a screen anew: a clear, a reset, the alternate screen entered.
_FRESH = (b"\x1b[2J", b"\x1bc", b"\x1b[?1049h", b"\x1b[?1047h", b"\x1b[?47h")
_HOME_CLEAR = b"\x1b[H\x1b[2J"


def redraw(data: bytes, room: int) -> bytes:
    """What a holder that skipped ahead is written in its feed (at most
    ``room`` bytes): the screen cleared, then the end of the output
    ``data`` from its last fresh screen (a clear, a reset, the alternate
    screen entered) in that end, or else from a line start: what a
    terminal shows of it, as near as the bytes at hand tell."""
    keep = room - len(_HOME_CLEAR)
    if keep <= 0:
        return b""
    tail = data[-keep:]
    start = max(tail.rfind(fresh) for fresh in _FRESH)
    if start < 0 and len(tail) < len(data):  # cut: from the first whole line
        start = tail.find(b"\n") + 1
    return _HOME_CLEAR + tail[max(start, 0) :]
