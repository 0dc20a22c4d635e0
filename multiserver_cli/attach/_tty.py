"""The terminal an attach draws on: a tty here, or one relayed from the
other side of an ssh (``_relay``).

Everything of the attach that asks about its terminal asks here, not
``os.isatty``: whether it draws on a terminal (``is_terminal``), how big
it is (``terminal_size``), whether modes can be set on it (``real_tty``:
a relayed terminal is raw already, on the other side). So the attach
behaves the same on a relayed terminal as on a tty: the same detach key,
replay, redraw, status lines (``say``) and reset.

A process is relayed once ``_relay.serve_relayed`` has made its fds 0-2
the relay (``use_relayed``); until then, and in every other process,
this is plain tty code.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import sys
import termios
import threading
from collections.abc import Callable, Iterator

from multiserver_cli.attach._relay_codec import Size

# Sizes a relayed terminal's new size at once (set by the attach while it
# holds the session's PTY), before the keys sent after it go on.
SizeTo = Callable[[int, int], None]


class Relayed:
    """The relayed terminal, as the relay's thread keeps it. (A plain class:
    the attach path imports no attrs.)"""

    def __init__(self, size: Size | None, size_to: SizeTo | None = None) -> None:
        self.size = size
        self.size_to = size_to
        self.lock = threading.Lock()
        self.broken: str | None = None  # why the input stream ended early, if it broke


# Set once, by the relay (use_relayed), in a process whose fds 0-2 are the relay.
_relayed: Relayed | None = None


def use_relayed(relayed: Relayed) -> None:
    """From now on fds 0-2 are the relayed terminal ``relayed``."""
    global _relayed
    _relayed = relayed


def real_tty(fd: int) -> bool:
    """A terminal device here (modes can be set on it)."""
    return os.isatty(fd)


def is_terminal(fd: int) -> bool:
    """Whether ``fd`` (0-2) reaches a person's terminal: a tty here, or the
    relayed one."""
    return os.isatty(fd) or (_relayed is not None and fd in (0, 1, 2))


def terminal_size(fd: int) -> Size | None:
    """(rows, cols) of the terminal behind ``fd``, or None if unknown."""
    if _relayed is not None and fd in (0, 1, 2) and not os.isatty(fd):
        return _relayed.size if _relayed.size and all(_relayed.size) else None
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        return None
    return (rows, cols) if rows and cols else None


@contextlib.contextmanager
def sizes_to(size_to: SizeTo) -> Iterator[None]:
    """While attached on a relayed terminal: each new size is given to
    ``size_to`` by the relay's thread, in the stream's order (keys sent
    after a resize reach the program after it, as ssh keeps them). Once
    this exits, ``size_to`` is not running and is not called again. No-op
    on a tty here (SIGWINCH does it)."""
    relayed = _relayed
    if relayed is None:
        yield
        return
    with relayed.lock:
        relayed.size_to = size_to
    try:
        yield
    finally:
        with relayed.lock:
            relayed.size_to = None


def relay_broken() -> str | None:
    """Why the relayed terminal's input ended, if its stream broke the
    relay's rules (its output may still reach the person), else None."""
    return None if _relayed is None else _relayed.broken


def say(line: str, at_line_start: bool = False) -> None:
    """A status line for the person at the terminal, on a line of its own
    (a new line first unless the output shown last ended one); printable:
    it may quote a session's name."""
    from multiserver.internal import printable

    line = printable(line)
    if not is_terminal(1):
        os.write(sys.stdout.fileno(), f"{line}\n".encode())
        return
    lead = "\r" if at_line_start else "\r\n"
    os.write(sys.stdout.fileno(), (lead + line + "\r\n").encode())
