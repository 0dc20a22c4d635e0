"""The one rule for removing a daemon's socket (``remove_stale_socket``):
a socket is removed only when a connect to it is refused; a live one is
never unlinked."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from multiserver import (
    UnsafeDirectory,
    remove_stale_socket,
    unlink_if_same,
)


def dead_socket(path: Path) -> os.stat_result:
    """A socket file nobody listens on: what a killed daemon leaves behind."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
    return os.lstat(path)


@contextlib.contextmanager
def listening(path: Path, backlog: int = 8) -> Iterator[socket.socket]:
    """A live listener on ``path`` (a daemon whose lock file was deleted)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen(backlog)
        yield s


def pending(listener: socket.socket) -> int:
    """How many connections wait in ``listener``'s backlog (accepted and closed)."""
    listener.setblocking(False)
    n = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


def test_a_stale_socket_is_removed(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    dead_socket(sock)
    assert remove_stale_socket(sock) == "removed"
    assert not os.path.lexists(sock)


def test_a_live_socket_is_never_removed(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    with listening(sock) as live:
        before = os.lstat(sock)
        assert remove_stale_socket(sock) == "live"
        assert os.path.samestat(os.lstat(sock), before)
        assert pending(live) == 1  # the probe: a connect, nothing sent


def test_a_live_socket_with_a_full_backlog_is_never_removed(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    with listening(sock, backlog=0) as live:
        fillers = []
        try:
            while True:  # fill the backlog until the kernel says EAGAIN
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.setblocking(False)
                fillers.append(c)
                if c.connect_ex(str(sock)) == errno.EAGAIN:
                    break
                assert len(fillers) < 100
            assert remove_stale_socket(sock) == "live"
            assert sock.is_socket()
        finally:
            for c in fillers:
                c.close()
        pending(live)


def test_a_missing_socket_is_fine(tmp_path: Path) -> None:
    assert remove_stale_socket(tmp_path / "s") == "gone"


def test_what_is_not_our_socket_is_never_touched(tmp_path: Path) -> None:
    """A file, or a symlink to a live socket: refused, left, never connected to."""
    plain = tmp_path / "file"
    plain.write_text("not a socket")
    with pytest.raises(UnsafeDirectory, match="not a socket of ours"):
        remove_stale_socket(plain)
    assert plain.read_text() == "not a socket"
    target, link = tmp_path / "target", tmp_path / "link"
    with listening(target) as live:
        link.symlink_to(target)
        with pytest.raises(UnsafeDirectory):
            remove_stale_socket(link)
        assert link.is_symlink() and pending(live) == 0


def test_unlink_if_same_leaves_a_file_put_in_its_place(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    with open(path, "w") as held:  # held open, as a daemon holds its lock and socket
        mine = os.fstat(held.fileno())
        path.unlink()
        path.write_text("someone else's")
        assert not unlink_if_same(path, mine)
        assert path.read_text() == "someone else's"
        assert unlink_if_same(path, os.lstat(path))
        assert not path.exists()
        assert not unlink_if_same(path, mine)  # nothing there: fine
