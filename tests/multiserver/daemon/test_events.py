"""Events in the request core, on their own (sans-IO: no daemon, no trio):
what each request and each end records, in order; what a watcher reads,
replays and misses; the activity rate; what crosses an upgrade."""

from __future__ import annotations

import errno
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from multiserver.daemon._core import RequestCore
from multiserver.daemon._events import ACTIVITY_INTERVAL, RING, EventLog
from multiserver.protocol._messages import (
    Claim,
    Error,
    EventsMissed,
    Launch,
    Release,
    SessionEvent,
    Signal,
    Watch,
    Watching,
)
from tests.multiserver.daemon.test_core import FakeChild, FakeHost, FakePeer, joined


class Clock:
    """Both of the log's clocks, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def host() -> Iterator[FakeHost]:
    h = FakeHost()
    yield h
    h.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def core(host: FakeHost, clock: Clock) -> RequestCore[FakeChild]:
    log = EventLog(clock=clock, monotonic=clock)
    return RequestCore(host, instance_id="i" * 32, pid=1, server="test/1", events=log)


def watcher(core: RequestCore[FakeChild], since: int | None = None) -> FakePeer:
    peer = joined(core, FakePeer(), version=8)
    [reply] = core.handle(peer, Watch(req=1, since=since)).replies
    assert isinstance(reply.message, Watching)
    return peer


def read(core: RequestCore[FakeChild], peer: FakePeer, limit: int = 10_000) -> list[Any]:
    """What ``peer`` reads now, as (kind, id, client, exit_code) or a miss."""
    out: list[Any] = []
    for msg in core.events.take(peer, limit):
        if isinstance(msg, EventsMissed):
            out.append(("missed", msg.first_missing, msg.next_seq))
        else:
            out.append((msg.kind, msg.id, msg.client, msg.exit_code))
    return out


def launch(core: RequestCore[FakeChild], peer: FakePeer, name: str, *, hold: bool) -> int:
    answer = core.handle(peer, Launch(req=1, argv=["sh"], env={}, cwd="/", name=name, hold=hold))
    answer.discard()
    child = answer.replies[0].message.child  # type: ignore[union-attr]
    return int(child.id)


def test_each_request_and_end_records_its_events_in_order(core: RequestCore[FakeChild]) -> None:
    w = watcher(core)
    a, b = joined(core, FakePeer(), 8), joined(core, FakePeer(), 8)
    one = launch(core, a, "one", hold=True)  # created, joined
    two = launch(core, a, "two", hold=False)  # created
    core.handle(b, Claim(req=2, ids=[two])).discard()  # joined
    core.handle(b, Claim(req=3, ids=[two])).discard()  # its own again: nothing
    core.handle(b, Claim(req=4, ids=[one], steal=True)).discard()  # taken over, a left
    core.handle(b, Release(req=5, ids=[two]))  # left
    core.disconnect(b)  # b lets one go
    assert read(core, w) == [
        ("created", one, a.id, None),
        ("joined", one, a.id, None),
        ("created", two, a.id, None),
        ("joined", two, b.id, None),
        ("taken_over", one, b.id, None),
        ("left", one, a.id, None),
        ("left", two, b.id, None),
        ("left", one, b.id, None),
    ]
    seqs = [e.seq for e in core.events.take(w, 10)]
    assert seqs == []  # all read; and they were numbered 1, 2, ...
    assert core.events.next_seq == 9


def test_an_end_after_a_client_s_signal_is_killed_any_other_is_exited(
    core: RequestCore[FakeChild], host: FakeHost
) -> None:
    w = watcher(core)
    peer = joined(core, FakePeer(), 8)
    ids = [launch(core, peer, f"s{i}", hold=False) for i in range(4)]
    read(core, w)
    for child_id, signum in ((ids[0], signal.SIGHUP), (ids[1], signal.SIGWINCH)):
        assert core.handle(peer, Signal(req=6, id=child_id, signum=signum)).replies
    ends = {ids[0]: -signal.SIGHUP, ids[1]: 0, ids[2]: -signal.SIGKILL, ids[3]: 3}
    for child_id, code in ends.items():
        host.children[child_id].exit_code = code
        core.child_exited(child_id, code)
    assert read(core, w) == [
        ("killed", ids[0], 0, -signal.SIGHUP),  # by the SIGHUP a client sent (`kill`)
        ("exited", ids[0], 0, -signal.SIGHUP),  # every end is an exit, with its code
        ("exited", ids[1], 0, 0),  # a SIGWINCH did not end it
        ("exited", ids[2], 0, -signal.SIGKILL),  # a signal nobody sent through the daemon
        ("exited", ids[3], 0, 3),
    ]


def test_a_watcher_reads_what_it_did_not_see_from_since(core: RequestCore[FakeChild]) -> None:
    peer = joined(core, FakePeer(), 8)
    for i in range(5):
        launch(core, peer, f"s{i}", hold=False)
    w = watcher(core, since=3)
    assert [e.seq for e in core.events.take(w, 100)] == [3, 4, 5]
    late = watcher(core)  # from now: nothing of before
    assert read(core, late) == []
    launch(core, peer, "s5", hold=False)
    assert read(core, late) == read(core, w) == [("created", 6, peer.id, None)]


def test_watch_is_refused_before_version_8_past_the_next_event_and_twice(
    core: RequestCore[FakeChild],
) -> None:
    older = joined(core, FakePeer(), 7)
    [reply] = core.handle(older, Watch(req=1)).replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.EPROTO
    peer = joined(core, FakePeer(), 8)
    [reply] = core.handle(peer, Watch(req=2, since=2)).replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.EINVAL
    assert reply.message.message == "no event 2 yet: the next is 1"
    [reply] = core.handle(peer, Watch(req=3, since=1)).replies
    assert reply.message == Watching(req=3, next_seq=1)
    [reply] = core.handle(peer, Watch(req=4)).replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.EINVAL


def test_a_watcher_that_falls_behind_the_ring_is_told_once_and_reads_on(
    core: RequestCore[FakeChild],
) -> None:
    slow, quick = watcher(core), watcher(core)
    peer = joined(core, FakePeer(), 8)
    child = launch(core, peer, "s", hold=False)
    assert read(core, quick) == [("created", child, peer.id, None)]
    for i in range(RING // 2 + 5):  # joined, left: RING + 10 events
        core.handle(peer, Claim(req=i, ids=[child])).discard()
        core.handle(peer, Release(req=i, ids=[child]))
        if i % 100 == 0:
            read(core, quick)  # keeps up
    got = core.events.take(slow, 5)
    first = core.events.oldest
    assert first == core.events.next_seq - RING
    assert got[0] == EventsMissed(first_missing=1, next_seq=first)
    assert [e.seq for e in got[1:] if isinstance(e, SessionEvent)] == list(range(first, first + 5))
    rest = core.events.take(slow, 100_000)
    assert not any(isinstance(e, EventsMissed) for e in rest)  # told once
    assert rest[-1].seq == core.events.next_seq - 1  # type: ignore[union-attr]
    assert not any(kind == "missed" for kind, *_ in read(core, quick))
    # Asked for events no longer kept: told the same way.
    late = watcher(core, since=2)
    assert core.events.take(late, 0) == [EventsMissed(first_missing=2, next_seq=first)]


def test_activity_is_one_event_a_second_at_most_per_session(
    core: RequestCore[FakeChild], host: FakeHost, clock: Clock
) -> None:
    w = watcher(core)
    a, b = host.add("a"), host.add("b")
    for _ in range(50):  # a flood within a second
        core.output_seen(a)
        clock.now += ACTIVITY_INTERVAL / 64
    core.output_seen(b)
    clock.now += ACTIVITY_INTERVAL / 4
    core.output_seen(a)  # a second after the first: one more
    core.output_seen(b)
    assert read(core, w) == [
        ("activity", a.id, 0, None),
        ("activity", b.id, 0, None),
        ("activity", a.id, 0, None),
    ]


def test_only_watchers_are_woken_and_a_gone_one_is_forgotten(
    core: RequestCore[FakeChild],
) -> None:
    w, other = watcher(core), joined(core, FakePeer(), 8)
    launch(core, other, "s", hold=False)
    assert (w.woken, other.woken) == (1, 0)
    core.disconnect(w)
    launch(core, other, "t", hold=False)
    assert w.woken == 1 and core.events.cursor(w) is None


def test_events_and_watchers_cross_an_upgrade(
    core: RequestCore[FakeChild], host: FakeHost, clock: Clock
) -> None:
    w = watcher(core)
    peer = joined(core, FakePeer(), 8)
    child = launch(core, peer, "s", hold=False)
    core.handle(peer, Signal(req=2, id=child, signum=signal.SIGTERM))
    read(core, w)
    launch(core, peer, "t", hold=False)  # not read before the upgrade
    version, held, cursor, shares = core.state_of(w)
    assert (version, held, cursor, shares) == (8, [], 2, [])
    kept, next_seq, signals = core.events.kept(), core.events.next_seq, core.events.signals_sent()
    assert signals == [[child, signal.SIGTERM]]

    new = RequestCore(host, instance_id="i" * 32, pid=1, server="test/2", events=EventLog())
    new.events.adopt(kept, next_seq, signals)
    new.connect(w)
    new.adopt(w, version, held, cursor)
    new.upgraded()
    host.children[child].exit_code = -signal.SIGTERM
    new.child_exited(child, -signal.SIGTERM)
    got = new.events.take(w, 10)
    assert [(e.seq, e.kind) for e in got if isinstance(e, SessionEvent)] == [
        (2, "created"),
        (3, "daemon_upgraded"),
        (4, "killed"),  # the signal sent before the upgrade
        (5, "exited"),
    ]
    assert got[1].server == "test/2"  # type: ignore[union-attr]


def test_output_read_after_a_session_ended_is_no_activity(
    core: RequestCore[FakeChild], host: FakeHost
) -> None:
    w = watcher(core)
    child = host.add("s")
    child.exit_code = 0
    core.child_exited(child.id, 0)
    core.output_seen(child)  # its last bytes, drained after its end was reaped
    assert read(core, w) == [("exited", child.id, 0, 0)]
