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
redraw (``Skipped``). The program and the other holders never wait for
it. A read-only holder (``attach -r``) is never handed the master.

The caller (the request core) owns the I/O: it hands the fd, asks, reads,
sends, and tells this module what happened (``join``, ``leave``,
``handed_back``, ``read``, ``taken``).
"""

from __future__ import annotations

from multiserver.protocol._record import mutable_record, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Hashable

    Peer = Hashable


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
class Skipped:
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


Action = Give | AskBack | Resume | Joined | Send | Skipped | StopReading | ReadIt


@mutable_record
class _Holder:
    read_only: bool
    owed: int = 0  # sent, and not yet taken by its connection
    missed: int = 0  # not sent while it was behind; said once it catches up


class Sharing:
    """One session's holders, in the order they joined, and who reads."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.holders: dict[Peer, _Holder] = {}
        self.reader: Peer | None = None  # a holder reading the master; None: the daemon
        self._asked = False  # the reader was asked to hand reading back
        self._waiting: dict[Peer, bool] = {}  # joins waiting for that (read_only)

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

    def leave(self, peer: Peer) -> list[Action]:
        """``peer`` released the session or went away."""
        self._waiting.pop(peer, None)
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
            return [Skipped(peer, missed)]
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
            actions.append(Skipped(peer, holder.missed))
            holder.missed = 0
        holder.owed = 0
        return [*actions, ReadIt(peer)]
