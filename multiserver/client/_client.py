"""The client library: one ``Client`` per connection to one daemon.

A background task reads every frame: replies go to the request that waits for
them (matched by ``req``), pushed notices go to ``notices``, events (once the
client watches: ``events``) to a bounded queue of their own. Requests may run
concurrently on one client.

fd ownership: every master fd a method returns is the caller's to close. An
fd that arrives for a request nobody waits for any more (it was cancelled) is
closed by the reader; the child stays held by this connection until it is
released or the connection closes (which releases it).

No method takes a timeout: callers own deadlines (``trio.move_on_after``).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import trio

from multiserver._errors import (
    ChildFailed,
    ConnectionClosed,
    DaemonNotRunning,
    DaemonTooOld,
    MultiserverError,
    PeerProtocolError,
    RequestFailed,
)
from multiserver.client import _calls as calls
from multiserver.client._calls import Call, More
from multiserver.client._events import EventQueue, check_events
from multiserver.client._results import (
    ClaimResult,
    LaunchResult,
    PeekResult,
    WelcomeReader,
    hello,
)
from multiserver.client._start import connect, connect_or_start
from multiserver.protocol._codec import Codec, Event, Unrepresentable, close_fds
from multiserver.protocol._messages import (
    ChildExited,
    ChildInfo,
    ChildTaken,
    Error,
    EventsMissed,
    GiveBack,
    Message,
    SessionEvent,
    Shared,
    Skipped,
    Upgraded,
    Welcome,
)
from multiserver.protocol._wire import FramedSocket
from multiserver.settings._config import DaemonConfig
from multiserver.system._paths import DaemonPaths

if TYPE_CHECKING:
    from multiserver.terminal._capture import Capture

Notice = ChildExited | ChildTaken | GiveBack | Shared | Skipped
T = TypeVar("T")
NOTICE_QUEUE = 10_000


class _Waiter:
    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[Event](math.inf)


class Client:
    """A connection to one daemon, after the handshake. Build it with
    ``open_client``."""

    def __init__(self, framed: FramedSocket, welcome: Welcome, socket_path: Path) -> None:
        self._framed = framed
        self.welcome = welcome
        self.socket_path = socket_path
        self._reqs = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._broken: Exception | None = None
        self._send_lock = trio.Lock()
        self._notice_send, self.notices = trio.open_memory_channel[Notice](NOTICE_QUEUE)
        self.notices_dropped = 0
        self._events = EventQueue()
        self._events_came = trio.Event()
        self._watching = False
        self._nursery_cm: contextlib.AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def instance_id(self) -> str:
        return self.welcome.instance_id

    @property
    def daemon_pid(self) -> int:
        return self.welcome.pid

    @property
    def version(self) -> int:
        return self.welcome.version

    # --- plumbing -------------------------------------------------------------

    async def _reader(self) -> None:
        try:
            while True:
                event = await self._framed.receive()
                self._route(event)
        except (ConnectionClosed, PeerProtocolError) as exc:
            self._break(exc)
        except trio.ClosedResourceError:
            self._break(ConnectionClosed("connection closed"))
        finally:
            # Stopped any other way (its nursery cancelled), it reads no
            # answer any more: a request that waits for one, shielded even,
            # fails now instead of waiting for ever.
            self._break(ConnectionClosed("connection no longer read (its reader was cancelled)"))

    def _route(self, event: Event) -> None:
        msg = event.message
        if isinstance(msg, ChildExited | ChildTaken | GiveBack | Shared | Skipped):
            try:
                self._notice_send.send_nowait(msg)
            except trio.WouldBlock:
                self.notices_dropped += 1
            return
        if isinstance(msg, SessionEvent | EventsMissed):
            self._events.put(msg)
            self._events_came.set()
            return
        req = getattr(msg, "req", None)
        if req is None:  # the daemon reports our protocol error and closes
            assert isinstance(msg, Error)
            self._break(PeerProtocolError(msg.message))
            return
        waiter = self._waiters.get(req)
        if waiter is None:
            close_fds(event.fds)
            return
        waiter.send.send_nowait(event)

    def _break(self, exc: Exception) -> None:
        if self._broken is None:
            self._broken = exc
        for waiter in self._waiters.values():
            waiter.send.close()
        self._notice_send.close()
        self._events_came.set()

    def _broken_error(self) -> MultiserverError:
        """The error that broke the connection, as its own type."""
        if isinstance(self._broken, PeerProtocolError):
            return PeerProtocolError(str(self._broken))
        return ConnectionClosed(str(self._broken or "connection closed"))

    @contextlib.contextmanager
    def _request(self) -> Iterator[tuple[int, _Waiter]]:
        if self._broken is not None:
            raise self._broken_error()
        req = next(self._reqs)
        waiter = _Waiter()
        self._waiters[req] = waiter
        try:
            yield req, waiter
        finally:
            del self._waiters[req]
            # Close fds of replies nobody will read.
            while True:
                try:
                    close_fds(waiter.receive.receive_nowait().fds)
                except (trio.WouldBlock, trio.EndOfChannel):
                    break

    async def _send(self, msg: Message) -> None:
        async with self._send_lock:
            try:
                await self._framed.send(msg)
            except ConnectionClosed as exc:
                self._break(exc)
                raise
            except Unrepresentable:  # nothing was sent: the connection is fine
                raise DaemonTooOld.speaking(self.version) from None

    async def _next(self, waiter: _Waiter) -> Event:
        try:
            event = await waiter.receive.receive()
        except trio.EndOfChannel:
            raise self._broken_error() from None
        if isinstance(event.message, Error):
            close_fds(event.fds)
            raise RequestFailed(event.message.errno, event.message.message)
        return event

    async def _run(self, call: Call[T]) -> T:
        """Send ``call``'s request; feed it the reply frames until its
        result. Cancellation: what the call collected (fds) is closed."""
        with self._request() as (req, waiter):
            try:
                await self._send(call.message(req))
                while True:
                    out = call.feed(await self._next(waiter))
                    if not isinstance(out, More):
                        return out
            except BaseException:
                call.abandon()
                raise

    # --- requests -------------------------------------------------------------

    async def launch(
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
        """Start ``argv`` on a new PTY. With ``hold`` (default) the master fd
        comes back and this connection holds the child; else the daemon
        drains it. ``share``: other clients may join it, and this one gives
        reading back when asked (``GiveBack``; docs/sharing.md); without,
        a join is refused while this connection holds it. ``argv``, ``env`` and ``cwd`` reach the child byte for byte
        (strings as Python decodes OS bytes: ``os.fsencode`` gives them back).
        Raises RequestFailed (e.g. "command not found: foo"); DaemonTooOld,
        before sending anything, for bytes that are not UTF-8 and a daemon
        older than protocol version 5.

        Cancellation: the child may have started; if so it is held by this
        connection (released when it closes) and its fd is closed.
        """
        return await self._run(
            calls.launch(
                argv,
                env=env,
                cwd=cwd,
                rows=rows,
                cols=cols,
                name=name,
                linger=linger,
                hold=hold,
                share=share,
                version=self.version,
            )
        )

    async def claim(
        self,
        ids: Sequence[int],
        *,
        steal: bool = False,
        keep_output: bool = False,
        join: bool = False,
        read_only: bool = False,
    ) -> list[ClaimResult]:
        """Claim several children in one request; one result per id, in order.

        A child held by another client is refused (EBUSY) unless ``steal``,
        which takes it over and tells the other client. ``keep_output``: the
        daemon hands over a copy of the buffered output and keeps it (for a
        claimer that releases without reading the fds).

        ``join`` (protocol 9, one id; docs/sharing.md): hold it beside its
        other holders, and let others join (a claim without it refuses
        joins while this connection holds the child). Alone, this client reads ``master`` as ever; else its
        output comes on the result's ``feed`` (the master only takes what is
        typed), and this client may be pushed ``GiveBack`` (answer with
        ``hand_back``), ``Shared`` and ``Skipped``. ``read_only``: watch, no
        master. Raises DaemonTooOld for a join of an older daemon.

        Cancellation: some children may be claimed (held by this connection
        until released or closed); their fds are closed.
        """
        call = calls.claim(
            ids,
            steal=steal,
            keep_output=keep_output,
            join=join,
            read_only=read_only,
            version=self.version,
        )
        return await self._run(call)

    async def hand_back(self, child_id: int, shown: bytes) -> int:
        """Answer a ``GiveBack``: this client stopped reading the master of
        ``child_id`` and showed ``shown``. Returns the feed its output comes
        on from now (the caller's fd); docs/sharing.md.

        Cancellation: the daemon may have taken reading back (the feed is
        then closed)."""
        return await self._run(calls.hand_back(child_id, shown))

    async def release(
        self, ids: Sequence[int], *, replace_output: bytes | None = None
    ) -> tuple[list[int], list[ChildFailed]]:
        """Give children back to the daemon, which drains them again. Stop
        reading their fds first (and close your copies after).

        ``replace_output``: what this client last showed of them; the daemon
        keeps it (bounded) in place of their kept output, so the next claim
        replays the screen left behind. Pair it with ``claim(keep_output=True)``
        so that a client that dies before releasing loses nothing.

        Returns (released ids, failures).

        Cancellation: some children may be released.
        """
        return await self._run(calls.release(ids, replace_output=replace_output))

    async def signal(self, child_id: int, signum: int) -> None:
        """Send ``signum`` to the child's process group.

        Cancellation: the signal may have been sent."""
        await self._run(calls.signal(child_id, signum))

    async def collect(self, child_id: int) -> ChildInfo:
        """Take an exited child's status; the daemon forgets the child.
        Raises RequestFailed(EBUSY) while it runs.

        Cancellation: the child may have been collected."""
        return await self._run(calls.collect(child_id))

    async def list(
        self,
        *,
        foreground: bool = False,
        prefixes: Sequence[str] | None = None,
        ids: Sequence[int] | None = None,
    ) -> list[ChildInfo]:
        """Every child of the daemon; ``foreground`` adds the foreground
        process's pid, cwd and argv where the OS tells them. With
        ``prefixes`` or ``ids``, only the children whose name begins with one
        of the prefixes or whose id is one of the ids, whatever the daemon's
        version (an older one lists all and they are selected here).

        Cancellation: nothing happened."""
        return await self._run(
            calls.listing(foreground=foreground, prefixes=prefixes, ids=ids, version=self.version)
        )

    async def peek(self, child_id: int, max_bytes: int | None = None) -> PeekResult:
        """The output the daemon holds for a child, without claiming it.

        Cancellation: nothing happened."""
        return await self._run(calls.peek(child_id, max_bytes))

    async def capture(
        self, child_id: int, *, history: int | None = 0, styled: bool = False
    ) -> Capture:
        """A child's screen as its terminal shows it (``multiserver.capture``
        of its ``peek``, or of what its holder keeps if a client holds it),
        rendered in a worker thread.

        Cancellation: nothing happened (a rendering under way finishes in
        its thread, unseen)."""
        from multiserver.client._capture import capture

        peeked = await self.shown(child_id)
        return await trio.to_thread.run_sync(
            lambda: capture(peeked, history=history, styled=styled), abandon_on_cancel=True
        )

    async def shown(self, child_id: int) -> PeekResult:
        """A child's output as its terminal shows it now: the daemon's
        buffer while the daemon reads it (nobody holds it, or several do);
        while one client holds it alone, what that client showed, which it
        hands back for a moment's read-only join (protocol 9), else what it
        keeps in the session's output file (up to a few seconds behind).

        Cancellation: the join may stay until the connection closes."""
        from multiserver.client._capture import asks_holder, held_output, joined_output

        peeked = await self.peek(child_id)
        if asks_holder(peeked.child, self.version):
            try:
                (joined,) = await self.claim([child_id], read_only=True)
            except RequestFailed:  # its holder cannot share it: what it keeps
                return held_output(peeked, self.instance_id)
            close_fds([fd for fd in (joined.master, joined.feed) if fd is not None])
            if joined.error is None:
                await self.release([child_id])
                return joined_output(peeked, joined)
        return held_output(peeked, self.instance_id)

    async def resize(self, child_id: int, rows: int, cols: int) -> None:
        """Cancellation: the size may have been set."""
        await self._run(calls.resize(child_id, rows, cols))

    async def upgrade(self) -> Upgraded:
        """Have the daemon replace its code with the installed one, in
        place (same pid, children, connections, instance id); the answer
        comes from the new code. Raises RequestFailed (the daemon goes on
        with its code) with why.

        Cancellation: the upgrade may still happen."""
        return await self._run(calls.upgrade())

    async def watch(self, since: int | None = None) -> int:
        """Have the daemon push its events to this connection (protocol 8,
        docs/events.md): those from ``since`` it still holds first (None:
        only those to come). Returns the seq the next event to happen will
        carry. ``events`` reads them (and calls this itself). Raises
        DaemonTooOld, before sending anything, for a daemon older than
        protocol 8; RequestFailed (EINVAL) for a ``since`` past the next
        event, or a second watch.

        Cancellation: the connection may be watching."""
        check_events(self.version)
        next_seq = await self._run(calls.watch(since))
        self._watching = True
        return next_seq

    async def events(self, since: int | None = None) -> AsyncIterator[SessionEvent | EventsMissed]:
        """The daemon's events, in order, for as long as the connection
        lasts: ``SessionEvent`` records, and an ``EventsMissed`` in place of
        events that will not come (this client or the daemon kept at most
        4,096 that were not read: read the daemon's state again, ``list``),
        after which events go on. Starts watching (``watch(since)``) unless
        the connection does already (then ``since`` must be None). Raises
        what ``watch`` raises, and ConnectionClosed once the daemon is gone
        (after every event that came before it)::

            async for event in client.events():
                if isinstance(event, EventsMissed):
                    children = await client.list()
                elif event.kind == "exited":
                    print(event.name, describe_exit(event.exit_code))

        Cancellation: the connection goes on watching; the events that come
        meanwhile wait (bounded) for the next ``events()``."""
        if not self._watching:
            await self.watch(since)
        elif since is not None:
            raise ValueError("this connection watches already: since must be None")
        while True:
            item = self._events.get()
            if item is not None:
                yield item
                continue
            if self._broken is not None:
                raise self._broken_error()
            self._events_came = trio.Event()
            await self._events_came.wait()

    async def shutdown(self, *, force: bool = False) -> None:
        """Stop the daemon; refused (EBUSY) while children run unless
        ``force``, which ends them (SIGHUP, then SIGKILL).

        Cancellation: the daemon may be stopping."""
        await self._run(calls.shutdown(force))

    def close(self) -> None:
        """Close the connection: the daemon releases every child it held."""
        self._break(ConnectionClosed("connection closed"))
        self._framed.close()

    def start(self, nursery: trio.Nursery) -> None:
        """Start reading replies and notices in ``nursery`` (for a client that
        must outlive the task that dialled it). ``close()`` stops the reader."""
        if self._nursery is not None:
            raise RuntimeError("client already started")
        self._nursery = nursery
        nursery.start_soon(self._reader)

    async def __aenter__(self) -> Client:
        """Start reading replies and notices (in a nursery of our own)."""
        if self._nursery_cm is not None:
            raise RuntimeError("client already entered")
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        nursery.start_soon(self._reader)
        self._nursery = nursery
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Close the connection and stop reading. The block's own exception
        comes out as itself, not wrapped in an ExceptionGroup (the reader
        task never raises)."""
        self.close()
        assert self._nursery is not None and self._nursery_cm is not None
        self._nursery.cancel_scope.cancel()
        try:
            return await self._nursery_cm.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                raise exc from exc.__cause__
            raise


async def handshake(framed: FramedSocket, *, children: bool = True) -> Welcome:
    """Send Hello, return the daemon's Welcome (listing the daemon's
    children unless ``children`` is false).

    Raises VersionRefused, ConnectionClosed, PeerProtocolError or
    RequestFailed (e.g. refused uid).

    Cancellation: the connection is in an unknown state; close it.
    """
    try:
        await framed.send(hello(children))
    except ConnectionClosed:
        # A daemon that refuses us before reading (another uid) has sent its
        # Error and closed: our send breaks, but its answer is there to read.
        pass
    reader = WelcomeReader()
    while True:
        event = await framed.receive()
        close_fds(event.fds)
        welcome = reader.feed(event.message)
        if welcome is not None:
            return welcome


async def dial(
    paths: DaemonPaths | Path,
    *,
    start: bool = False,
    config: DaemonConfig | None = None,
    children: bool = True,
) -> Client:
    """Connect (and with ``start``, start the daemon if none runs) and say
    hello. The returned client is not reading yet: use it as ``async with
    client:`` (or use ``open_client``, which does both).

    ``paths`` is a ``DaemonPaths`` or a socket path (which is never started).

    Cancellation: nothing is left open; a daemon it started keeps running.
    """
    if isinstance(paths, Path):
        if start:
            raise ValueError("start=True needs DaemonPaths")
        socket_path = paths
    else:
        socket_path = paths.socket
    attempts = 0
    while True:
        attempts += 1
        if start and isinstance(paths, DaemonPaths):
            sock = await connect_or_start(paths, config)
        else:
            sock = await connect(socket_path)
        framed = FramedSocket(sock, Codec("client"))
        try:
            welcome = await handshake(framed, children=children)
        except ConnectionClosed:
            framed.close()
            if not start:
                raise
            # A daemon that was exiting when we connected; start another.
            if attempts >= 5:
                raise DaemonNotRunning(f"daemon at {socket_path} closed the connection") from None
            continue
        except BaseException:
            framed.close()
            raise
        return Client(framed, welcome, socket_path)


@contextlib.asynccontextmanager
async def open_client(
    paths: DaemonPaths | Path,
    *,
    start: bool = False,
    config: DaemonConfig | None = None,
    children: bool = True,
) -> AsyncIterator[Client]:
    """``dial`` then ``async with client``: yields a reading client; leaving
    the block closes the connection, which releases every child it still holds.

    Cancellation: the connection is closed; a daemon it started keeps running.
    """
    client = await dial(paths, start=start, config=config, children=children)
    async with client:
        yield client
