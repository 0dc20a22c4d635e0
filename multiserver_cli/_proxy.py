"""The attached data path: the user's terminal <-> the session's PTY master.

No proxy process sits in between: this client holds the master itself. The
loop is plain blocking ``poll`` + ``read``/``write`` in one worker thread (no
event loop per chunk), which is what keeps it close to a raw PTY's speed. The
trio side stops it by writing to ``ctl``; the loop never reads the master
after it has seen ``ctl``, so the session can be released without a byte
read twice or lost.

``Screen`` is the terminal as this client writes to it: everything shown
(``shown``, handed back on release) and what it left on (for the reset that
``attached_terminal`` writes on every way out). What to write and what to
let through is decided by the pure ``_terminal`` module.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import termios
import time
import tty
from collections.abc import Iterator

import attrs

from multiserver._buffer import OutputBuffer
from multiserver_cli._terminal import SENTINEL, AnswerFilter, ScreenModes, guard_replay

READ_SIZE = 65536
# Bounded small: what was read but not yet written is lost if the client is
# SIGKILLed while the terminal is slow.
BATCH = 16 * 1024
# How long answers to a replay are waited for when the terminal does not
# answer the sentinel (see ``_terminal``). The terminals met answer it in
# milliseconds, over ssh in a round trip.
ANSWER_WAIT = 1.0

# Why the loop ended.
DETACH = "detach"
EOF = "eof"  # the PTY's slave side is closed: the program is gone
TERMINAL_GONE = "terminal-gone"
STOPPED = "stopped"  # told to stop through the ctl pipe


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write everything, waiting for room if the fd is non-blocking."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            p = select.poll()
            p.register(fd, select.POLLOUT)
            p.poll()
            continue
        except InterruptedError:
            continue
        view = view[n:]


def _read_batch(fd: int) -> tuple[bytes, bool]:
    """Everything readable now, up to BATCH bytes: a PTY hands out about
    4 KiB a read, and one large write to the terminal costs far less than
    many small ones. Returns (data, the PTY's other side is closed)."""
    chunks: list[bytes] = []
    size = 0
    while size < BATCH:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            break
        except InterruptedError:
            continue
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b"".join(chunks), True
            raise
        if not data:
            return b"".join(chunks), True
        chunks.append(data)
        size += len(data)
    return b"".join(chunks), False


@attrs.define
class Screen:
    """The user's terminal as this client writes to it (blocking writes on
    ``fd``, outside the copy loop). Everything shown is recorded: in
    ``shown`` (exact: the program's bytes as the terminal got them, its
    queries removed from a replay, nothing of this client's own) and in
    ``modes``."""

    fd: int
    shown: OutputBuffer
    modes: ScreenModes = attrs.Factory(ScreenModes)

    def record(self, data: bytes) -> None:
        self.shown.append(data)
        self.modes.feed(data)

    def replay(self, replay: bytes, *, answers_to: int | None) -> AnswerFilter | None:
        """Write ``replay`` without the queries in it. If ``answers_to`` (the
        fd the terminal's input is read from) is given, also ask the
        sentinel, and return the filter for that input (None when nothing
        was asked: an empty replay, or output to another device)."""
        body, tail = guard_replay(replay)
        ask = answers_to is not None and bool(body) and _same_terminal(answers_to, self.fd)
        write_all(self.fd, body + (SENTINEL if ask else b"") + tail)
        self.record(body + tail)
        return AnswerFilter(deadline=time.monotonic() + ANSWER_WAIT) if ask else None

    def drain_rest(self, master: int) -> None:
        """Show what the program wrote before it exited that was not shown."""
        os.set_blocking(master, False)
        while True:
            try:
                data = os.read(master, READ_SIZE)
            except OSError:
                return
            if not data:
                return
            write_all(self.fd, data)
            self.record(data)

    def reset(self) -> None:
        """Give the terminal back as it was before attaching (modes, not
        contents); nothing if the output is not a terminal or is gone."""
        if os.isatty(self.fd):
            with contextlib.suppress(OSError):
                write_all(self.fd, self.modes.reset())


def _same_terminal(a: int, b: int) -> bool:
    try:
        return os.isatty(a) and os.isatty(b) and os.fstat(a).st_rdev == os.fstat(b).st_rdev
    except OSError:
        return False


@contextlib.contextmanager
def attached_terminal(stdin: int, stdout: int, shown: OutputBuffer) -> Iterator[Screen]:
    """Raw mode for the attached session. On the way out, whatever happens
    (short of SIGKILL), the terminal is reset (``Screen.reset``) and its
    saved modes come back."""
    screen = Screen(stdout, shown)
    with raw_terminal(stdin):
        try:
            yield screen
        finally:
            screen.reset()


def show_exited(stdin: int, stdout: int, replay: bytes) -> None:
    """An exited session's output, shown as a live session's replay is: in
    raw mode (the bytes as the program's terminal had them), its queries
    removed (their answers would go to the shell), the terminal reset after.
    No sentinel: nobody reads the terminal's answer."""
    if not os.isatty(stdin):
        Screen(stdout, OutputBuffer(0)).replay(replay, answers_to=None)
        return
    with attached_terminal(stdin, stdout, OutputBuffer(0)) as screen:
        screen.replay(replay, answers_to=None)


def proxy(
    master: int,
    stdin: int,
    screen: Screen,
    ctl: int,
    detach_key: bytes | None,
    answers: AnswerFilter | None = None,
) -> str:
    """Copy master -> terminal and terminal -> master until detach, EOF or
    ``ctl``. What is written to the terminal is recorded in ``screen``.
    ``answers``: the filter for the terminal's answers to a replay.

    Returns one of DETACH, EOF, TERMINAL_GONE, STOPPED.
    """
    os.set_blocking(master, False)  # the flag is shared with the daemon
    poller = select.poll()
    poller.register(master, select.POLLIN)
    poller.register(stdin, select.POLLIN)
    poller.register(ctl, select.POLLIN)
    while True:
        timeout = None
        if answers is not None and answers.phase == "window":
            left = answers.deadline - time.monotonic()
            if left <= 0:
                write_all(master, answers.expire())
            else:
                timeout = int(left * 1000) + 1
        try:
            events = poller.poll(timeout)
        except InterruptedError:
            continue
        for fd, mask in events:
            if fd == ctl:
                return STOPPED
            if fd == master:
                data, ended = _read_batch(master)
                if data:
                    write_all(screen.fd, data)
                    screen.record(data)
                if ended:
                    return EOF
            elif fd == stdin:
                if (
                    mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL)
                    and not mask & select.POLLIN
                ):
                    return TERMINAL_GONE
                try:
                    data = os.read(stdin, READ_SIZE)
                except BlockingIOError:
                    continue
                except OSError:
                    return TERMINAL_GONE
                if not data:
                    return TERMINAL_GONE
                at = data.find(detach_key) if detach_key is not None else -1
                if at >= 0:
                    data = data[:at]
                if answers is not None:
                    data = answers.feed(data)
                    if at >= 0:
                        data += answers.close()
                write_all(master, data)
                if at >= 0:
                    return DETACH


def parse_key(spec: str) -> bytes:
    """``^\\``, ``^A``, ``^?`` or a single character -> the byte it sends."""
    if len(spec) == 2 and spec[0] == "^":
        c = spec[1]
        if c == "?":
            return b"\x7f"
        code = ord(c.upper()) ^ 0x40
        if 0 <= code < 0x20:
            return bytes([code])
    elif len(spec) == 1 and ord(spec) < 0x80:
        return spec.encode()
    raise ValueError(f"bad detach key {spec!r}: use ^X notation or one ASCII character")


def describe_key(key: bytes) -> str:
    b = key[0]
    if b == 0x7F:
        return "^?"
    if b < 0x20:
        return "^" + chr(b ^ 0x40)
    return chr(b)


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Raw mode for the attached session; the saved modes come back on the
    way out, whatever happens (short of SIGKILL)."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSAFLUSH, saved)
