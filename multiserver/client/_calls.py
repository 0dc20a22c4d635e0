"""Each request of the client library, sans-IO: the message it sends and how
its reply frames become a result. The trio client (``_client``) and the
blocking one (``_sync``) drive the same calls and differ only in how they
wait; an ``Error`` reply is theirs to raise (``RequestFailed``) before a call
sees it.

A call is fed the reply frames of its request in order: ``feed`` returns
``MORE`` until the answer is whole, then the result. ``abandon`` closes the
fds a call has collected so far, for a request cut short.
"""

from __future__ import annotations

import os

from multiserver._errors import ChildFailed, DaemonTooOld, PeerProtocolError
from multiserver.client._results import ClaimResult, LaunchResult, PeekResult, claim_results
from multiserver.protocol._frames import Event, close_fds
from multiserver.protocol._messages import (
    ChildError,
    ChildInfo,
    Children,
    Claim,
    Claimed,
    Collect,
    Collected,
    HandBack,
    HandedBack,
    Launch,
    Launched,
    ListChildren,
    Ok,
    Peek,
    Peeked,
    Release,
    Released,
    Resize,
    Shutdown,
    Signal,
    Upgrade,
    Upgraded,
    Watch,
    Watching,
)
from multiserver.protocol._proto import (
    PROTOCOL_VERSION,
    SELECT_VERSION,
    SHARING_VERSION,
    select_problem,
    selected,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Generic, TypeVar

    from multiserver.protocol._messages import Message

    T = TypeVar("T")

    class _Result(Generic[T]):
        pass

else:
    T = None  # type: ignore[misc]  # no typing at run time (see _Result)

    class _Result:
        """``Call[T]`` to a type checker; no ``typing`` at run time (the
        blocking client's commands start faster without it)."""

        def __class_getitem__(cls, item: object) -> type:
            return cls


class More:
    def __repr__(self) -> str:
        return "MORE"


MORE = More()


class Call(_Result[T]):
    """One request: ``message(req)`` (the request), then ``feed`` each
    reply frame."""

    def message(self, req: int) -> Message:
        raise NotImplementedError

    def feed(self, event: Event) -> T | More:
        raise NotImplementedError

    def abandon(self) -> None:
        """The request was cut short: close what it collected."""


class _OneReply(Call[T]):
    """A request answered by one frame of type ``reply``."""

    def __init__(
        self,
        make: Callable[[int], Message],
        reply: type[Message],
        result: Callable[[Message], T],
    ) -> None:
        self.make = make
        self.reply = reply
        self.result = result

    def message(self, req: int) -> Message:
        return self.make(req)

    def feed(self, event: Event) -> T | More:
        close_fds(event.fds)
        assert isinstance(event.message, self.reply), event.message
        return self.result(event.message)


def _nothing(msg: Message) -> None:
    return None


def _collected(msg: Message) -> ChildInfo:
    assert isinstance(msg, Collected)
    return msg.child


def _peeked(msg: Message) -> PeekResult:
    assert isinstance(msg, Peeked)
    return PeekResult(msg.child, msg.output, msg.dropped)


def launch(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    rows: int,
    cols: int,
    name: str,
    linger: float | None,
    hold: bool,
    share: bool = False,
    version: int = PROTOCOL_VERSION,
) -> Call[LaunchResult]:
    """``env`` None: this process's environment; ``cwd`` None: its cwd.
    ``share`` (a held launch, protocol 9): this client gives reading back
    when asked (docs/sharing.md); an older daemon is not told."""
    env = dict(os.environ) if env is None else env
    cwd = os.getcwd() if cwd is None else cwd
    return _Launch(
        lambda req: Launch(
            req=req,
            argv=list(argv),
            env=env,
            cwd=cwd,
            rows=rows,
            cols=cols,
            name=name,
            linger=linger,
            hold=hold,
            share=share and hold and version >= SHARING_VERSION,
        )
    )


class _Launch(Call[LaunchResult]):
    def __init__(self, make: Callable[[int], Message]) -> None:
        self.make = make

    def message(self, req: int) -> Message:
        return self.make(req)

    def feed(self, event: Event) -> LaunchResult:
        assert isinstance(event.message, Launched), event.message
        return LaunchResult(event.message.child, event.fds[0] if event.fds else None)


def claim(
    ids: Sequence[int],
    *,
    steal: bool,
    keep_output: bool,
    join: bool = False,
    read_only: bool = False,
    version: int = PROTOCOL_VERSION,
) -> Call[list[ClaimResult]]:
    """Raises DaemonTooOld for a join of a daemon before version 9."""
    if (join or read_only) and version < SHARING_VERSION:
        raise DaemonTooOld.lacking("to share a session", version, SHARING_VERSION)
    return _Claim(list(ids), steal, keep_output, join, read_only)


class _Claim(Call[list[ClaimResult]]):
    """The answer comes in frames until ``last``; each frame's fds are the
    caller's once the call returns."""

    def __init__(
        self, ids: list[int], steal: bool, keep_output: bool, join: bool, read_only: bool
    ) -> None:
        self.ids = ids
        self.steal = steal
        self.keep_output = keep_output
        self.join = join
        self.read_only = read_only
        self.results: list[ClaimResult] = []

    def message(self, req: int) -> Message:
        return Claim(
            req=req,
            ids=self.ids,
            steal=self.steal,
            keep_output=self.keep_output,
            join=self.join,
            read_only=self.read_only,
        )

    def feed(self, event: Event) -> list[ClaimResult] | More:
        msg = event.message
        assert isinstance(msg, Claimed), msg
        self.results += claim_results(msg, event.fds)
        return self.results if msg.last else MORE

    def abandon(self) -> None:
        close_fds([fd for r in self.results for fd in (r.master, r.feed) if fd is not None])
        self.results.clear()


def hand_back(child_id: int, shown: bytes) -> Call[int]:
    return _HandBack(child_id, shown)


class _HandBack(Call[int]):
    """The answer to a GiveBack: the feed's fd, the caller's."""

    def __init__(self, child_id: int, shown: bytes) -> None:
        self.child_id = child_id
        self.shown = shown

    def message(self, req: int) -> Message:
        return HandBack(req=req, id=self.child_id, shown=self.shown)

    def feed(self, event: Event) -> int | More:
        assert isinstance(event.message, HandedBack), event.message
        if len(event.fds) != 1:
            close_fds(event.fds)
            raise PeerProtocolError(f"HandedBack came with {len(event.fds)} fds, not 1")
        return event.fds[0]


def release(
    ids: Sequence[int], *, replace_output: bytes | None
) -> Call[tuple[list[int], list[ChildFailed]]]:
    return _Release(list(ids), replace_output)


class _Release(Call[tuple[list[int], list[ChildFailed]]]):
    """A ChildError for each child that could not be released, then
    Released: (released ids, failures)."""

    def __init__(self, ids: list[int], replace_output: bytes | None) -> None:
        self.ids = ids
        self.replace_output = replace_output
        self.failures: list[ChildFailed] = []

    def message(self, req: int) -> Message:
        return Release(
            req=req,
            ids=self.ids,
            replace_output=self.replace_output is not None,
            output=self.replace_output or b"",
        )

    def feed(self, event: Event) -> tuple[list[int], list[ChildFailed]] | More:
        close_fds(event.fds)
        msg = event.message
        if isinstance(msg, ChildError):
            self.failures.append(ChildFailed(msg.id, msg.errno, msg.message))
            return MORE
        assert isinstance(msg, Released), msg
        return list(msg.ids), self.failures


def listing(
    *,
    foreground: bool,
    prefixes: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
    version: int = SELECT_VERSION,
) -> Call[list[ChildInfo]]:
    """The daemon's children, or only those ``prefixes`` and ``ids`` select
    (``_proto.selected``). A daemon older than ``SELECT_VERSION`` (the
    connection's ``version``), or a selection past what a daemon matches
    (``_proto.select_problem``), asks for all and selects here."""
    asks = version >= SELECT_VERSION and select_problem(prefixes, ids) is None
    return _Listing(foreground, prefixes, ids, asks)


class _Listing(Call[list[ChildInfo]]):
    """One page, or (version 4) pages until the last."""

    def __init__(
        self,
        foreground: bool,
        prefixes: Sequence[str] | None,
        ids: Sequence[int] | None,
        daemon_selects: bool,
    ) -> None:
        self.foreground = foreground
        self.prefixes = None if prefixes is None else list(prefixes)
        self.ids = None if ids is None else sorted(set(ids))
        self._id_set = None if ids is None else frozenset(ids)
        self.daemon_selects = daemon_selects
        self.children: list[ChildInfo] = []

    def message(self, req: int) -> Message:
        if not self.daemon_selects:
            return ListChildren(req=req, foreground=self.foreground)
        return ListChildren(
            req=req, foreground=self.foreground, prefixes=self.prefixes, ids=self.ids
        )

    def feed(self, event: Event) -> list[ChildInfo] | More:
        close_fds(event.fds)
        msg = event.message
        assert isinstance(msg, Children), msg
        # Selected again whoever selected first: a daemon's answer is not
        # trusted to hold only what was asked.
        self.children += [
            c for c in msg.children if selected(c.name, c.id, self.prefixes, self._id_set)
        ]
        return self.children if msg.last else MORE


def signal(child_id: int, signum: int) -> Call[None]:
    return _OneReply(lambda req: Signal(req=req, id=child_id, signum=signum), Ok, _nothing)


def collect(child_id: int) -> Call[ChildInfo]:
    return _OneReply(lambda req: Collect(req=req, id=child_id), Collected, _collected)


def peek(child_id: int, max_bytes: int | None) -> Call[PeekResult]:
    return _OneReply(lambda req: Peek(req=req, id=child_id, max_bytes=max_bytes), Peeked, _peeked)


def resize(child_id: int, rows: int, cols: int) -> Call[None]:
    return _OneReply(lambda req: Resize(req=req, id=child_id, rows=rows, cols=cols), Ok, _nothing)


def shutdown(force: bool) -> Call[None]:
    return _OneReply(lambda req: Shutdown(req=req, force=force), Ok, _nothing)


def upgrade() -> Call[Upgraded]:
    """Answered by the new code (``Upgraded``), or an ``Error`` by the old."""
    return _OneReply(lambda req: Upgrade(req=req), Upgraded, _upgraded)


def watch(since: int | None) -> Call[int]:
    """Answered ``Watching``: the seq the next event will carry."""
    return _OneReply(lambda req: Watch(req=req, since=since), Watching, _next_seq)


def _next_seq(msg: Message) -> int:
    assert isinstance(msg, Watching), msg
    return msg.next_seq


def _upgraded(msg: Message) -> Upgraded:
    assert isinstance(msg, Upgraded), msg
    return msg
