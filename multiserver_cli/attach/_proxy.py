"""The attached data path: the user's terminal <-> the session's PTY master.

No proxy process sits in between: this client holds the master itself. The
loop is plain ``poll`` + ``read``/``write`` in one thread (no event loop per
chunk), which is what keeps it close to a raw PTY's speed. Nothing in it
blocks but ``poll``: output read from the PTY waits in a bounded buffer
while the terminal is slow (the terminal is written through a non-blocking
file description of its own), input waits likewise while the program is
not reading it, so the detach key, the ``ctl`` pipe and the other direction
keep working. The trio side stops it by writing to ``ctl``; the loop never
reads the master after it has seen ``ctl``, so the session can be released
without a byte read twice or lost.

``Screen`` is the terminal as this client writes to it: everything shown
(``shown``, handed back on release) and what it left on (for the reset that
``attached_terminal`` writes on every way out). What to write and what to
let through is decided by the pure ``_terminal`` module.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import termios
import time
import tty
from collections.abc import Callable, Iterator

from multiserver import ReplayEnd
from multiserver.internal import OutputBuffer, ScreenModes
from multiserver_cli.attach._keys import DetachMatcher
from multiserver_cli.attach._terminal import SENTINEL, AnswerFilter, guard_replay
from multiserver_cli.attach._tty import is_terminal, real_tty
from multiserver_cli.attach._typed import TypedInput

READ_SIZE = 65536
# What one pass reads from the PTY before writing it on: a PTY hands out
# about 4 KiB a read, and one large write to the terminal costs far less
# than many small ones.
BATCH = 16 * 1024
# Output read from the PTY and not yet written to the terminal. The PTY is
# not read past it, so a slow terminal slows the program down as a plain
# terminal would, after this much. Kept moderate: it is what the terminal
# still shows after Ctrl-C, and what is lost if the client is SIGKILLed.
PENDING_LIMIT = 256 * 1024
# Input read from the terminal and not yet taken by the program; past it
# the terminal is not read (the detach key then waits too, ``ctl`` does not).
INPUT_LIMIT = 64 * 1024
# How long answers to a replay are waited for when the terminal does not
# answer the sentinel (see ``_terminal``). The terminals met answer it in
# milliseconds, over ssh in a round trip.
ANSWER_WAIT = 1.0

# What the ctl pipe carries: STOP ends the loop; NOTE says that lines for
# the person wait in the loop's ``notes`` (any other byte stops it too).
STOP = b"x"
NOTE = b"n"

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
    """Everything readable now, up to about BATCH bytes (a read more, at
    most). Returns (data, the PTY's other side is closed)."""
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


def _terminal_output(fd: int) -> tuple[int, Callable[[], None]]:
    """A non-blocking fd writing where ``fd`` writes, and how to let it go.

    A terminal is opened again, for a file description of its own: the
    non-blocking flag lives on the description, and ``fd``'s is shared with
    the shell that started us (and with our stdin). Where the terminal
    cannot be opened again (``su``: not our device), or ``fd`` is no
    terminal, the shared flag is set and put back after."""
    if os.isatty(fd):
        with contextlib.suppress(OSError):
            own = os.open(os.ttyname(fd), os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
            if os.fstat(own).st_rdev == os.fstat(fd).st_rdev:
                return own, lambda: os.close(own)
            os.close(own)
    was_blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    return fd, lambda: os.set_blocking(fd, was_blocking)


class _Copy:
    """One attachment's copy loop; see ``proxy``."""

    def __init__(
        self,
        master: int,
        stdin: int,
        out: int,  # the terminal, non-blocking
        ctl: int,
        detach_key: bytes | None,
        screen: Screen,
        answers: AnswerFilter | None,
        notes: collections.deque[bytes] | None = None,
    ) -> None:
        self.master = master
        self.stdin = stdin
        self.out = out
        self.ctl = ctl
        self.screen = screen
        keys = DetachMatcher(detach_key) if detach_key is not None else None
        self.typed = TypedInput(keys, answers)
        self.notes = notes
        self._to_terminal = bytearray()
        self._to_program = bytearray()
        self._poller = select.poll()
        self._masks: dict[int, int] = {}
        self._watching = (-1, -1, -1)

    def run(self) -> str:
        while True:
            self._watch()
            try:
                events = self._poller.poll(self._timeout_ms())
            except InterruptedError:
                continue
            if self._timeout_ms() == 0:  # the answer window's, or a held key's, time is up
                self._to_program += self.typed.expire(time.monotonic())
            ready = dict(events)
            if self.ctl in ready and self._read_ctl():
                return STOPPED
            if self.out in ready and not self._write_terminal():
                return TERMINAL_GONE
            if self.master in ready:
                if ready[self.master] & select.POLLOUT:
                    self._write_program()
                if ready[self.master] & ~select.POLLOUT and self._read_program():
                    return EOF
            if self.stdin in ready:
                reason = self._read_terminal(ready[self.stdin])
                if reason is not None:
                    return reason

    def _watch(self) -> None:
        """Poll for what can be done: read the PTY while its output has room
        for a whole batch, read the terminal while its input has room, write
        what waits."""
        room = len(self._to_terminal) + BATCH <= PENDING_LIMIT
        # A PTY not read is not polled at all (its input waits meanwhile):
        # closed, it reports POLLHUP whatever is asked, and would spin the loop.
        master = select.POLLIN | (select.POLLOUT if self._to_program else 0) if room else 0
        stdin = select.POLLIN if len(self._to_program) < INPUT_LIMIT else 0
        out = select.POLLOUT if self._to_terminal else 0
        if (master, stdin, out) == self._watching:
            return
        self._watching = (master, stdin, out)
        masks = {self.ctl: select.POLLIN, self.master: master, self.stdin: stdin, self.out: 0}
        masks[self.out] |= out  # out may be stdin's fd (a shared description)
        for fd, mask in masks.items():
            if self._masks.get(fd, 0) == mask:
                continue
            if mask == 0:
                self._poller.unregister(fd)
                del self._masks[fd]
            elif fd in self._masks:
                self._poller.modify(fd, mask)
                self._masks[fd] = mask
            else:
                self._poller.register(fd, mask)
                self._masks[fd] = mask

    def _read_ctl(self) -> bool:
        """True to stop. A NOTE's lines go to the terminal after what the
        program wrote so far (never inside it), and are not recorded as
        shown: they are not the program's."""
        try:
            said = os.read(self.ctl, 64)
        except (BlockingIOError, InterruptedError):
            return False
        if not said or said.strip(NOTE):
            return True
        while self.notes:
            self._to_terminal += self.notes.popleft()
        self._write_terminal()  # a terminal gone is found by the next poll
        return False

    def _timeout_ms(self) -> int | None:
        deadline = self.typed.deadline()
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        return 0 if left <= 0 else int(left * 1000) + 1

    def _read_program(self) -> bool:
        """Read the PTY; True at its end."""
        data, ended = _read_batch(self.master)
        data = self.screen.live(data) if data else data
        if data:
            behind = bool(self._to_terminal)
            self._to_terminal += data
            if not behind:
                # At once, not after another poll: the terminal usually keeps
                # up. Behind, it is written when poll says it has room (it
                # then takes a whole buffer's worth, not a sliver).
                self._write_terminal()
        return ended

    def _write_terminal(self) -> bool:
        """Write what waits for the terminal, as much as it takes now; False
        if it is gone."""
        if not self._to_terminal:
            return True
        try:
            n = os.write(self.out, self._to_terminal)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        del self._to_terminal[:n]
        return True

    def _write_program(self) -> None:
        if not self._to_program:
            return
        try:
            n = os.write(self.master, self._to_program)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            # The program is gone: its EOF ends the loop.
            self._to_program.clear()
            return
        del self._to_program[:n]

    def _read_terminal(self, mask: int) -> str | None:
        if mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL) and not mask & select.POLLIN:
            return TERMINAL_GONE
        try:
            data = os.read(self.stdin, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return TERMINAL_GONE
        if not data:
            return TERMINAL_GONE
        self._to_program += self.typed.feed(data, time.monotonic())
        self._write_program()
        return DETACH if self.typed.detached else None

    def finish(self, reason: str) -> None:
        """On the way out: the terminal gets the output read for it (unless
        it is gone), the program what of its input fits now."""
        self._to_program += self.typed.close()
        self._write_program()
        if reason != TERMINAL_GONE and self._to_terminal:
            with contextlib.suppress(OSError):
                write_all(self.out, self._to_terminal)
        self._to_terminal.clear()


def proxy(
    master: int,
    stdin: int,
    screen: Screen,
    ctl: int,
    detach_key: bytes | None,
    answers: AnswerFilter | None = None,
    notes: collections.deque[bytes] | None = None,
) -> str:
    """Copy master -> terminal and terminal -> master until detach, EOF or
    ``ctl``. What is read from the master is recorded in ``screen`` as it is
    read; on return it has all been written to the terminal (unless that is
    gone). ``answers``: the filter for the terminal's answers to a replay.
    ``notes``: lines for the person, shown when ``ctl`` says NOTE.

    Returns one of DETACH, EOF, TERMINAL_GONE, STOPPED.
    """
    os.set_blocking(master, False)  # the flag is shared with the daemon
    out, let_go = _terminal_output(screen.fd)
    try:
        copy = _Copy(master, stdin, out, ctl, detach_key, screen, answers, notes)
        reason = copy.run()
        copy.finish(reason)
    finally:
        let_go()
    return reason


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
