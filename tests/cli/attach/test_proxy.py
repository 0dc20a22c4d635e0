"""The terminal side of ``_proxy`` where the command cannot be made to go:
an attach that fails half-way, the terminal's shared file flags, and what
was shown read from another thread than the copy loop's (to be saved).

Everything else about the copy loop is tested by driving ``multiserver
attach`` in a window (``test_attach_terminal.py``, ``test_attach_tmux.py``).
"""

from __future__ import annotations

import os
import termios
import threading

import pytest

from multiserver._buffer import OutputBuffer
from multiserver_cli.attach._proxy import Screen, _terminal_output, attached_terminal


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


# --- what the terminal showed, read from the main thread while the copy loop records


def test_a_snapshot_from_another_thread_never_sees_a_torn_screen() -> None:
    """The copy loop records while the main thread takes snapshots (to save
    them): every snapshot is a run of whole chunks, the newest ones, and
    ``recorded`` counts exactly what had been recorded when it was taken."""
    screen = Screen(-1, OutputBuffer(4096))
    chunks = [b"%06d\n" % i for i in range(20_000)]
    done = threading.Event()

    def copy_loop() -> None:
        for chunk in chunks:
            screen.record(chunk)
        done.set()

    copier = threading.Thread(target=copy_loop)
    copier.start()
    snapshots = []
    while not done.is_set():
        snapshots.append(screen.snapshot())
    copier.join()
    snapshots.append(screen.snapshot())
    for data, recorded in snapshots:
        assert len(data) <= 4096 and recorded % 7 == 0 and len(data) % 7 == 0
        n = recorded // 7
        assert data == b"".join(chunks[n - len(data) // 7 : n])
    assert snapshots[-1][1] == 7 * len(chunks)
