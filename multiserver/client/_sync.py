"""A blocking client: one request at a time, over the same codec and the
same system calls as the trio client, for programs that need one or two
round trips and no event loop (the command line's ``ls``, ``new``,
``attach``... start in a fraction of the time when they import no trio).

Callers own deadlines: ``SyncClient.deadline`` (``time.monotonic``) bounds
every wait of the requests made while it is set, which raise ``TimedOut``
past it; None waits for ever.

fd ownership: every master fd a method returns is the caller's to close.
Pushed notices (``ChildExited``, ``ChildTaken``) that arrive while a request
waits are kept in ``notices``, in order; events (once it ``watch``es), in
a bounded queue of their own, read by ``wait_event`` or ``events``.
"""

from __future__ import annotations

import collections
import itertools
import select
import time

from multiserver._errors import (
    ChildFailed,
    ConnectionClosed,
    DaemonNotRunning,
    DaemonTooOld,
    PeerProtocolError,
    RequestFailed,
)
from multiserver.client import _calls as calls
from multiserver.client._calls import More
from multiserver.client._events import EventQueue, check_events
from multiserver.client._results import WelcomeReader, hello
from multiserver.client._spawn import (
    TimedOut,
    connect_blocking,
    connect_or_start_blocking,
    remaining,
)
from multiserver.protocol._codec import (
    NEED_DATA,
    Codec,
    Event,
    ProtocolError,
    Unrepresentable,
    close_fds,
)
from multiserver.protocol._messages import (
    ChildExited,
    Children,
    ChildTaken,
    Claimed,
    Error,
    EventsMissed,
    GiveBack,
    SessionEvent,
    Shared,
    Skipped,
)
from multiserver.protocol._sockio import receive_chunk, rights, send_some
from multiserver.system._paths import DaemonPaths

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path
    from types import TracebackType
    from typing import TypeVar

    from multiserver.client._calls import Call
    from multiserver.client._results import ClaimResult, LaunchResult, PeekResult
    from multiserver.protocol._messages import ChildInfo, Message, Upgraded, Welcome
    from multiserver.settings._config import DaemonConfig
    from multiserver.terminal._capture import Capture

    Notice = ChildExited | ChildTaken | GiveBack | Shared | Skipped
    T = TypeVar("T")


