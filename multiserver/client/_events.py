"""Events as a client receives them (protocol 8, docs/events.md), for the
trio client and the blocking one alike: pure, no trio.

A client keeps the events its daemon pushed until its caller reads them,
in ``EventQueue``: in order, at most ``bound``. Past it, nothing waits
(the trio client's reader also reads replies, which must not wait behind
a caller that stopped reading events): the events that do not fit are
let go and the caller reads one ``EventsMissed`` in their place, exactly
as the daemon tells a watcher that fell behind its own bound, so a caller
handles one kind of gap whichever side let the events go.
"""

from __future__ import annotations

import collections

from multiserver._errors import DaemonTooOld
from multiserver.protocol._messages import EventsMissed, SessionEvent
from multiserver.protocol._proto import EVENTS_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeAlias

    Watched: TypeAlias = SessionEvent | EventsMissed

# What a client keeps of events its caller has not read: about 1.2 MiB.
EVENT_QUEUE = 4096


def check_events(version: int) -> None:
    """DaemonTooOld (one line, with what to do) for a daemon whose protocol
    ``version`` has no events; nothing is sent to it."""
    if version < EVENTS_VERSION:
        raise DaemonTooOld.lacking("for events", version, EVENTS_VERSION)


class EventQueue:
    """Events kept until read, in order; at most ``bound`` (a gap told as
    one ``EventsMissed`` past it)."""

    def __init__(self, bound: int = EVENT_QUEUE) -> None:
        self._bound = bound
        self._items: collections.deque[Watched] = collections.deque()
        # A stretch let go here, not yet told: (first seq, next seq).
        self._gap: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self._items) + (self._gap is not None)

    def put(self, item: Watched) -> None:
        first, after = (
            (item.first_missing, item.next_seq)
            if isinstance(item, EventsMissed)
            else (item.seq, item.seq + 1)
        )
        if self._gap is not None:  # joins the stretch, or ends it
            first = self._gap[0]
        if len(self._items) >= self._bound or (isinstance(item, EventsMissed) and self._gap):
            self._gap = (first, after)
            return
        if self._gap is not None:  # an event after a stretch let go: the stretch told first
            self._items.append(EventsMissed(first_missing=first, next_seq=after - 1))
            self._gap = None
        self._items.append(item)

    def get(self) -> Watched | None:
        """The next, or None if none is kept."""
        if self._items:
            return self._items.popleft()
        if self._gap is not None:
            first, after = self._gap
            self._gap = None
            return EventsMissed(first_missing=first, next_seq=after)
        return None
