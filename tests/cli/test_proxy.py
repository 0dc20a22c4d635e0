"""The terminal side of ``_proxy`` where the command cannot be made to go:
an attach that fails half-way, and the terminal's shared file flags.

Everything else about the copy loop is tested by driving ``multiserver
attach`` in a window (``test_attach_terminal.py``, ``test_attach_tmux.py``).
"""

from __future__ import annotations

import os
import termios

import pytest

from multiserver._buffer import OutputBuffer
from multiserver_cli._proxy import _terminal_output, attached_terminal


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
        assert written.startswith(b"\x1b[?1049l\x1b7")
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
