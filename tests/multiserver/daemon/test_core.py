"""The request core on its own: no daemon, no trio. Its children are fake,
with real pipe fds as their "masters", so that duplicating, closing and
leaking fds are real."""

from __future__ import annotations

import errno
import gc
import itertools
import os
import warnings
from collections.abc import Iterator

import attrs
import pytest

from multiserver.daemon import _fds
from multiserver.daemon._core import (
    ARGV_LISTED,
    MAX_REQUEST_IDS,
    Answer,
    LaunchError,
    RequestCore,
    listed,
    shorten_argv,
)
from multiserver.protocol._codec import Codec
from multiserver.protocol._messages import (
    PROTOCOL_VERSION,
    ChildInfo,
    Children,
    ChildTaken,
    Claim,
    Claimed,
    Error,
    Hello,
    Launch,
    Launched,
    ListChildren,
    Message,
    Release,
    Released,
    Shutdown,
    Upgrade,
    Welcome,
)
from multiserver.terminal._buffer import OutputBuffer


@attrs.define(eq=False)
class FakeChild:
    id: int
    name: str
    argv: list[str]
    master: int | None
    buffer: OutputBuffer = attrs.field(factory=lambda: OutputBuffer(1 << 20))
    exit_code: int | None = None

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def read_available(self) -> None:
        pass

    def describe(self, *, held: bool, foreground: bool = False) -> ChildInfo:
        return ChildInfo(
            id=self.id,
            pid=1000 + self.id,
            name=self.name,
            argv=self.argv,
            cwd="/",
            tty=f"/dev/pts/{self.id}",
            rows=24,
            cols=80,
            state="running" if self.running else "exited",
            exit_code=self.exit_code,
            held=held,
            buffered_bytes=len(self.buffer),
            dropped_bytes=self.buffer.dropped,
            started_at=0.0,
            exited_at=None,
            linger=None,
        )


class FakeHost:
    """Children on pipes; records what the core asked of it."""

    def __init__(self) -> None:
        self.children: dict[int, FakeChild] = {}
        self.calls: list[tuple[str, int]] = []
        self._pipes: list[int] = []

    def add(self, name: str = "", argv: list[str] | None = None, output: bytes = b"") -> FakeChild:
        r, w = os.pipe()
        self._pipes.append(w)
        child_id = len(self.children) + 1
        child = FakeChild(child_id, name or str(child_id), argv or ["sh"], r)
        child.buffer.append(output)
        self.children[child_id] = child
        return child

    def get(self, child_id: int) -> FakeChild | None:
        return self.children.get(child_id)

    def __iter__(self) -> Iterator[FakeChild]:
        return iter(list(self.children.values()))

    def spawn(self, msg: Launch, env: dict[str, str]) -> FakeChild:
        if msg.argv[0] == "missing":
            raise LaunchError(errno.ENOENT, "command not found: missing")
        return self.add(msg.name, msg.argv)

    def hold(self, child: FakeChild) -> None:
        self.calls.append(("hold", child.id))

    def unhold(self, child: FakeChild) -> None:
        self.calls.append(("unhold", child.id))

    def collect(self, child: FakeChild) -> None:
        del self.children[child.id]

    def signal(self, child: FakeChild, signum: int) -> None:
        self.calls.append(("signal", child.id))

    def resize(self, child: FakeChild, rows: int, cols: int) -> None:
        pass

    def freed(self, nbytes: int) -> None:
        pass

    def close(self) -> None:
        for child in self.children.values():
            if child.master is not None:
                os.close(child.master)
        for fd in self._pipes:
            os.close(fd)


class FakePeer:
    _numbers = itertools.count(1)

    def __init__(self, max_frame: int | None = None) -> None:
        self.codec = Codec("daemon") if max_frame is None else Codec("daemon", max_frame=max_frame)
        self.notices: list[Message] = []
        self.id = next(self._numbers)
        self.woken = 0  # events_ready calls

    def events_ready(self) -> None:
        self.woken += 1

    def encode(self, msg: Message, nfds: int = 0) -> bytes:
        return self.codec.send(msg, nfds)

    def notify(self, msg: Message) -> None:
        self.notices.append(msg)