class _Channel:
    """A blocking socket and its codec: whole frames out, events in."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.codec = Codec("client")
        self.deadline: float | None = None

    def send(self, msg: Message) -> None:
        view = memoryview(self.codec.send(msg))
        while view:
            self.sock.settimeout(remaining(self.deadline))
            try:
                view = view[send_some(self.sock, view, rights(())) :]
            except TimeoutError:
                raise TimedOut("the daemon did not read our request in time") from None

    def next_event(self, *, wait: bool = True) -> Event | None:
        """The next event; with ``wait`` false, None when no whole frame is
        there yet. Raises ConnectionClosed, PeerProtocolError, TimedOut."""
        while True:
            try:
                event = self.codec.next_event()
            except ProtocolError as exc:
                raise PeerProtocolError(str(exc)) from exc
            if event is not NEED_DATA:
                assert isinstance(event, Event)
                return event
            if not wait and not select.select([self.sock], [], [], 0)[0]:
                return None
            self.sock.settimeout(remaining(self.deadline))
            try:
                data, fds, truncated = receive_chunk(self.sock)
            except TimeoutError:
                raise TimedOut("the daemon did not answer in time") from None
            if not data and not fds:
                midway = self.codec.buffered
                self.codec.close()
                raise ConnectionClosed(
                    "connection closed in the middle of a frame"
                    if midway
                    else "connection closed by peer"
                )
            try:
                self.codec.receive_data(data, fds, truncated=truncated)
            except ProtocolError as exc:
                raise PeerProtocolError(str(exc)) from exc

    def close(self) -> None:
        self.codec.close()
        self.sock.close()


class SyncClient:
    """A blocking connection to one daemon, after the handshake. Build it
    with ``dial_blocking``; ``close`` (or leaving a ``with`` block) hangs up,
    which releases every child it still holds."""

    def __init__(self, channel: _Channel, welcome: Welcome, socket_path: Path) -> None:
        self._channel = channel
        self.welcome = welcome
        self.socket_path = socket_path
        self._reqs = itertools.count(1)
        self._ignored: set[int] = set()  # requests whose replies nobody reads
        self.notices: collections.deque[Notice] = collections.deque()
        self._events = EventQueue()

    @property
    def deadline(self) -> float | None:
        return self._channel.deadline

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        self._channel.deadline = value

    @property
    def instance_id(self) -> str:
        return self.welcome.instance_id

    @property
    def daemon_pid(self) -> int:
        return self.welcome.pid

    def fileno(self) -> int:
        """The socket, to wait on with ``poll`` before ``read_notices``."""
        return self._channel.sock.fileno()

    # --- plumbing -------------------------------------------------------------

    def _route(self, event: Event) -> Event | None:
        """A notice goes to ``notices``; a reply to an ignored request is
        dropped; anything else is returned."""
        msg = event.message
        if isinstance(msg, ChildExited | ChildTaken | GiveBack | Shared | Skipped):
            self.notices.append(msg)
            return None
        if isinstance(msg, SessionEvent | EventsMissed):
            self._events.put(msg)
            return None
        req = getattr(msg, "req", None)
        if req is None:  # the daemon reports our protocol error and closes
            assert isinstance(msg, Error)
            raise PeerProtocolError(msg.message)
        if req in self._ignored:
            close_fds(event.fds)
            if not isinstance(msg, Claimed | Children) or msg.last:
                self._ignored.discard(req)
            return None
        return event

    def _run(self, call: Call[T]) -> T:
        """Send ``call``'s request; feed it the reply frames until its
        result. On an error, what the call collected (fds) is closed."""
        req = next(self._reqs)
        try:
            self._channel.send(call.message(req))
        except Unrepresentable:  # nothing was sent: the connection is fine
            raise DaemonTooOld.speaking(self.welcome.version) from None
        try:
            while True:
                out = call.feed(self._reply(req))
                if not isinstance(out, More):
                    return out
        except BaseException:
            call.abandon()
            raise

    def _reply(self, req: int) -> Event:
        """The next frame of the answer to ``req``. Raises RequestFailed for
        an Error reply."""
        while True:
            got = self._channel.next_event()
            assert got is not None  # waited
            event = self._route(got)
            if event is None:
                continue
            if getattr(event.message, "req", None) != req:
                close_fds(event.fds)
                raise PeerProtocolError(
                    f"a reply to request {getattr(event.message, 'req', None)}, waiting for {req}"
                )
            if isinstance(event.message, Error):
                close_fds(event.fds)
                raise RequestFailed(event.message.errno, event.message.message)
            return event

    def read_notices(self) -> None:
        """Read whatever the daemon sent, without waiting: notices go to
        ``notices``; replies to ``send_resize`` are dropped. A notice that
        came with the last reply is already read: call this before waiting
        on ``fileno()``. Raises ConnectionClosed once the daemon is gone."""
        while (event := self._channel.next_event(wait=False)) is not None:
            if self._route(event) is not None:
                close_fds(event.fds)

    # --- requests (as ``Client``'s, blocking) ---------------------------------

    def launch(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        rows: int = 24,
        cols: int = 80,
        name: str = "",
        linger: float | None = None,
        hold: bool = True,
        share: bool = False,
    ) -> LaunchResult:
        """As ``Client.launch``."""
        call = calls.launch(
            argv,
            env=env,
            cwd=cwd,
            rows=rows,
            cols=cols,
            name=name,
            linger=linger,
            hold=hold,
            share=share,
            version=self.welcome.version,
        )
        return self._run(call)

    def claim(
        self,
        ids: Sequence[int],
        *,
        steal: bool = False,
        keep_output: bool = False,
        join: bool = False,
        read_only: bool = False,
    ) -> list[ClaimResult]:
        """As ``Client.claim``."""
        call = calls.claim(
            ids,
            steal=steal,
            keep_output=keep_output,
            join=join,
            read_only=read_only,
            version=self.welcome.version,
        )
        return self._run(call)

    def hand_back(self, child_id: int, shown: bytes) -> int:
        """As ``Client.hand_back``."""
        return self._run(calls.hand_back(child_id, shown))

    def release(
        self, ids: Sequence[int], *, replace_output: bytes | None = None
    ) -> tuple[list[int], list[ChildFailed]]:
        return self._run(calls.release(ids, replace_output=replace_output))

    def signal(self, child_id: int, signum: int) -> None:
        self._run(calls.signal(child_id, signum))

    def collect(self, child_id: int) -> ChildInfo:
        return self._run(calls.collect(child_id))

    def list(
        self,
        *,
        foreground: bool = False,
        prefixes: Sequence[str] | None = None,
        ids: Sequence[int] | None = None,
    ) -> list[ChildInfo]:
        """The daemon's children; with ``prefixes`` or ``ids``, only those
        they select (``_proto.selected``), whatever the daemon's version."""
        return self._run(
            calls.listing(
                foreground=foreground, prefixes=prefixes, ids=ids, version=self.welcome.version
            )
        )

    def peek(self, child_id: int, max_bytes: int | None = None) -> PeekResult:
        return self._run(calls.peek(child_id, max_bytes))

    def capture(self, child_id: int, *, history: int | None = 0, styled: bool = False) -> Capture:
        """As ``Client.capture`` (the rendering in this thread)."""
        from multiserver.client._capture import capture

        return capture(self.shown(child_id), history=history, styled=styled)

    def shown(self, child_id: int) -> PeekResult:
        """As ``Client.shown``."""
        from multiserver.client._capture import asks_holder, held_output, joined_output

        peeked = self.peek(child_id)
        if asks_holder(peeked.child, self.welcome.version):
            try:
                (joined,) = self.claim([child_id], read_only=True)
            except RequestFailed:  # its holder cannot share it: what it keeps
                return held_output(peeked, self.instance_id)
            close_fds([fd for fd in (joined.master, joined.feed) if fd is not None])
            if joined.error is None:
                self.release([child_id])
                return joined_output(peeked, joined)
        return held_output(peeked, self.instance_id)

    def resize(self, child_id: int, rows: int, cols: int) -> None:
        self._run(calls.resize(child_id, rows, cols))

    def send_resize(self, child_id: int, rows: int, cols: int) -> None:
        """Resize without waiting for the answer (``read_notices`` drops it):
        for a loop that must not block on the daemon."""
        req = next(self._reqs)
        self._channel.send(calls.resize(child_id, rows, cols).message(req))
        self._ignored.add(req)

    def upgrade(self) -> Upgraded:
        """As ``Client.upgrade``."""
        return self._run(calls.upgrade())

    def shutdown(self, *, force: bool = False) -> None:
        self._run(calls.shutdown(force))

    def wait_notice(self, until: float | None) -> Notice | None:
        """The next notice, waiting until ``until`` (time.monotonic) at most;
        None if none came."""
        while True:
            self.read_notices()  # what the codec holds already, then the socket
            if self.notices:
                return self.notices.popleft()
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                return None
            select.select([self.fileno()], [], [], left)

    def watch(self, since: int | None = None) -> int:
        """As ``Client.watch``: the daemon pushes its events to this
        connection from now on (from ``since``); the seq the next will carry."""
        check_events(self.welcome.version)
        return self._run(calls.watch(since))

    def wait_event(self, until: float | None) -> SessionEvent | EventsMissed | None:
        """The next event (after ``watch``), waiting until ``until``
        (time.monotonic) at most; None if none came. The socket is read only
        while none is kept, so a caller that reads slowly leaves the rest
        with the daemon, which keeps them (or tells what it let go). Raises
        ConnectionClosed once the daemon is gone, after every event before."""
        while True:
            item = self._events.get()
            if item is not None:
                return item
            event = self._channel.next_event(wait=False)
            if event is not None:
                if self._route(event) is not None:
                    close_fds(event.fds)
                continue
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                return None
            select.select([self.fileno()], [], [], left)

    def events(self, since: int | None = None) -> Iterator[SessionEvent | EventsMissed]:
        """As ``Client.events``, blocking: ``watch(since)``, then every event
        as it comes, for as long as the connection lasts (ConnectionClosed
        then). Set ``deadline`` to None first: it bounds reads too."""
        self.watch(since)
        while True:
            item = self.wait_event(None)
            if item is not None:
                yield item

    def close(self) -> None:
        """Hang up: the daemon releases every child this connection held."""
        self._channel.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def handshake_blocking(channel: _Channel, *, children: bool = True) -> Welcome:
    """Hello, then the Welcome (and its pages). Raises as ``WelcomeReader``,
    or ConnectionClosed / TimedOut."""
    try:
        channel.send(hello(children))
    except ConnectionClosed:
        pass  # refused before it read us: its Error is there to read
    reader = WelcomeReader()
    while True:
        event = channel.next_event()
        assert event is not None
        close_fds(event.fds)
        welcome = reader.feed(event.message)
        if welcome is not None:
            return welcome


