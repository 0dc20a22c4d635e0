"""The terminal an attach draws on: ``Screen``, what this client wrote to
it (everything shown, handed back on release, and the modes it left on,
for the reset on every way out), the replay, raw mode. The copy loop
(``_proxy``) writes the live output through it."""

from __future__ import annotations

import contextlib
import os
import select
import termios
import time
import tty
from collections.abc import Callable, Iterator

from multiserver import ReplayEnd
from multiserver.internal import OutputBuffer, ScreenModes
from multiserver_cli.attach._terminal import SENTINEL, AnswerFilter, guard_replay
from multiserver_cli.attach._tty import is_terminal, real_tty

READ_SIZE = 65536
# How long answers to a replay are waited for when the terminal does not
# answer the sentinel (see ``_terminal``). The terminals met answer it in
# milliseconds, over ssh in a round trip.
ANSWER_WAIT = 1.0


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


class Screen:
    """The user's terminal as this client writes to it (blocking writes on
    ``fd``, outside the copy loop). Everything shown is recorded: in
    ``shown`` (exact: the program's bytes as the terminal got them, its
    queries removed from a replay, nothing of this client's own) and in
    ``modes``."""

    def __init__(self, fd: int, shown: OutputBuffer) -> None:
        self.fd = fd
        self.shown = shown
        self.modes = ScreenModes()
        self._replay_end: ReplayEnd | None = None  # see ``live``
        self.keep: Callable[[bytes], None] | None = None  # the live output kept on disk too

    def record(self, data: bytes) -> None:
        self.shown.append(data)
        self.modes.feed(data)

    def replay(self, replay: bytes, *, answers_to: int | None) -> AnswerFilter | None:
        """Write what of ``replay`` draws (a sequence its end cuts: see
        ``live``). If ``answers_to`` (the fd the terminal's input is read
        from) is given, also ask the sentinel, and return the filter for
        that input (None when nothing was asked: an empty replay, or output
        to another device)."""
        body, tail = guard_replay(replay)
        ask = answers_to is not None and bool(body) and _same_terminal(answers_to, self.fd)
        write_all(self.fd, body + (SENTINEL if ask else b""))
        self.record(body)
        self._replay_end = ReplayEnd(tail) if tail else None
        return AnswerFilter(deadline=time.monotonic() + ANSWER_WAIT) if ask else None

    def resized(self) -> None:
        """The replay was drawn at another size than this terminal's: its
        scroll region made the whole screen again, as a terminal does when
        it is resized (xterm, tmux), where the program's SIGWINCH finds it.
        A region of the old size would keep the rows below it from
        scrolling (vim sets none on its redraw). The cursor stays where the
        replay left it; nothing of this is the program's (``shown``)."""
        write_all(self.fd, b"\x1b7\x1b[r\x1b8")

    def live(self, data: bytes) -> bytes:
        """What of the program's live output ``data`` to write, recorded
        (and kept): as it came, once it has finished the replay's cut end."""
        if (end := self._replay_end) is not None:
            data = end.feed(data)
            self._replay_end = end if end.pending else None
        if data:
            self.record(data)
            if self.keep is not None:
                self.keep(data)
        return data

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
            write_all(self.fd, self.live(data))

    def reset(self) -> None:
        """Give the terminal back as it was before attaching (modes, not
        contents); nothing if the output is not a terminal or is gone."""
        if is_terminal(self.fd):
            with contextlib.suppress(OSError):
                write_all(self.fd, self.modes.reset())


def _same_terminal(a: int, b: int) -> bool:
    if not (real_tty(a) and real_tty(b)):  # the relayed terminal is one both ways
        return is_terminal(a) and is_terminal(b)
    try:
        return os.fstat(a).st_rdev == os.fstat(b).st_rdev
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
    if not is_terminal(stdin):
        Screen(stdout, OutputBuffer(0)).replay(replay, answers_to=None)
        return
    with attached_terminal(stdin, stdout, OutputBuffer(0)) as screen:
        screen.replay(replay, answers_to=None)


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Raw mode for the attached session; the saved modes come back on the
    way out, whatever happens (short of SIGKILL). A relayed terminal is
    raw already, on the other side (``_relay``)."""
    if not real_tty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSAFLUSH, saved)