@pytest.fixture
def host() -> Iterator[FakeHost]:
    h = FakeHost()
    yield h
    h.close()


def make_core(host: FakeHost) -> RequestCore[FakeChild]:
    return RequestCore(host, instance_id="i" * 32, pid=1, server="test")


def joined(core: RequestCore[FakeChild], peer: FakePeer, version: int = 4) -> FakePeer:
    core.connect(peer)
    answer = core.handle(peer, Hello(min_version=2, max_version=version, children=False))
    assert isinstance(answer.replies[0].message, Welcome)
    return peer


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def claimed_parts(answer: Answer) -> list[tuple[int, int, bytes, bool]]:
    """(id, errno, output, has fd) per child, across every frame."""
    out = []
    for reply in answer.replies:
        msg = reply.message
        assert isinstance(msg, Claimed)
        assert len(reply.fds) == sum(1 for c in msg.children if c.fd)
        pos = 0
        for c in msg.children:
            out.append((c.id, c.errno, msg.outputs[pos : pos + c.output_len], c.fd))
            pos += c.output_len
    return out


def test_a_claim_dups_its_fds_in_the_same_step_and_then_holds(host: FakeHost) -> None:
    a, b = host.add(output=b"one"), host.add(output=b"two")
    core = make_core(host)
    peer = joined(core, FakePeer())
    answer = core.handle(peer, Claim(req=1, ids=[a.id, b.id]))
    [reply] = answer.replies
    assert claimed_parts(answer) == [(1, 0, b"one", True), (2, 0, b"two", True)]
    dups = [fd.fileno() for fd in reply.fds]
    assert a.master not in dups and b.master not in dups
    assert all(
        os.path.samestat(os.fstat(d), os.fstat(m))
        for d, m in zip(dups, [a.master, b.master], strict=True)
    )  # type: ignore[arg-type]
    assert core.holder(a.id) is peer and core.holder(b.id) is peer
    assert (len(a.buffer), len(b.buffer)) == (0, 0)
    assert host.calls == [("hold", 1), ("hold", 2)]
    answer.discard()
    assert all(fd.closed for fd in reply.fds)