def dial_blocking(
    paths: DaemonPaths | Path,
    *,
    start: bool = False,
    config: DaemonConfig | None = None,
    children: bool = True,
    deadline: float | None = None,
    on_welcome: Callable[[Welcome, Path], None] | None = None,
) -> SyncClient:
    """Connect (with ``start``, starting the daemon if none runs) and say
    hello, all before ``deadline`` (time.monotonic). The client keeps the
    deadline for its requests; set ``client.deadline`` to change it.
    ``on_welcome``: called with the daemon's Welcome and its socket once
    the handshake is done (the command line notices an older daemon so;
    the library itself says nothing).

    Past the deadline: TimedOut, and nothing is left open (a daemon it
    started keeps running).
    """
    if not isinstance(paths, DaemonPaths):
        if start:
            raise ValueError("start=True needs DaemonPaths")
        socket_path = paths
    else:
        socket_path = paths.socket
    attempts = 0
    while True:
        attempts += 1
        if start and isinstance(paths, DaemonPaths):
            sock = connect_or_start_blocking(paths, config, deadline)
        else:
            sock = connect_blocking(socket_path, deadline)
        channel = _Channel(sock)
        channel.deadline = deadline
        try:
            welcome = handshake_blocking(channel, children=children)
        except ConnectionClosed:
            channel.close()
            if not start:
                raise
            # A daemon that was exiting when we connected; start another.
            if attempts >= 5:
                raise DaemonNotRunning(f"daemon at {socket_path} closed the connection") from None
            continue
        except BaseException:
            channel.close()
            raise
        if on_welcome is not None:
            on_welcome(welcome, socket_path)
        return SyncClient(channel, welcome, socket_path)
