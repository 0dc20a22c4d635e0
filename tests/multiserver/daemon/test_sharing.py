"""The sharing of one session (``_sharing``), against a model of the
world around it: a program writing into its PTY, the kernel's buffer, the
daemon reading while no client does, and clients that read the master
themselves or take what the daemon sends them, each at its own pace,
joining and leaving at any time. Whatever happens, nobody reads the
master while another does, and each client's output is the program's,
from where it joined, without a byte lost, doubled or out of order, but
for the gaps it was told of (``TellSkipped``)."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

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
)

PEERS = ("a", "b", "c", "d")


class Client:
    def __init__(self) -> None:
        self.inbox: deque[Any] = deque()
        self.reads = False  # reads the master itself
        self.start: int | None = None  # where in the output its live part starts
        self.got: list[bytes | int] = []  # bytes shown, and gaps told of (their sizes)


class World(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sharing = Sharing(bound=24)
        self.out = bytearray()  # all the program wrote
        self.pos = 0  # how much of it was read from the master
        self.clients: dict[str, Client] = {}
        self.switches = 0

    # --- the world ------------------------------------------------------------

    def dispatch(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Give | Joined):
                client = self.clients[action.peer]
                assert client.start is None
                client.start = self.pos
                if isinstance(action, Give):
                    client.inbox.append(action)
            elif isinstance(action, AskBack | Send | TellSkipped | ReadIt):
                self.clients[action.peer].inbox.append(action)
                self.switches += isinstance(action, ReadIt | AskBack)
            else:
                assert isinstance(action, Resume | StopReading)

    @rule(n=st.integers(1, 40))
    def program_writes(self, n: int) -> None:
        # Bytes that differ from place to place (hypothesis's own would
        # shrink to zeros, alike wherever a byte went).
        self.out += random.Random(len(self.out)).randbytes(n)

    @precondition(lambda self: self.sharing.reader is None and self.pos < len(self.out))
    @rule(n=st.integers(1, 20))
    def daemon_reads(self, n: int) -> None:
        data = bytes(self.out[self.pos : self.pos + n])
        self.pos += len(data)
        self.dispatch(self.sharing.read(data))

    @precondition(lambda self: any(c.reads for c in self.clients.values()))
    @rule(n=st.integers(1, 20))
    def client_reads(self, n: int) -> None:
        (client,) = [c for c in self.clients.values() if c.reads]
        data = bytes(self.out[self.pos : self.pos + n])
        self.pos += len(data)
        client.got.append(data)

    @precondition(lambda self: len(self.clients) < len(PEERS))
    @rule(read_only=st.booleans(), data=st.data())
    def join(self, read_only: bool, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([p for p in PEERS if p not in self.clients]))
        self.clients[name] = Client()
        self.dispatch(self.sharing.join(name, read_only=read_only))

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.clients)))
        self.check(name, self.clients.pop(name))
        self.dispatch(self.sharing.leave(name))

    @precondition(lambda self: any(c.inbox for c in self.clients.values()))
    @rule(data=st.data())
    def client_takes(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, c in self.clients.items() if c.inbox)))
        client = self.clients[name]
        action = client.inbox.popleft()
        if isinstance(action, Give | ReadIt):
            client.reads = True
        elif isinstance(action, AskBack):
            client.reads = False
            self.dispatch(self.sharing.handed_back(name, b"shown"))
        elif isinstance(action, Send):
            client.got.append(action.data)
            self.dispatch(self.sharing.taken(name, len(action.data)))
        else:
            assert isinstance(action, TellSkipped)
            client.got.append(action.missed)

    # --- what must hold -----------------------------------------------------------

    @invariant()
    def one_reader_at_a_time(self) -> None:
        readers = [n for n, c in self.clients.items() if c.reads]
        assert len(readers) <= 1
        if readers:
            assert self.sharing.reader == readers[0]

    @invariant()
    def every_client_has_the_programs_output(self) -> None:
        for name, client in self.clients.items():
            self.check(name, client)

    def check(self, name: str, client: Client) -> None:
        if client.start is None:
            return
        at = client.start
        for part in client.got:
            if isinstance(part, int):
                assert part > 0
                at += part
                continue
            assert part == self.out[at : at + len(part)], (name, at)
            at += len(part)
        assert at <= self.pos

    @invariant()
    def read_only_clients_never_read_the_master(self) -> None:
        for name, client in self.clients.items():
            holder = self.sharing.holders.get(name)
            if holder is not None and holder.read_only:
                assert not client.reads and self.sharing.reader != name


TestSharing = World.TestCase
TestSharing.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


def test_a_second_client_asks_reading_back_and_the_last_reads_again() -> None:
    s = Sharing(bound=10)
    assert s.join("a") == [Give("a")]
    assert s.join("b") == [AskBack("a")]
    assert s.join("c", read_only=True) == []  # waits on the same answer
    assert s.handed_back("a", b"screen") == [Resume(b"screen"), Joined("b"), Joined("c")]
    assert s.read(b"x" * 4) == [Send("a", b"xxxx"), Send("b", b"xxxx"), Send("c", b"xxxx")]
    assert s.leave("b") == []  # a and c: the daemon reads on
    assert s.leave("c") == [StopReading(), ReadIt("a")]


def test_a_slow_client_is_skipped_and_told_how_much_once_it_catches_up() -> None:
    s = Sharing(bound=8)
    s.join("v", read_only=True)
    assert s.read(b"12345") == [Send("v", b"12345")]
    assert s.read(b"6789") == []  # 9 would be owed: past the bound
    assert s.read(b"ab") == []  # once behind, behind until it has caught up
    assert s.taken("v", 5) == [TellSkipped("v", 6)]
    assert s.read(b"cd") == [Send("v", b"cd")]


def test_a_read_only_client_alone_is_never_handed_the_master() -> None:
    s = Sharing(bound=8)
    assert s.join("r", read_only=True) == [Joined("r")]
    assert s.join("w") == [Joined("w")]
    assert s.leave("r") == [StopReading(), ReadIt("w")]
    assert s.leave("w") == [Resume(b"")]
