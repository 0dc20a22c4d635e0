"""The daemon: an accept loop, the request handlers, and the child table
the client connections share (each one a ``_connection.ClientConnection``).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket
from collections.abc import Iterator

import trio

from multiserver import _platform
from multiserver._children import Child, ChildTable, LaunchError
from multiserver._codec import MAX_FDS_PER_FRAME
from multiserver._config import DaemonConfig
from multiserver._connection import ClientConnection
from multiserver._messages import (
    ChildError,
    ChildExited,
    Claim,
    Claimed,
    ClaimedChild,
    Collect,
    Collected,
    Error,
    Launch,
    Launched,
    Ok,
    Peek,
    Peeked,
    Release,
    Released,
    Resize,
    Shutdown,
    Signal,
)

log = logging.getLogger("multiserver.daemon")


class Daemon:
    """The daemon's state. ``serve`` runs it on a bound, listening socket."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.instance_id = secrets.token_hex(16)
        self._clients: set[ClientConnection] = set()
        self._children: ChildTable | None = None
        self._changed = trio.Event()
        self._stop = trio.Event()

    @property
    def children(self) -> ChildTable:
        assert self._children is not None
        return self._children

    async def wait_stopped(self) -> None:
        """Wait until the daemon was told to stop (idle, or a Shutdown)."""
        await self._stop.wait()

    def _on_change(self) -> None:
        self._changed.set()

    def _on_exit(self, child: Child) -> None:
        assert child.exit_code is not None
        log.info("child %d (pid %d) exited with %d", child.id, child.pid, child.exit_code)
        for conn in list(self._clients):
            conn.notify(ChildExited(id=child.id, exit_code=child.exit_code))

    async def serve(
        self,
        listener: trio.socket.SocketType,
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

    async def _accept_loop(self, listener: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        while True:
            try:
                sock, _ = await listener.accept()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("accept: %s; pausing", exc)
                    await trio.sleep(0.1)
                    continue
                raise
            conn = ClientConnection(self, sock)
            self._clients.add(conn)
            self._on_change()
            nursery.start_soon(conn.serve)

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

    async def client_gone(self, conn: ClientConnection) -> None:
        """Every child the client held becomes unheld at once."""
        self._clients.discard(conn)
        for child_id in sorted(conn.held):
            child = self.children.get(child_id)
            if child is not None and child.holder is conn:
                self.children.become_unheld(child)
        conn.held.clear()
        self._on_change()

    # --- requests -----------------------------------------------------------------

    def _lookup(self, child_id: int) -> Child | None:
        return self.children.get(child_id)

    async def launch(self, conn: ClientConnection, msg: Launch) -> None:
        try:
            child = self.children.launch(
                argv=msg.argv,
                env=msg.env,
                cwd=msg.cwd,
                rows=msg.rows,
                cols=msg.cols,
                name=msg.name,
                linger=msg.linger,
                holder=conn if msg.hold else None,
            )
        except LaunchError as exc:
            await conn.send(Error(req=msg.req, errno=exc.errno, message=exc.message))
            return
        log.info("child %d (pid %d) launched on %s", child.id, child.pid, child.tty)
        if msg.hold:
            conn.held.add(child.id)
            assert child.master is not None
            await conn.send(Launched(req=msg.req, child=child.info()), [child.master])
        else:
            await conn.send(Launched(req=msg.req, child=child.info()))

    async def claim(self, conn: ClientConnection, msg: Claim) -> None:
        # Every child is held (or refused) and handed over with no
        # checkpoint in between, so the whole claim is atomic; the answer
        # goes out in as few frames as the fd and size limits allow.
        parts: list[tuple[ClaimedChild, bytes, int | None]] = []
        for child_id in msg.ids:
            child = self._lookup(child_id)
            if child is None:
                parts.append(
                    (
                        ClaimedChild(
                            id=child_id, errno=errno.ENOENT, message=f"no child {child_id}"
                        ),
                        b"",
                        None,
                    )
                )
                continue
            previous = child.holder
            try:
                self.children.hold(child, conn, steal=msg.steal)
            except LaunchError as exc:
                parts.append(
                    (ClaimedChild(id=child_id, errno=exc.errno, message=exc.message), b"", None)
                )
                continue
            if isinstance(previous, ClientConnection) and previous is not conn:
                previous.held.discard(child_id)
            conn.held.add(child_id)
            output, dropped = self.children.handover(child, keep_output=msg.keep_output)
            fd = child.master if child.running else None
            part = ClaimedChild(
                id=child_id,
                child=child.info(),
                dropped=dropped,
                output_len=len(output),
                fd=fd is not None,
            )
            parts.append((part, output, fd))
        batches = list(claim_batches(parts))
        for i, (children, outputs, fds) in enumerate(batches):
            await conn.send(
                Claimed(
                    req=msg.req, children=children, last=i == len(batches) - 1, outputs=outputs
                ),
                fds,
            )

    async def release(self, conn: ClientConnection, msg: Release) -> None:
        released: list[int] = []
        for child_id in msg.ids:
            child = self._lookup(child_id)
            if child is None or child.holder is not conn:
                why = (
                    f"no child {child_id}"
                    if child is None
                    else f"child {child_id} is not held by this client"
                )
                await conn.send(
                    ChildError(
                        req=msg.req,
                        id=child_id,
                        errno=errno.ENOENT if child is None else errno.EPERM,
                        message=why,
                    )
                )
                continue
            conn.held.discard(child_id)
            if msg.replace_output:
                child.buffer.replace(msg.output)
            self.children.become_unheld(child)
            released.append(child_id)
        await conn.send(Released(req=msg.req, ids=released))

    async def signal(self, conn: ClientConnection, msg: Signal) -> None:
        child = self._lookup(msg.id)
        if child is None:
            await conn.send(Error(req=msg.req, errno=errno.ENOENT, message=f"no child {msg.id}"))
            return
        if msg.signum not in _platform.VALID_SIGNALS or msg.signum == 0:
            await conn.send(
                Error(req=msg.req, errno=errno.EINVAL, message=f"bad signal {msg.signum}")
            )
            return
        if not child.running:
            await conn.send(
                Error(req=msg.req, errno=errno.ESRCH, message=f"child {msg.id} has exited")
            )
            return
        try:
            os.killpg(child.pid, msg.signum)
        except ProcessLookupError:
            try:
                os.kill(child.pid, msg.signum)
            except ProcessLookupError:
                pass
        await conn.send(Ok(req=msg.req))

    async def collect(self, conn: ClientConnection, msg: Collect) -> None:
        child = self._lookup(msg.id)
        if child is None:
            await conn.send(Error(req=msg.req, errno=errno.ENOENT, message=f"no child {msg.id}"))
            return
        if child.running:
            await conn.send(
                Error(req=msg.req, errno=errno.EBUSY, message=f"child {msg.id} is still running")
            )
            return
        if isinstance(child.holder, ClientConnection):
            child.holder.held.discard(child.id)
        info = self.children.collect(child)
        await conn.send(Collected(req=msg.req, child=info))

    async def peek(self, conn: ClientConnection, msg: Peek) -> None:
        child = self._lookup(msg.id)
        if child is None:
            await conn.send(Error(req=msg.req, errno=errno.ENOENT, message=f"no child {msg.id}"))
            return
        if msg.max_bytes is not None and msg.max_bytes < 0:
            await conn.send(
                Error(req=msg.req, errno=errno.EINVAL, message="max_bytes must be >= 0")
            )
            return
        if not child.running and child.holder is None:
            child.read_available()
        output, dropped = child.buffer.peek(msg.max_bytes)
        await conn.send(Peeked(req=msg.req, child=child.info(), dropped=dropped, output=output))

    async def resize(self, conn: ClientConnection, msg: Resize) -> None:
        child = self._lookup(msg.id)
        if child is None or child.master is None:
            await conn.send(Error(req=msg.req, errno=errno.ENOENT, message=f"no child {msg.id}"))
            return
        if not (1 <= msg.rows <= 10000 and 1 <= msg.cols <= 10000):
            await conn.send(
                Error(
                    req=msg.req,
                    errno=errno.EINVAL,
                    message=f"bad terminal size {msg.rows}x{msg.cols}",
                )
            )
            return
        _platform.set_winsize(child.master, msg.rows, msg.cols)
        child.rows, child.cols = msg.rows, msg.cols
        await conn.send(Ok(req=msg.req))

    async def shutdown(self, conn: ClientConnection, msg: Shutdown) -> None:
        running = self.children.running_count()
        if running and not msg.force:
            await conn.send(
                Error(
                    req=msg.req,
                    errno=errno.EBUSY,
                    message=f"{running} session(s) still running; use --force to end them",
                )
            )
            return
        log.info("shutdown requested (force=%s)", msg.force)
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for child in self.children:
                    if child.running:
                        nursery.start_soon(self.children.end, child)
            for child in self.children:
                if not child.running:
                    self.children.collect(child)
        await conn.send(Ok(req=msg.req))
        await conn.flush()
        self._stop.set()


# A Claimed frame's outputs stay well under the frame limit.
CLAIM_BATCH_BYTES = 8 * 1024 * 1024


def claim_batches(
    parts: list[tuple[ClaimedChild, bytes, int | None]],
) -> Iterator[tuple[list[ClaimedChild], bytes, list[int]]]:
    """Split a claim's answer into frames of at most 253 fds and about
    CLAIM_BATCH_BYTES of output; always at least one frame."""
    children: list[ClaimedChild] = []
    outputs: list[bytes] = []
    fds: list[int] = []
    size = 0
    for part, output, fd in parts:
        full = len(fds) + (fd is not None) > MAX_FDS_PER_FRAME
        if children and (full or size + len(output) > CLAIM_BATCH_BYTES):
            yield children, b"".join(outputs), fds
            children, outputs, fds, size = [], [], [], 0
        children.append(part)
        outputs.append(output)
        size += len(output)
        if fd is not None:
            fds.append(fd)
    yield children, b"".join(outputs), fds


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
