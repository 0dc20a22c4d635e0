"""The attached data path: the user's terminal <-> the session's PTY master.

No proxy process sits in between: this client holds the master itself
(while it alone holds the session: several that share it each read their
own feed from the daemon, and type into their own copy of the master;
docs/sharing.md). The
loop is plain ``poll`` + ``read``/``write`` in one thread (no event loop per
chunk), which is what keeps it close to a raw PTY's speed. Nothing in it
blocks but ``poll``: output read from the PTY waits in a bounded buffer
while the terminal is slow (the terminal is written through a non-blocking
file description of its own), input waits likewise while the program is
not reading it, so the detach key, the ``ctl`` pipe and the other direction
keep working. The trio side stops it by writing to ``ctl``; the loop never
reads the master after it has seen ``ctl``, so the session can be released
without a byte read twice or lost.

``_screen.Screen`` is the terminal as this client writes to it: everything
shown (``shown``, handed back on release) and what it left on (for the
reset that ``attached_terminal`` writes on every way out). What to write
and what to let through is decided by the pure ``_terminal`` module.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import time
from collections.abc import Callable

from multiserver_cli.attach._keys import DetachMatcher
from multiserver_cli.attach._screen import READ_SIZE, Screen, write_all
from multiserver_cli.attach._terminal import AnswerFilter
from multiserver_cli.attach._typed import TypedInput

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

# What the ctl pipe carries: STOP ends the loop; NOTE says that lines for
# the person wait in the loop's ``notes``; GIVE_BACK: stop reading the
# master (another client joins); FEED: the feed to read from now waits in
# the loop's ``feeds`` (any other byte stops it too).
STOP = b"x"
NOTE = b"n"
GIVE_BACK = b"h"
FEED = b"f"
SIZED = b"s"  # the session has this terminal's size now: what was typed goes on
# What the loop tells its caller on ``told`` (besides its end, which the
# caller writes): it stopped reading the master (after GIVE_BACK); its feed
# ended and it reads the master again; the person typed while the session
# had another holder's size (what is typed then waits for SIZED, so the
# program has this terminal's size before it reads the keys, as in tmux).
STOPPED_READING = b"h"
READING_AGAIN = b"r"
TYPED = b"t"

# Why the loop ended.
DETACH = "detach"
EOF = "eof"  # the PTY's slave side is closed: the program is gone
TERMINAL_GONE = "terminal-gone"
STOPPED = "stopped"  # told to stop through the ctl pipe


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


class Sharing:
    """Between the copy loop and its caller, while the session may be
    shared (docs/sharing.md): the feeds handed over (``FEED``), the fd the
    loop tells on (``STOPPED_READING``, ``READING_AGAIN``, ``TYPED``),
    whether typing is to be told (the session has another holder's size),
    and what to do when it reads the master again (``reading_again``)."""

    def __init__(self, told: int, feed: int | None = None) -> None:
        self.told = told
        self.feed = feed  # the first: a join answered with a feed
        self.feeds: collections.deque[int] = collections.deque()
        self.tell_typing = False
        self.sizing = False  # told TYPED: what is typed waits for SIZED
        self.reading_again: Callable[[], None] = lambda: None


class _Copy:
    """One attachment's copy loop; see ``proxy``."""

    def __init__(
        self,
        master: int | None,
        stdin: int,
        out: int,  # the terminal, non-blocking
        ctl: int,
        detach_key: bytes | None,
        screen: Screen,
        answers: AnswerFilter | None,
        notes: collections.deque[bytes] | None = None,
        sharing: Sharing | None = None,
    ) -> None:
        self.master = master  # typed into; None: only watching
        self.sharing = sharing
        # What output is read from: the master, the feed, or None while
        # reading was given back and the feed has not come yet.
        self.source: int | None = master
        if sharing is not None and sharing.feed is not None:
            self.source = sharing.feed
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
        self._watching: tuple[int | None, int, int, int] = (-1, -1, -1, -1)

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
            if self.master is not None and ready.get(self.master, 0) & select.POLLOUT:
                self._write_program()
            source = self.source
            if (
                source is not None
                and ready.get(source, 0) & ~select.POLLOUT
                and self._read_program()
            ):
                return EOF
            if self.stdin in ready:
                reason = self._read_terminal(ready[self.stdin])
                if reason is not None:
                    return reason

    def _watch(self) -> None:
        """Poll for what can be done: read the PTY (or the feed) while its
        output has room for a whole batch, read the terminal while its
        input has room, write what waits."""
        room = len(self._to_terminal) + BATCH <= PENDING_LIMIT
        # A PTY not read is not polled at all (its input waits meanwhile):
        # closed, it reports POLLHUP whatever is asked, and would spin the loop.
        source = select.POLLIN if room and self.source is not None else 0
        sizing = self.sharing is not None and self.sharing.sizing
        writes = self._to_program and not sizing
        typing = select.POLLOUT if writes and (room or self.source != self.master) else 0
        stdin = select.POLLIN if len(self._to_program) < INPUT_LIMIT else 0
        out = select.POLLOUT if self._to_terminal else 0
        if (self.source, source | typing, stdin, out) == self._watching:
            return
        self._watching = (self.source, source | typing, stdin, out)
        masks = {self.ctl: select.POLLIN, self.stdin: stdin, self.out: 0}
        for fd in self._masks:
            masks.setdefault(fd, 0)  # one no longer read (a feed that ended)
        if self.master is not None:
            masks[self.master] = typing
        if self.source is not None:
            masks[self.source] = masks.get(self.source, 0) | source
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
        shown: they are not the program's. GIVE_BACK: the master is read no
        more (said on ``told``); FEED: the feed handed over is read now."""
        try:
            said = os.read(self.ctl, 64)
        except (BlockingIOError, InterruptedError):
            return False
        if not said or said.strip(NOTE + GIVE_BACK + FEED + SIZED):
            return True
        if SIZED in said and self.sharing is not None:
            self.sharing.sizing = False
            self._write_program()
        if NOTE in said:
            while self.notes:
                self._to_terminal += self.notes.popleft()
            self._write_terminal()  # a terminal gone is found by the next poll
        if GIVE_BACK in said and self.sharing is not None:
            if self.source == self.master:
                self.source = None
            os.write(self.sharing.told, STOPPED_READING)
        if FEED in said and self.sharing is not None:
            while self.sharing.feeds:
                self.source = self.sharing.feeds.popleft()
                os.set_blocking(self.source, False)
        return False

    def _timeout_ms(self) -> int | None:
        deadline = self.typed.deadline()
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        return 0 if left <= 0 else int(left * 1000) + 1

    def _read_program(self) -> bool:
        """Read the PTY (or the feed); True at its end. The end of a feed
        is the cue to read the master again (not the session's end: the
        daemon ends the feed after the last byte it read for it)."""
        assert self.source is not None
        data, ended = _read_batch(self.source)
        if ended and self.source != self.master:
            os.close(self.source)
            self.source = self.master
            if self.master is not None and self.sharing is not None:
                self.sharing.reading_again()
                os.write(self.sharing.told, READING_AGAIN)
            ended = self.source is None
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
        if self.master is None:  # only watching: what is typed goes nowhere
            self._to_program.clear()
            return
        if self.sharing is not None and self.sharing.tell_typing:
            self.sharing.tell_typing = False
            self.sharing.sizing = True
            os.write(self.sharing.told, TYPED)
        if self.sharing is not None and self.sharing.sizing:
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
    master: int | None,
    stdin: int,
    screen: Screen,
    ctl: int,
    detach_key: bytes | None,
    answers: AnswerFilter | None = None,
    notes: collections.deque[bytes] | None = None,
    sharing: Sharing | None = None,
) -> str:
    """Copy master -> terminal and terminal -> master until detach, EOF or
    ``ctl``. What is read from the master is recorded in ``screen`` as it is
    read; on return it has all been written to the terminal (unless that is
    gone). ``answers``: the filter for the terminal's answers to a replay.
    ``notes``: lines for the person, shown when ``ctl`` says NOTE.
    ``sharing``: the session may have other holders; output then comes on
    a feed while they do (``master`` None: only watching).

    Returns one of DETACH, EOF, TERMINAL_GONE, STOPPED.
    """
    if master is not None:
        os.set_blocking(master, False)  # the flag is shared with the daemon
    if sharing is not None and sharing.feed is not None:
        os.set_blocking(sharing.feed, False)  # the pipe's read end is ours alone
    out, let_go = _terminal_output(screen.fd)
    try:
        copy = _Copy(master, stdin, out, ctl, detach_key, screen, answers, notes, sharing)
        reason = copy.run()
        copy.finish(reason)
        if copy.source is not None and copy.source != master:
            os.close(copy.source)  # the feed
    finally:
        let_go()
    return reason
