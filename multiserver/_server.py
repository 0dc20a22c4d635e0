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
from typing import Any, Protocol

import trio

from multiserver import __version__
from multiserver._children import Child, ChildTable
from multiserver._codec import Codec
from multiserver._config import DaemonConfig
from multiserver._connection import ClientConnection
from multiserver._core import RequestCore
from multiserver._messages import Error
from multiserver._wire import IntakeBudget

log = logging.getLogger("multiserver.daemon")

# What the daemon says it runs (Welcome.server): the installed code's version.
SERVER_NAME = f"multiserver/{__version__}"


class Listener(Protocol):
    """What the daemon accepts connections from: a listening trio socket,
    or ``_files.SwappableListener``, which the file watch may re-bind."""

    async def accept(self) -> tuple[trio.socket.SocketType, Any]: ...


class Daemon:
    """The daemon's state. ``serve`` runs it on a bound, listening socket."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.instance_id = secrets.token_hex(16)
        self._clients: set[ClientConnection] = set()
        self._children: ChildTable | None = None
        self._core: RequestCore[Child] | None = None
        self._changed = trio.Event()
        self._stop = trio.Event()
        self.intake = IntakeBudget(config.intake_limit, config.intake_free)
        self._refused = 0  # connections refused at the cap since the last log line
        self._refused_logged = -math.inf

    @property
    def children(self) -> ChildTable:
        assert self._children is not None
        return self._children

    @property
    def core(self) -> RequestCore[Child]:
        assert self._core is not None
        return self._core

    async def wait_stopped(self) -> None:
        """Wait until the daemon was told to stop (idle, or a Shutdown)."""
        await self._stop.wait()

    def stop(self) -> None:
        self._stop.set()

    def _on_change(self) -> None:
        self._changed.set()

    def _on_exit(self, child: Child) -> None:
        assert child.exit_code is not None
        log.info("child %d (pid %d) exited with %d", child.id, child.pid, child.exit_code)
        self.core.child_exited(child.id, child.exit_code)

    async def serve(
        self,
        listener: Listener,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept and serve clients until idle-exit or shutdown. ``listener``
        must already listen; ``task_status.started()`` is reported at once.

        Cancellation: every connection is closed; children are left running
        (the caller decides whether to end them).
        """
        try:
            async with trio.open_nursery() as nursery:
                self._children = ChildTable(
                    nursery,
                    buffer_limit=self.config.buffer_limit,
                    on_exit=self._on_exit,
                    on_change=self._on_change,
                )
                self._core = RequestCore(
                    self._children,
                    instance_id=self.instance_id,
                    pid=os.getpid(),
                    server=SERVER_NAME,
                )
                nursery.start_soon(self._children.run)
                nursery.start_soon(self._accept_loop, listener, nursery)
                if self.config.idle_exit is not None:
                    nursery.start_soon(self._idle_watch)
                task_status.started()
                await self._stop.wait()
                nursery.cancel_scope.cancel()
        finally:
            if self._children is not None:
                self._children.close()

    async def _accept_loop(self, listener: Listener, nursery: trio.Nursery) -> None:
        while True:
            try:
                sock, _ = await listener.accept()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("accept: %s; pausing", exc)
                    await trio.sleep(0.1)
                    continue
                raise
            if len(self._clients) >= self.config.max_connections:
                nursery.start_soon(self._refuse, sock)
                continue
            conn = ClientConnection(self, sock)
            self._clients.add(conn)
            self.core.connect(conn)
            self._on_change()
            nursery.start_soon(conn.serve)

    async def _refuse(self, sock: trio.socket.SocketType) -> None:
        """One connection past the cap: one line of why, then close. Logged
        at most once a second, with how many were refused meanwhile."""
        self._refused += 1
        now = trio.current_time()
        if now - self._refused_logged >= 1.0:
            log.warning(
                "refused %d connection(s): %d open, the most allowed (max_connections)",
                self._refused,
                len(self._clients),
            )
            self._refused, self._refused_logged = 0, now
        text = f"too many connections ({len(self._clients)} open); try again later"
        frame = Codec("daemon").send(Error(req=None, errno=errno.EUSERS, message=text))
        with sock, trio.move_on_after(1.0), contextlib.suppress(OSError):
            await sock.send(frame)

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
