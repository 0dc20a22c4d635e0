"""The daemon's events (protocol version 8, docs/events.md): what happened
to its sessions, in one order, kept for the clients that watch
(``Watch``). Pure, like the request core that owns it (``_core``): no trio,
no socket; the core records every event here, in the step that decides
it, so that the real daemon and the simulator record the same.

Rules, all here:

- **One order.** ``seq`` counts from 1 for a daemon instance, one number
  an event, and crosses an upgrade with the instance (``snapshot``).
- **One ring.** The last ``RING`` events are kept, whoever watches: a
  watcher reads them from where it is (its cursor, in the core), so a
  watcher costs the daemon a cursor, not a queue of its own. One that
  falls ``RING`` events behind (it reads slower than they come), or asks
  ``since`` for events no longer kept, is told once (``EventsMissed``)
  and reads on from the oldest kept. Nothing here ever waits for a
  watcher.
- **Activity** (output read from a session nobody holds): at most one
  event per session per ``ACTIVITY_INTERVAL``, on the first output after
  it (a session that writes all the time: one a second).
- **exited, and killed before it.** Every end of a session is
  ``exited``, with its code (negative: the signal), whatever ended it (a
  signal of its own, the system's, a linger's, a shutdown's, a client's).
  When the signal that ended it is one a client's ``Signal`` sent it
  (``multiserver kill``: SIGHUP, then SIGKILL), ``killed``, with the same
  code, comes just before.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Protocol

from multiserver.protocol._codec import decode_body, encode_body
from multiserver.protocol._messages import EventsMissed, SessionEvent

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver.protocol._messages import EventKind

# How many events the daemon keeps: how far a watcher may fall behind, and
# how far back ``Watch.since`` replays. An event kept is about 210 bytes
# (its record and its time; the name is the session's own string): about
# 0.8 MiB once the ring is full, whoever watches (``make bench``: the
# daemon grew by 820 KiB while its ring filled).
RING = 4096
# At most one activity event per session in this many seconds.
ACTIVITY_INTERVAL = 1.0


class Watcher(Protocol):
    """A connection that watches (the core's ``Peer``)."""

    def events_ready(self) -> None:
        """Events were recorded: its writer reads them (``take``) when it
        has sent what it has. Never blocks."""
        ...


class EventLog:
    """The events of one daemon instance: the ring, the next ``seq``, where
    each watcher is in it, and what decides an activity event and a
    ``killed``."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._monotonic = monotonic
        self._ring: collections.deque[SessionEvent] = collections.deque(maxlen=RING)
        self.next_seq = 1
        self._last_activity: dict[int, float] = {}  # child id -> monotonic time
        self._signalled: dict[int, set[int]] = {}  # child id -> signals clients sent
        self._cursors: dict[Watcher, int] = {}  # the seq each watcher reads next

    @property
    def oldest(self) -> int:
        """The ``seq`` of the oldest event kept (``next_seq`` when none is)."""
        return self._ring[0].seq if self._ring else self.next_seq

    def record(
        self,
        kind: EventKind,
        child_id: int = 0,
        name: str = "",
        *,
        exit_code: int | None = None,
        client: int = 0,
        server: str = "",
    ) -> SessionEvent:
        event = SessionEvent(
            seq=self.next_seq,
            kind=kind,
            id=child_id,
            name=name,
            at=self._clock(),
            exit_code=exit_code,
            client=client,
            server=server,
        )
        self.next_seq += 1
        self._ring.append(event)
        for watcher in self._cursors:
            watcher.events_ready()
        return event

    def activity(self, child_id: int, name: str) -> SessionEvent | None:
        """Output was read from a session nobody holds: its activity event,
        unless it had one within ``ACTIVITY_INTERVAL``."""
        now = self._monotonic()
        last = self._last_activity.get(child_id)
        if last is not None and now - last < ACTIVITY_INTERVAL:
            return None
        self._last_activity[child_id] = now
        return self.record("activity", child_id, name)

    def signalled(self, child_id: int, signum: int) -> None:
        """A client's ``Signal`` sent ``signum`` to the session."""
        self._signalled.setdefault(child_id, set()).add(signum)

    def ended(self, child_id: int, name: str, exit_code: int) -> SessionEvent:
        """The session's end: ``exited`` with its code, whatever ended it;
        just before it, ``killed`` (with the same code) when what ended it
        is a signal a client sent (``multiserver kill``). A watcher that
        follows ends reads ``exited`` alone; one that asks who killed what
        reads ``killed``."""
        sent = self._signalled.pop(child_id, set())
        self._last_activity.pop(child_id, None)
        if exit_code < 0 and -exit_code in sent:
            self.record("killed", child_id, name, exit_code=exit_code)
        return self.record("exited", child_id, name, exit_code=exit_code)

    def forget(self, child_id: int) -> None:
        """The session left the table."""
        self._signalled.pop(child_id, None)
        self._last_activity.pop(child_id, None)

    # --- watchers ---------------------------------------------------------------

    def watch(self, watcher: Watcher, since: int | None) -> str | None:
        """``watcher`` reads the events from ``since`` (None: from the next
        to happen) from now on; or why not (one line)."""
        if watcher in self._cursors:
            return "this connection watches already"
        if since is not None and not 1 <= since <= self.next_seq:
            return f"no event {since} yet: the next is {self.next_seq}"
        self._cursors[watcher] = self.next_seq if since is None else since
        return None

    def unwatch(self, watcher: Watcher) -> None:
        self._cursors.pop(watcher, None)

    def cursor(self, watcher: Watcher) -> int | None:
        """The seq ``watcher`` reads next; None if it does not watch."""
        return self._cursors.get(watcher)

    def adopt_watcher(self, watcher: Watcher, cursor: int) -> None:
        """A watcher of the daemon before an upgrade, where it was."""
        self._cursors[watcher] = min(cursor, self.next_seq)

    def take(self, watcher: Watcher, limit: int) -> list[SessionEvent | EventsMissed]:
        """What ``watcher`` reads next, at most ``limit`` events
        (``EventsMissed`` first if some it would read were let go), its
        cursor moved past them; [] if nothing is new (or it does not
        watch)."""
        cursor = self._cursors.get(watcher)
        if cursor is None or cursor == self.next_seq:
            return []
        out: list[SessionEvent | EventsMissed] = []
        oldest = self.oldest
        if cursor < oldest:
            out.append(EventsMissed(first_missing=cursor, next_seq=oldest))
            cursor = oldest
        start = len(self._ring) - (self.next_seq - cursor)
        end = min(start + limit, len(self._ring))
        out += [self._ring[i] for i in range(start, end)]  # near its end: quick
        self._cursors[watcher] = cursor + (end - start)
        return out

    # --- across an upgrade ------------------------------------------------------

    def kept(self) -> bytes:
        """The events kept, oldest first, for the snapshot: their bodies as
        the protocol writes them, one a line (compact JSON has no newline)."""
        return b"\n".join(encode_body(event)[0] for event in self._ring)

    def signals_sent(self) -> list[list[int]]:
        """[child id, signal] pairs of the signals clients sent to sessions
        that have not ended (for the snapshot)."""
        return [[c, s] for c, sent in self._signalled.items() for s in sorted(sent)]

    def adopt(self, kept: bytes, next_seq: int, signals: list[list[int]]) -> None:
        """The events (``kept``'s bytes) and signals of the daemon before an
        upgrade. Raises ProtocolError for an event that does not read."""
        events = [decode_body(SessionEvent, line, b"") for line in kept.split(b"\n") if line]
        self._ring.clear()
        self._ring.extend(e for e in events if isinstance(e, SessionEvent) and e.seq < next_seq)
        self.next_seq = max(next_seq, self.next_seq)
        for child_id, signum in signals:
            self.signalled(child_id, signum)
