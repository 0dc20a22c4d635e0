"""The terminal side of ``_proxy`` where the command cannot be made to go:
an attach that fails half-way, the terminal's shared file flags, what was
shown read from another thread than the copy loop's (to be saved), and the
detach key as each encoding's bytes reach a PTY (split across reads too).

Everything else about the copy loop is tested by driving ``multiserver
attach`` in a window (``test_attach_terminal.py``, ``test_attach_tmux.py``).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import termios
import threading
import tty
from collections.abc import Iterator

import pytest

from multiserver.terminal._buffer import OutputBuffer
from multiserver_cli.attach._keys import parse_key
from multiserver_cli.attach._proxy import DETACH, STOP, STOPPED, _terminal_output, proxy
from multiserver_cli.attach._screen import Screen, attached_terminal
from tests.conftest import wait_until_sync


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def test_an_attach_that_fails_still_gives_the_terminal_back() -> None:
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        with (
            pytest.raises(RuntimeError),
            attached_terminal(slave, slave, OutputBuffer(99)) as screen,
        ):
            screen.record(b"\x1b[?1049h\x1b[?25l")  # what the program had shown
            raise RuntimeError("the daemon went away")
        written = _read_all(master)
        assert written.startswith(b"\x1b\\\x1b[?1049l\x1b7")
        assert b"\x1b[?25h" in written
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_no_reset_is_written_where_the_output_is_no_terminal() -> None:
    master, slave = os.openpty()
    r, w = os.pipe()
    try:
        with attached_terminal(slave, w, OutputBuffer(99)) as screen:
            screen.record(b"\x1b[?1049h")
        os.close(w)
        assert os.read(r, 100) == b""
    finally:
        for fd in (master, slave, r):
            os.close(fd)


def test_the_terminal_is_written_without_touching_the_shells_file_flags() -> None:
    """O_NONBLOCK lives on the open file description, which the shell that
    started the client shares: the copy loop opens the terminal again."""
    master, slave = os.openpty()
    try:
        out, let_go = _terminal_output(slave)
        assert out != slave
        assert not os.get_blocking(out)
        assert os.get_blocking(slave)
        assert os.fstat(out).st_rdev == os.fstat(slave).st_rdev
        let_go()
        with pytest.raises(OSError):
            os.fstat(out)
    finally:
        os.close(master)
        os.close(slave)


# --- the detach key, as each encoding reaches the copy loop through a PTY


class Attached:
    """``proxy`` on its thread between two PTYs: the person's terminal
    (``type`` writes what its keys send) and the program's (``typed``:
    what the program read)."""

    def __init__(self, key: bytes) -> None:
        self.term, self.term_slave = os.openpty()
        self.program_master, self.program = os.openpty()
        for fd in (self.term_slave, self.program):
            tty.setraw(fd)
        self.ctl_r, self.ctl_w = os.pipe()
        self.reason: list[str] = []
        screen = Screen(self.term_slave, OutputBuffer(4096))
        args = (self.program_master, self.term_slave, screen, self.ctl_r, key)
        self.thread = threading.Thread(target=lambda: self.reason.append(proxy(*args)))
        self.thread.start()

    def type(self, data: bytes) -> None:
        os.write(self.term, data)

    def wait_read(self) -> None:
        """Until the copy loop has read everything typed."""
        unread = array.array("i", [0])

        def drained() -> bool:
            fcntl.ioctl(self.term_slave, termios.FIONREAD, unread)
            return unread[0] == 0

        assert wait_until_sync(drained, 5)

    def typed(self, want: int) -> bytes:
        """What the program read: ``want`` bytes, waited for (bounded)."""
        got = b""
        os.set_blocking(self.program, False)

        def more() -> bool:
            nonlocal got
            with contextlib.suppress(BlockingIOError):
                got += os.read(self.program, 4096)
            return len(got) >= want

        wait_until_sync(more, 5)
        more()  # and nothing more (the copy loop wrote all it will)
        return got

    def end(self) -> str:
        """Why the copy loop ended (told to stop if it had not)."""
        self.thread.join(5)
        if self.thread.is_alive():
            os.write(self.ctl_w, STOP)
            self.thread.join(5)
        assert not self.thread.is_alive()
        return self.reason[0]

    def close(self) -> None:
        for fd in (self.term, self.term_slave, self.program_master, self.program):
            os.close(fd)
        for fd in (self.ctl_r, self.ctl_w):
            os.close(fd)


@contextlib.contextmanager
def attached(key: bytes) -> Iterator[Attached]:
    a = Attached(key)
    try:
        yield a
    finally:
        if a.thread.is_alive():
            os.write(a.ctl_w, STOP)
            a.thread.join(5)
        a.close()


# What a terminal sends for Ctrl-\ (and Ctrl-A): as is; kitty's protocol
# with flags 1 and 31 (press, then release); xterm's modifyOtherKeys 2.
ENCODINGS = {
    "plain": (b"\x1c", b"\x01"),
    "kitty-1": (b"\x1b[92;5u", b"\x1b[97;5u"),
    "kitty-31": (b"\x1b[92;5u\x1b[92;5:3u", b"\x1b[97;5u\x1b[97;5:3u"),
    "modify-other-keys": (b"\x1b[27;5;92~", b"\x1b[27;5;97~"),
}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("spec", ["^\\", "^A"])
def test_the_detach_key_detaches_in_each_encoding(encoding: str, spec: str) -> None:
    sent = ENCODINGS[encoding][spec == "^A"]
    with attached(parse_key(spec)) as a:
        a.type(b"ls\x1b[A" + sent + b"after")
        assert a.end() == DETACH
        assert a.typed(5) == b"ls\x1b[A"  # nothing of the key, nothing after it


@pytest.mark.parametrize("encoding", ["kitty-1", "modify-other-keys"])
def test_the_detach_key_split_across_reads_detaches(encoding: str) -> None:
    sent = ENCODINGS[encoding][0]
    for cut in range(1, len(sent)):
        with attached(b"\x1c") as a:
            a.type(b"x" + sent[:cut])
            a.wait_read()
            a.type(sent[cut:])
            assert a.end() == DETACH
            assert a.typed(1) == b"x"


def test_other_keys_and_the_esc_key_alone_reach_the_program() -> None:
    """A tail that may start the key (Esc) goes on without the next key;
    the key's release is kept from the program; all else passes as sent."""
    with attached(b"\x1c") as a:
        keys = b"\x1b[93;5u\x1b[92;3u\x1b[27;5;93~\x1b[92;5:3u\x1b[1;5A"
        a.type(keys)
        others = keys.replace(b"\x1b[92;5:3u", b"")
        assert a.typed(len(others)) == others
        a.type(b"\x1b")  # Esc, alone
        assert a.typed(1) == b"\x1b"
        os.write(a.ctl_w, STOP)
        assert a.end() == STOPPED
