"""The attached data path: the user's terminal <-> the session's PTY master.

No proxy process sits in between: this client holds the master itself. The
loop is plain blocking ``poll`` + ``read``/``write`` in one worker thread (no
event loop per chunk), which is what keeps it close to a raw PTY's speed. The
trio side stops it by writing to the ``ctl`` pipe; the loop never reads the
master after it has seen ``ctl``, so the session can be released without a
byte read twice or lost.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import termios
import tty
from collections.abc import Iterator

from multiserver._buffer import OutputBuffer

READ_SIZE = 65536
# Bounded small: what was read but not yet written is lost if the client is
# SIGKILLed while the terminal is slow.
BATCH = 16 * 1024

# Why the loop ended.
DETACH = "detach"
EOF = "eof"  # the PTY's slave side is closed: the program is gone
TERMINAL_GONE = "terminal-gone"
STOPPED = "stopped"  # told to stop through the ctl pipe


def write_all(fd: int, data: bytes | memoryview) -> None:
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
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b"".join(chunks), True
            raise
        if not data:
            return b"".join(chunks), True
        chunks.append(data)
        size += len(data)
    return b"".join(chunks), False


def proxy(
    master: int, stdin: int, stdout: int, ctl: int, detach_key: bytes | None, shown: OutputBuffer
) -> str:
    """Copy master -> stdout and stdin -> master until detach, EOF or ``ctl``.
    ``shown`` keeps the newest of what was written to the terminal.

    Returns one of DETACH, EOF, TERMINAL_GONE, STOPPED.
    """
    os.set_blocking(master, False)  # the flag is shared with the daemon
    poller = select.poll()
    poller.register(master, select.POLLIN)
    poller.register(stdin, select.POLLIN)
    poller.register(ctl, select.POLLIN)
    while True:
        try:
            events = poller.poll()
        except InterruptedError:
            continue
        for fd, mask in events:
            if fd == ctl:
                return STOPPED
            if fd == master:
                data, ended = _read_batch(master)
                if data:
                    write_all(stdout, data)
                    shown.append(data)
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
                if detach_key is not None:
                    at = data.find(detach_key)
                    if at >= 0:
                        write_all(master, data[:at])
                        return DETACH
                write_all(master, data)


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
