"""The daemon: an accept loop, the idle watch, and the state the client
connections share: the child table and the request core that decides every
request (``_core.py``); each connection is a ``_connection.ClientConnection``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Protocol

import trio

from multiserver.daemon import _upgrade
from multiserver.daemon._children import Child, ChildTable
from multiserver.daemon._connection import ClientConnection
from multiserver.daemon._core import Answer, RequestCore
from multiserver.daemon._events import EventLog
from multiserver.daemon._fds import OwnedFd
from multiserver.daemon._snapshot import Snapshot, SnapshotError, blob as snapshot_blob
from multiserver.daemon._upgrade import SnapshotFile
from multiserver.protocol._codec import Codec, ProtocolError
from multiserver.protocol._messages import Error
from multiserver.protocol._proto import SERVER_NAME as SERVER_NAME
from multiserver.protocol._wire import IntakeBudget
from multiserver.settings._config import DaemonConfig
from multiserver.system import _platform

log = logging.getLogger("multiserver.daemon")


class Listener(Protocol):
    """What the daemon accepts connections from: a listening trio socket,
    or ``_files.SwappableListener``, which the file watch may re-bind."""

    async def accept(self) -> tuple[trio.socket.SocketType, Any]: ...

    def fileno(self) -> int: ...


# accept() failed for want of an fd (this process's: EMFILE; the system's:
# ENFILE) or of memory.
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)
_OUT_OF_MEMORY = (errno.ENOBUFS, errno.ENOMEM)
# How long the accept loop pauses when it can neither accept nor turn away.
ACCEPT_PAUSE = 0.1


def _open_spare() -> OwnedFd | None:
    """An fd held only to be closed when accept() finds none free (as nginx
    and libuv do): with it, a connection at the limit is told so in one
    line and closed, instead of waiting in the backlog for its timeout."""
    try:
        return OwnedFd(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        return None


async def sharing_ticks(core: RequestCore[Any]) -> None:
    """Run ``core.tick`` as often as it asks while it has work (a reader
    asked to give reading back, a holder behind, a paused master); asleep
    otherwise (an idle daemon never wakes for it).

    Cancellation: nothing is left half done.
    """
    wanted = trio.Event()
    core.tick_wanted, core.clock = wanted.set, trio.current_time
    while True:
        await wanted.wait()
        wanted = trio.Event()
        core.tick_wanted = wanted.set
        while (wait := core.tick(trio.current_time())) is not None:
            await trio.sleep(wait)


class Daemon:
    """The daemon's state. ``serve`` runs it on a bound, listening socket."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        instance_id: str | None = None,
        child_nofile: int | None = None,
    ) -> None:
        self.config = config
        self.instance_id = instance_id or secrets.token_hex(16)
        # The soft RLIMIT_NOFILE its children get: the one it found before
        # raising its own (``_openfiles``); None: its own.
        self.child_nofile = child_nofile
        self._clients: set[ClientConnection] = set()
        self._children: ChildTable | None = None
        self._core: RequestCore[Child] | None = None
        self._changed = trio.Event()
        self._stop = trio.Event()
        self.intake = IntakeBudget(config.intake_limit, config.intake_free)
        self._refused = 0  # connections refused since the last log line
        self._refused_logged = -math.inf
        self._spare: OwnedFd | None = None  # ``_open_spare``, while it serves
        # Set by the process that serves it from its files (``_daemon_main``):
        # without them (the simulator, a bare ``serve``) it cannot upgrade.
        self.files: _upgrade.DaemonFiles | None = None
        # Where each child's output is kept on disk (``_keeping``); None:
        # nowhere (the simulator, a bare ``serve``).
        self.output_dir: Path | None = None
        self._accepting = trio.CancelScope()
        self._listener: Listener | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def children(self) -> ChildTable:
        assert self._children is not None
        return self._children

    @property
    def core(self) -> RequestCore[Child]:
        assert self._core is not None
        return self._core

    @property
    def events(self) -> EventLog:
        return self.core.events

    async def wait_stopped(self) -> None:
        """Wait until the daemon was told to stop (idle, or a Shutdown)."""
        await self._stop.wait()

    def stop(self) -> None:
        self._stop.set()

    def _on_change(self) -> None:
        self._changed.set()

    def _on_output(self, child: Child) -> None:
        self.core.output_seen(child)

    def _on_exit(self, child: Child) -> None:
        assert child.exit_code is not None
        log.info("child %d (pid %d) exited with %d", child.id, child.pid, child.exit_code)
        self.core.child_exited(child.id, child.exit_code)

    async def serve(
        self,
        listener: Listener,
        *,
        resume: SnapshotFile | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept and serve clients until idle-exit or shutdown. ``listener``
        must already listen; ``task_status.started()`` is reported at once.
        ``resume``: first take over the children and connections of the
        daemon before an upgrade (``_upgrade.py``), then close it; raises
        SnapshotError if they cannot be.

        Cancellation: every connection is closed; children are left running
        (the caller decides whether to end them).
        """
        self._spare = _open_spare()
        try:
            async with trio.open_nursery() as nursery:
                self._children = ChildTable(
                    nursery,
                    buffer_limit=self.config.buffer_limit,
                    on_exit=self._on_exit,
                    on_change=self._on_change,
                    on_output=self._on_output,
                    output_dir=self.output_dir,
                    child_nofile=self.child_nofile,
                )
                self._core = RequestCore(
                    self._children,
                    instance_id=self.instance_id,
                    pid=os.getpid(),
                    server=SERVER_NAME,
                    share_size=self.config.share_size,
                )
                self._nursery, self._listener = nursery, listener
                if resume is not None:
                    try:
                        self._resume(resume.snapshot, resume.area)
                    finally:
                        resume.close()
                    # What reading it left (its header, parsed): given back.
                    _platform.release_free_memory()
                nursery.start_soon(self._children.run)
                nursery.start_soon(self._accept_loop, listener, nursery)
                nursery.start_soon(sharing_ticks, self._core)
                if self.config.idle_exit is not None:
                    nursery.start_soon(self._idle_watch)
                task_status.started()
                await self._stop.wait()
                nursery.cancel_scope.cancel()
        finally:
            if self._children is not None:
                self._children.close()
            if self._spare is not None:
                self._spare.close()

    async def _accept_loop(self, listener: Listener, nursery: trio.Nursery) -> None:
        with self._accepting:
            await self._accept_all(listener, nursery)

    async def _accept_all(self, listener: Listener, nursery: trio.Nursery) -> None:
        while True:
            try:
                sock, _ = await listener.accept()
            except OSError as exc:
                if exc.errno not in _OUT_OF_FDS + _OUT_OF_MEMORY:
                    raise
                taken = await self._accept_short(listener)
                if taken is None:
                    continue
                sock = taken
            if len(self._clients) >= self.config.max_connections:
                nursery.start_soon(self._refuse, sock)
                continue
            conn = ClientConnection(self, sock)
            self._clients.add(conn)
            self.core.connect(conn)
            self._on_change()
            nursery.start_soon(conn.serve)

    def _count_refused(self, why: str) -> None:
        """One connection refused: logged at most once a second, with how
        many were refused meanwhile."""
        self._refused += 1
        now = trio.current_time()
        if now - self._refused_logged >= 1.0:
            log.warning("refused %d connection(s): %s", self._refused, why)
            self._refused, self._refused_logged = 0, now

    async def _refuse(self, sock: trio.socket.SocketType) -> None:
        """One connection past the cap: one line of why, then close."""
        self._count_refused(f"{len(self._clients)} open, the most allowed (max_connections)")
        text = f"too many connections ({len(self._clients)} open); try again later"
        frame = Codec("daemon").send(Error(req=None, errno=errno.EUSERS, message=text))
        with sock, trio.move_on_after(1.0), contextlib.suppress(OSError):
            await sock.send(frame)

    async def _accept_short(self, listener: Listener) -> trio.socket.SocketType | None:
        """accept() found no free fd (or memory). Wait for a connection to
        come (an accept tried at once fails again: trio tries before it
        waits, and the kernel wants a free fd before it looks for a
        connection), and accept it if fds were freed meanwhile. Else, out
        of fds, turn it away with the spare fd: one line, ``EMFILE``, and
        closed. Without a spare (or out of memory), pause ACCEPT_PAUSE, as
        trio's ``serve_listeners`` does. The connections the daemon has
        are served meanwhile, each by its own task.

        Cancellation: nothing was accepted, or what was is closed.
        """
        with contextlib.suppress(trio.ClosedResourceError):  # the watch re-bound it
            await trio.lowlevel.wait_readable(listener.fileno())
        try:
            sock, _ = await listener.accept()
            return sock
        except OSError as exc:
            if exc.errno not in _OUT_OF_FDS + _OUT_OF_MEMORY:
                raise
            why = exc
        if why.errno in _OUT_OF_FDS and self._spare is not None:
            self._spare.close()
            self._spare = None
            try:
                sock, _ = await listener.accept()
            except OSError:
                pass
            else:
                self._turn_away(sock)
            finally:
                self._spare = _open_spare()
            return None
        self._count_refused(f"accept: {why.strerror}")
        await trio.sleep(ACCEPT_PAUSE)
        if self._spare is None:
            self._spare = _open_spare()
        return None

    def _turn_away(self, sock: trio.socket.SocketType) -> None:
        """A connection accepted on the spare fd: its one line, and closed,
        in one synchronous step (the spare's number is free again for it)."""
        limit = _platform.nofile_limit()
        self._count_refused(f"out of open files ({limit}, the limit)")
        text = (
            f"the daemon has all {limit} of its open files in use: it serves the clients"
            " it has, but no new one until some close (its sessions run on)"
        )
        frame = Codec("daemon").send(Error(req=None, errno=errno.EMFILE, message=text))
        with sock, contextlib.suppress(OSError):
            os.write(sock.fileno(), frame)  # a fresh socket's buffer takes it whole

    async def _idle_watch(self) -> None:
        assert self.config.idle_exit is not None
        while True:
            if not self._clients and not len(self.children):
                with trio.move_on_after(self.config.idle_exit) as scope:
                    self._changed = trio.Event()
                    await self._changed.wait()
                if scope.cancelled_caught and not self._clients and not len(self.children):
                    log.info("idle for %.1f s: exiting", self.config.idle_exit)
                    self._stop.set()
                    return
            else:
                self._changed = trio.Event()
                await self._changed.wait()

    # --- upgrading in place (``_upgrade.py``) ------------------------------------

    @property
    def clients(self) -> list[ClientConnection]:
        return list(self._clients)

    async def upgrade(self, conn: ClientConnection, req: int) -> Answer:
        """An Upgrade from ``conn``: returns only if this code goes on (the
        error says why); otherwise the process is the new code."""
        if self.files is None:
            return self.core.error(conn, req, errno.EOPNOTSUPP, "this daemon cannot upgrade")
        return await _upgrade.upgrade(self, self.files, conn, req)

    def pause(self) -> None:
        """Stop accepting (connections wait in the backlog) and pause every
        connection (``ClientConnection.pause``)."""
        self._accepting.cancel()
        for conn in self._clients:
            conn.pause()

    def resume(self) -> None:
        """Serve again after a ``pause``."""
        for conn in self._clients:
            conn.resume()
        if self._accepting.cancel_called and self._nursery is not None:
            assert self._listener is not None
            self._accepting = trio.CancelScope()
            self._nursery.start_soon(self._accept_loop, self._listener, self._nursery)

    def _resume(self, snapshot: Snapshot, area: memoryview) -> None:
        """Take over what the daemon before an upgrade served: children
        first, then connections and what they hold; drain and time the
        children nobody holds. Raises SnapshotError."""
        assert self._nursery is not None
        children = self.children.adopt(snapshot.children, area, snapshot.next_child_id)
        try:
            kept = snapshot_blob(area, snapshot.events)
            self.core.events.adopt(kept, snapshot.next_event_seq, snapshot.signals_sent)
        except ProtocolError as exc:
            raise SnapshotError(f"an event does not read: {exc}") from None
        for state in snapshot.peers:
            conn = ClientConnection.adopt(self, state, area)
            self._clients.add(conn)
            self.core.adopt(conn, state.version, state.held, state.watch, state.shares)
        ClientConnection.number_from(max((p.number for p in snapshot.peers), default=0) + 1)
        lingering = {c.id: c.linger_left for c in snapshot.children}
        for child in children:
            if self.core.holder(child.id) is None:
                self.children.unhold(child, linger_left=lingering[child.id])
        paused = time.monotonic() - snapshot.paused_at
        self.core.upgraded()
        for conn in self._clients:
            if conn.upgrade_req is not None:
                conn.queue(_upgrade.upgraded(conn, conn.upgrade_req, snapshot.server, paused))
                conn.upgrade_req = None
            self._nursery.start_soon(conn.serve)
        log.info(
            "upgraded from %s to %s: %d children, %d clients, paused %.0f ms",
            snapshot.server,
            SERVER_NAME,
            len(children),
            len(self._clients),
            paused * 1000,
        )

    # --- for the connections ------------------------------------------------------

    def connection_gone(self, conn: ClientConnection) -> None:
        """Every child the client held becomes unheld at once."""
        self._clients.discard(conn)
        self.core.disconnect(conn)
        self._on_change()

    async def end_children(self) -> None:
        """An accepted Shutdown: end every child, forget them all.

        Cancellation: none (shielded).
        """
        log.info("shutdown requested")
        before = [c.id for c in self.children]
        await self.children.end_all()
        for child_id in before:
            if self.children.get(child_id) is None:
                self.core.forget(child_id)


def bind_listener(path: str) -> trio.socket.SocketType:
    """Bind and listen on ``path`` (which must not exist), mode 0600.

    The bind is a plain, blocking call on purpose: trio's ``bind`` of a Unix
    path runs in a worker thread, and while that thread lingers the daemon
    is multi-threaded, so every growth of its fd table waits for an RCU
    grace period in the kernel (6 ms on the first 200-child claim, which
    dups 200 fds). Binding in a private runtime dir does not block in
    practice, and nothing is being served yet.
    """
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        raw.bind(path)
        raw.listen(512)
    except BaseException:
        raw.close()
        raise
    finally:
        os.umask(old)
    return trio.socket.from_stdlib_socket(raw)
