"""The user's side of an attached session, played by the benchmark: an
outer PTY whose slave is the controlling terminal of an attach client (or of
the program itself, for the raw baseline), and a fast reader of its master.

The reader is what a terminal emulator would be, minus the drawing: the
master is non-blocking, each ``readv`` goes into one preallocated 1 MiB
buffer, and ``poll`` is called only when a read finds nothing, so the
reader adds about one syscall per chunk the kernel hands out. Its own
ceiling is measured by the figures that use it (the same loop on a pipe).

Shared by the ``attached``, ``echo`` and ``reattach`` figures.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import time
from collections.abc import Sequence

import attrs

from benchmarks.common import (
    MEASURE_TIMEOUT,
    Scratch,
    spawn_on_pty,
    stop_pids,
)
from benchmarks.installed import installed
from benchmarks.peers import TERM, Peer

SIZE = (24, 80)
READ_BUFFER = 1024 * 1024
# How often an unanswered probe byte is sent again while a client starts.
PROBE_EVERY = 0.02
# Quiet time that ends draining a client's first screen.
QUIET = 0.1


class ReaderTimeout(RuntimeError):
    pass


class ReaderQuiet(ReaderTimeout):
    """Output stopped before the marker came: it will not come (a client
    that dropped it). ``total``: the bytes read till then."""

    def __init__(self, total: int, quiet: float) -> None:
        super().__init__(f"nothing after {total} bytes for {quiet:g} s, and no marker")
        self.total = total


def multiserver_bin() -> str:
    """The ``multiserver`` command a user would have: installed from a wheel
    in a venv of its own (``benchmarks.installed``), made on first use."""
    return installed().command


@attrs.define
class Outer:
    """One outer PTY and the process on its slave. The master is ours."""

    pid: int
    master: int
    _tail: bytes = b""
    _buf: bytearray = attrs.field(factory=lambda: bytearray(READ_BUFFER), repr=False)
    _poller: select.poll | None = attrs.field(default=None, repr=False)

    @classmethod
    def spawn(cls, argv: Sequence[str], env: dict[str, str], *, echo: bool) -> Outer:
        """``argv`` on a fresh 24x80 PTY as its controlling terminal. An
        attach client gets ``echo=False``: until it puts the terminal in raw
        mode, a probe byte must not be echoed by the outer PTY itself."""
        exe = shutil.which(argv[0], path=env.get("PATH"))
        if exe is None:
            raise RuntimeError(f"{argv[0]} not found")
        pid, master = spawn_on_pty(exe, argv, env, size=SIZE, echo=echo)
        os.set_blocking(master, False)
        return cls(pid, master)

    def close(self) -> None:
        """Stop the process by pid and close the master."""
        try:
            stop_pids([self.pid])
        finally:
            if self.master >= 0:
                os.close(self.master)
                self.master = -1

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.master, view)
            except BlockingIOError:
                _wait(self.master, select.POLLOUT, 1.0)
                continue
            view = view[n:]

    def read_some(self, buf: bytearray, timeout: float) -> int:
        """Read what is there into ``buf`` (waiting up to ``timeout`` for
        something); returns the count, 0 on timeout, -1 once the slave side
        is closed."""
        while True:
            try:
                return os.readv(self.master, [buf])
            except BlockingIOError:
                if self._poller is None:
                    self._poller = select.poll()
                    self._poller.register(self.master, select.POLLIN)
                try:
                    if not self._poller.poll(max(0.0, timeout) * 1000):
                        return 0
                except InterruptedError:
                    pass
            except OSError as exc:
                if exc.errno == errno.EIO:
                    return -1
                raise

    def read_until(
        self, marker: bytes, timeout: float = MEASURE_TIMEOUT, quiet: float | None = None
    ) -> tuple[int, float]:
        """Read until ``marker`` has been seen; returns (bytes read including
        the chunk with the marker, perf_counter when it arrived). Raises
        ReaderTimeout after ``timeout``; with ``quiet``, ReaderQuiet once
        nothing has come for that long after the first bytes."""
        buf = self._buf
        keep = len(marker) - 1
        total = 0
        deadline = time.monotonic() + timeout
        tail = self._tail
        while True:
            wait = max(0.0, deadline - time.monotonic())
            n = self.read_some(buf, wait if quiet is None or not total else min(wait, quiet))
            if n == 0 and quiet is not None and total and time.monotonic() < deadline:
                raise ReaderQuiet(total, quiet)
            if n > 0:
                total += n
                head = bytes(buf[: min(n, keep)])
                if buf.find(marker, 0, n) >= 0 or marker in tail + head:
                    self._tail = b""
                    return total, time.perf_counter()
                tail = (tail + bytes(buf[max(0, n - keep) : n]))[-keep:] if keep else b""
                continue
            if n < 0:
                raise ReaderTimeout(f"the terminal closed after {total} bytes, before the marker")
            if time.monotonic() >= deadline:
                raise ReaderTimeout(f"no marker after {total} bytes in {timeout:g} s")

    def drain_quiet(self, quiet: float = QUIET, timeout: float = 5.0) -> int:
        """Read until nothing arrives for ``quiet`` seconds; returns the count."""
        buf = self._buf
        total = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = self.read_some(buf, quiet)
            if n <= 0:
                break
            total += n
        self._tail = b""
        return total

    def wait_echo(self, probe: bytes, timeout: float = 10.0, every: float = PROBE_EVERY) -> float:
        """Send ``probe`` (again every ``every`` seconds) until it comes back:
        the whole path is live both ways. Returns the seconds that took.
        Raises ReaderTimeout."""
        buf = self._buf
        t0 = time.monotonic()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            self.write(probe)
            until = time.monotonic() + every
            while (left := until - time.monotonic()) > 0:
                n = self.read_some(buf, left)
                if n < 0:
                    raise ReaderTimeout("the terminal closed while waiting for the client")
                if n and buf.find(probe, 0, n) >= 0:
                    return time.monotonic() - t0
        raise ReaderTimeout(f"no echo of {probe!r} within {timeout:g} s")

    def round_trip(self, key: bytes, timeout: float = 5.0) -> float:
        """Write ``key`` once and read until it comes back; returns the
        seconds from the write to the read that brought it."""
        buf = self._buf
        t0 = time.perf_counter()
        self.write(key)
        deadline = t0 + timeout
        while True:
            n = self.read_some(buf, max(0.0, deadline - time.perf_counter()))
            if n > 0 and buf.find(key, 0, n) >= 0:
                return time.perf_counter() - t0
            if n < 0:
                raise ReaderTimeout("the terminal closed")
            if n == 0 and time.perf_counter() >= deadline:
                raise ReaderTimeout(f"no echo of {key!r} within {timeout:g} s")


def _wait(fd: int, events: int, timeout: float) -> bool:
    p = select.poll()
    p.register(fd, events)
    try:
        return bool(p.poll(max(0.0, timeout) * 1000))
    except InterruptedError:
        return True


# --- who attaches --------------------------------------------------------------------


@attrs.frozen
class Keeper:
    """One way to keep a session and attach a terminal to it: multiserver
    (through its command line) or a peer."""

    name: str
    shape: str  # the attach command, for the report
    transparent: bool  # the client passes bytes through unchanged
    peer: Peer | None = None

    def installed(self) -> bool:
        return self.peer is None or self.peer.installed()

    def env(self, sc: Scratch) -> dict[str, str]:
        if self.peer is not None:
            return self.peer.env(sc)
        # TMPDIR: the CLI's short-path fallback socket dir is the scratch dir
        # too, so it never scans the user's own daemons.
        return sc.env(HOME=str(sc.root), TERM=TERM, TMPDIR=str(sc.root))

    def new_argv(self, sc: Scratch, name: str, program: Sequence[str]) -> list[str]:
        if self.peer is not None:
            return self.peer.new_argv(sc.root, name, program)
        return [multiserver_bin(), "new", "-d", "-n", name, "--", *program]

    def attach_argv(self, sc: Scratch, name: str) -> list[str]:
        if self.peer is not None:
            return self.peer.attach_argv(sc.root, name)
        return [multiserver_bin(), "attach", "--redraw", "none", name]


MULTISERVER = Keeper("multiserver", "multiserver attach --redraw none NAME", transparent=True)


def keepers(peers: Sequence[Peer]) -> list[Keeper]:
    return [MULTISERVER, *(Keeper(p.name, p.attach_shape, p.transparent, p) for p in peers)]