def test_a_claim_whose_dups_fail_changes_nothing_and_leaks_nothing(
    host: FakeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    children = [host.add(output=f"out{i}".encode()) for i in range(5)]
    core = make_core(host)
    peer = joined(core, FakePeer())
    real_dup = os.dup
    calls = 0

    def dup(fd: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 4:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_dup(fd)

    before = open_fds()
    monkeypatch.setattr(_fds.os, "dup", dup)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answer = core.handle(peer, Claim(req=7, ids=[c.id for c in children]))
        gc.collect()
    monkeypatch.undo()
    # Closed by the code, not by the garbage collector's last resort.
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    [reply] = answer.replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.EMFILE
    assert "nothing was claimed and the output is kept" in reply.message.message
    assert open_fds() == before  # the three dups made were closed
    assert [c.buffer.peek()[0] for c in children] == [f"out{i}".encode() for i in range(5)]
    assert all(core.holder(c.id) is None for c in children) and host.calls == []


def test_a_claim_answer_is_split_into_frames_that_fit(host: FakeHost) -> None:
    children = [host.add(output=bytes([65 + i % 26]) * 300) for i in range(40)]
    core = make_core(host)
    peer = joined(core, FakePeer(max_frame=4096))
    answer = core.handle(peer, Claim(req=3, ids=[c.id for c in children] + [999]))
    assert len(answer.replies) > 5
    assert all(len(r.frame) <= 4096 for r in answer.replies)
    lasts = [r.message.last for r in answer.replies if isinstance(r.message, Claimed)]
    assert lasts == [False] * (len(lasts) - 1) + [True]
    parts = claimed_parts(answer)
    assert [p[0] for p in parts] == [c.id for c in children] + [999]
    assert [p[2] for p in parts[:-1]] == [bytes([65 + i % 26]) * 300 for i in range(40)]
    assert parts[-1][1] == errno.ENOENT
    answer.discard()


def test_a_claim_that_cannot_be_framed_keeps_the_output(host: FakeHost) -> None:
    big = host.add(output=b"x" * 10_000)
    core = make_core(host)
    peer = joined(core, FakePeer(max_frame=4096))
    before = open_fds()
    [reply] = core.handle(peer, Claim(req=4, ids=[big.id])).replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.E2BIG
    assert "the output is kept" in reply.message.message
    assert big.buffer.peek()[0] == b"x" * 10_000 and core.holder(big.id) is None
    assert open_fds() == before


def test_a_claim_of_too_many_ids_is_refused_whole(host: FakeHost) -> None:
    child = host.add(output=b"kept")
    core = make_core(host)
    peer = joined(core, FakePeer())
    ids = [child.id, *range(10_000, 10_000 + MAX_REQUEST_IDS)]
    [reply] = core.handle(peer, Claim(req=5, ids=ids)).replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.EINVAL
    assert f"at most {MAX_REQUEST_IDS}" in reply.message.message
    assert child.buffer.peek()[0] == b"kept" and core.holder(child.id) is None


def test_an_id_asked_twice_gets_its_output_once(host: FakeHost) -> None:
    child = host.add(output=b"once")
    core = make_core(host)
    peer = joined(core, FakePeer())
    answer = core.handle(peer, Claim(req=1, ids=[child.id, child.id]))
    assert claimed_parts(answer) == [(1, 0, b"once", True), (1, 0, b"", True)]
    answer.discard()


def test_a_steal_tells_the_previous_holder_and_a_release_by_it_is_refused(host: FakeHost) -> None:
    child = host.add()
    core = make_core(host)
    first, second = joined(core, FakePeer()), joined(core, FakePeer())
    core.handle(first, Claim(req=1, ids=[child.id])).discard()
    busy = core.handle(second, Claim(req=1, ids=[child.id]))
    assert claimed_parts(busy) == [(1, errno.EBUSY, b"", False)]
    core.handle(second, Claim(req=2, ids=[child.id], steal=True)).discard()
    assert first.notices == [ChildTaken(id=child.id)] and core.holder(child.id) is second
    replies = [r.message for r in core.handle(first, Release(req=3, ids=[child.id])).replies]
    assert replies[-1] == Released(req=3, ids=[])
    assert core.disconnect(second) == [child.id] and core.holder(child.id) is None
    assert host.calls[-1] == ("unhold", child.id)


def test_a_launch_whose_fd_cannot_be_passed_runs_detached(
    host: FakeHost, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    core = make_core(host)
    peer = joined(core, FakePeer())

    def no_dup(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(_fds.os, "dup", no_dup)
    launch = Launch(req=1, argv=["sh"], env={}, cwd="/", name="web")
    [reply] = core.handle(peer, launch).replies
    monkeypatch.undo()
    assert isinstance(reply.message, Error) and reply.message.errno == errno.EMFILE
    assert (
        "session web started" in reply.message.message and "runs detached" in reply.message.message
    )
    [child] = list(host)
    assert core.holder(child.id) is None and host.calls == [("unhold", child.id)]


def test_argv_is_shortened_in_answers_and_says_how_much() -> None:
    argv = ["prog", "a" * 100_000, "b" * 50]
    kept, omitted = shorten_argv(argv)
    assert kept[0] == "prog" and kept[1].endswith("…") and len(kept) == 2
    assert sum(len(a) for a in kept) - 1 + omitted == sum(len(a) for a in argv)
    assert sum(len(a) + 3 for a in kept) <= ARGV_LISTED + 1
    assert shorten_argv(["ls", "-l"]) == (["ls", "-l"], 0)
    info = FakeChild(1, "x", argv, None).describe(held=False)
    assert listed(info, 4).argv_omitted == omitted and listed(info, 4).argv == kept
    assert listed(info, 3).argv_omitted == 0 and listed(info, 3).argv == kept
    small = FakeChild(2, "y", ["ls"], None).describe(held=False)
    assert listed(small, 4) is small


def test_a_listing_comes_in_pages_and_an_older_client_gets_an_error(host: FakeHost) -> None:
    for i in range(60):
        host.add(f"s{i}", ["prog", "x" * 200])
    core = make_core(host)
    peer = joined(core, FakePeer(max_frame=8192))
    pages = [r.message for r in core.handle(peer, ListChildren(req=9)).replies]
    assert len(pages) > 2 and all(isinstance(p, Children) and p.req == 9 for p in pages)
    assert [p.last for p in pages if isinstance(p, Children)] == [False] * (len(pages) - 1) + [True]
    names = [c.name for p in pages if isinstance(p, Children) for c in p.children]
    assert names == [f"s{i}" for i in range(60)]
    old = joined(core, FakePeer(max_frame=8192), version=3)
    [reply] = core.handle(old, ListChildren(req=2)).replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.E2BIG
    assert "upgrade the client" in reply.message.message


def test_the_welcome_listing_goes_on_in_pages(host: FakeHost) -> None:
    for i in range(60):
        host.add(f"s{i}", ["prog", "x" * 200])
    core = make_core(host)
    peer = FakePeer(max_frame=8192)
    core.connect(peer)
    replies = [r.message for r in core.handle(peer, Hello(min_version=2, max_version=4)).replies]
    welcome, rest = replies[0], replies[1:]
    assert isinstance(welcome, Welcome) and welcome.more and rest
    assert all(isinstance(p, Children) and p.req == 0 for p in rest)
    names = [c.name for c in welcome.children] + [
        c.name for p in rest if isinstance(p, Children) for c in p.children
    ]
    assert names == [f"s{i}" for i in range(60)]
    old = FakePeer(max_frame=8192)
    core.connect(old)
    answer = core.handle(old, Hello(min_version=2, max_version=3))
    [reply] = answer.replies
    assert isinstance(reply.message, Error) and reply.message.req is None and answer.close


def test_a_launch_held_gives_a_dup_and_a_launch_detached_none(host: FakeHost) -> None:
    core = make_core(host)
    peer = joined(core, FakePeer())
    [held] = core.handle(peer, Launch(req=1, argv=["sh"], env={}, cwd="/", name="a")).replies
    assert isinstance(held.message, Launched) and held.message.child.held and len(held.fds) == 1
    child = host.get(held.message.child.id)
    assert child is not None and held.fds[0].fileno() != child.master
    held.fds[0].close()
    [free] = core.handle(peer, Launch(req=2, argv=["sh"], env={}, cwd="/", hold=False)).replies
    assert isinstance(free.message, Launched) and not free.message.child.held and not free.fds
    [missing] = core.handle(peer, Launch(req=3, argv=["missing"], env={}, cwd="/")).replies
    assert isinstance(missing.message, Error) and missing.message.errno == errno.ENOENT


@pytest.mark.parametrize("first", ["stop", "upgrade"])
def test_of_a_stop_and_an_upgrade_the_first_wins_and_the_other_is_refused(
    host: FakeHost, first: str
) -> None:
    """Issue 35: a forced stop that ended the sessions while an upgrade
    replaced the code left a daemon with none, and clients paused until
    the sessions had ended. One at a time; the second is EBUSY, one line."""
    core = make_core(host)
    peer = joined(core, FakePeer(), version=PROTOCOL_VERSION)
    stop, upgrade = Shutdown(req=1, force=True), Upgrade(req=2)
    if first == "stop":
        assert core.handle(peer, stop).shutdown
        refused, why = core.handle(peer, upgrade), "the daemon is stopping"
    else:
        assert core.handle(peer, upgrade).upgrade
        refused, why = core.handle(peer, stop), "the daemon is being upgraded: not stopped;"
    assert not refused.shutdown and not refused.upgrade
    [reply] = refused.replies
    assert isinstance(reply.message, Error) and reply.message.errno == errno.EBUSY
    assert reply.message.message.startswith(why)
    if first == "upgrade":
        core.upgrade_ended()  # it did not replace the code: a stop may come
        assert core.handle(peer, stop).shutdown
