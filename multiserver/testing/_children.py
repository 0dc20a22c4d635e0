"""The simulated child: a socketpair in place of a PTY, its output buffer, and
the child's side that the test drives."""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Callable
from typing import Protocol

import trio

from multiserver.protocol._messages import ChildInfo
from multiserver.terminal._buffer import OutputBuffer


class ChildOwner(Protocol):
    """What a child asks of its daemon (a ``SimDaemon``)."""

    def _holder_number(self, child_id: int) -> int | None:
        """The number of the connection that holds the child, if any."""
        ...

    def _child_exited(self, child: SimChild) -> None:
        """The child has exited: tell the clients."""
        ...

    def _child_output(self, child: SimChild) -> None:
        """The daemon read output of the child, which nobody holds."""
        ...


# Above Linux's PID_MAX_LIMIT (2**22) and macOS's 99998: a fake pid can never
# name a real process, so a stray os.kill on it fails with ESRCH.
_fake_pids = itertools.count(5_000_000)


class SimChild:
    """A simulated child. Made by ``SimDaemon.add_child`` or by a Launch.

    Owns both ends of a socketpair: the master end (dup'd to each client
    that claims it) and the child's side, which the test drives with
    ``write_output``, ``read_input`` and ``exit``.
    """

    def __init__(
        self,
        daemon: ChildOwner,
        *,
        id: int,
        name: str,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        rows: int,
        cols: int,
        linger: float | None,
        master: socket.socket,
        side: socket.socket,
        buffer_limit: int,
    ) -> None:
        self.id = id
        self.pid = next(_fake_pids)
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.tty = f"/dev/pts/sim{id}"
        self.rows = rows
        self.cols = cols
        self.linger = linger  # reported, never acted on
        self.started_at = time.time()
        self.exited_at: float | None = None
        self.exit_code: int | None = None
        self.signals: list[int] = []  # every signal a client sent, in order
        # What List(foreground=True) reports while the child runs.
        self.fg_pid: int | None = None
        self.fg_cwd: str | None = None
        self.fg_argv: list[str] | None = None
        self._daemon = daemon
        self.buffer = OutputBuffer(buffer_limit)  # the daemon's, as the real child's
        self._master = master
        self._side_sock = side  # the same socket: sync writes ...
        self._side = trio.socket.from_stdlib_socket(side)  # ... and awaited reads
        self._side_open = True
        self._closed = False
        # While several clients share it: the daemon "reads" it, and hands
        # each write to the request core (``ChildHost.share``).
        self.tap: Callable[[bytes], None] | None = None

    @property
    def running(self) -> bool:
        return self.exit_code is None

    @property
    def held(self) -> bool:
        return self._daemon._holder_number(self.id) is not None

    @property
    def holder(self) -> int | None:
        """The number of the connection that holds the child (1, 2, ...)."""
        return self._daemon._holder_number(self.id)

    @property
    def buffered(self) -> bytes:
        """Output written while nobody held the child, not yet handed over."""
        return self.buffer.peek()[0]

    def write_output(self, data: bytes) -> None:
        """The child writes ``data`` to its terminal: into the buffer while
        nobody holds it, else to the holder's fd. Raises BlockingIOError if
        the holder lets the socket fill (a few hundred KiB) without reading."""
        self._check_open()
        if not self.running:
            raise RuntimeError(f"child {self.id} has exited")
        if self.tap is not None:  # shared: the daemon reads it
            self.buffer.append(data)
            if data:
                self.tap(data)
            return
        if not self.held:
            self.buffer.append(data)
            if data:
                self._daemon._child_output(self)
            return
        view = memoryview(data)
        while view:
            # MSG_DONTWAIT: never block the trio thread, whatever the file flags.
            view = view[self._side_sock.send(view, socket.MSG_DONTWAIT) :]

    async def read_input(self, max_bytes: int = 65536) -> bytes:
        """Wait for what a client typed on its fd: at least one byte, or b""
        once the child has exited (also for a read waiting when it exits).

        Cancellation: nothing was read.
        """
        self._check_open()
        if not self._side_open:
            return b""
        try:
            return await self._side.recv(max_bytes)
        except trio.ClosedResourceError:
            return b""

    def exit(self, code: int = 0) -> None:
        """The child exits with ``code`` (negative: killed by that signal).
        Its side closes (a holder reads the rest of the output, then EOF),
        every connected client gets ChildExited, and the daemon keeps it
        until a client collects it."""
        self._check_open()
        if not self.running:
            raise RuntimeError(f"child {self.id} has exited already")
        self.exit_code = code
        self.exited_at = time.time()
        self._close_side()
        self._daemon._child_exited(self)

    def info(self, *, foreground: bool = False) -> ChildInfo:
        """What the daemon reports of this child."""
        return self.describe(held=self.held, foreground=foreground)

    def describe(self, *, held: bool, foreground: bool = False) -> ChildInfo:
        """``info`` with ``held`` given (the request core knows it)."""
        show_fg = foreground and self.running
        return ChildInfo(
            id=self.id,
            pid=self.pid,
            name=self.name,
            argv=list(self.argv),
            cwd=self.cwd,
            tty=self.tty,
            rows=self.rows,
            cols=self.cols,
            state="running" if self.running else "exited",
            exit_code=self.exit_code,
            held=held,
            buffered_bytes=len(self.buffer),
            dropped_bytes=self.buffer.dropped,
            started_at=self.started_at,
            exited_at=self.exited_at,
            linger=self.linger,
            fg_pid=self.fg_pid if show_fg else None,
            fg_cwd=self.fg_cwd if show_fg else None,
            fg_argv=list(self.fg_argv) if show_fg and self.fg_argv is not None else None,
        )

    # --- for the daemon -----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"child {self.id}: its daemon has stopped")

    @property
    def master(self) -> int | None:
        """The daemon's end of the socketpair (None once closed)."""
        return None if self._closed else self._master.fileno()

    def read_available(self) -> None:
        """Move what a holder left unread (or the exited child wrote) into
        the buffer."""
        while True:
            try:
                data = self._master.recv(65536, socket.MSG_DONTWAIT)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            self.buffer.append(data)
            if self.tap is not None:
                self.tap(data)

    def _close_side(self) -> None:
        if self._side_open:
            self._side_open = False
            self._side.close()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_side()
            self._master.close()
