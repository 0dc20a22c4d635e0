"""The one rule for removing a daemon's socket (``remove_stale_socket``),
and the three places that follow it agreeing: the daemon at start, the
client that starts one, and the adopter's sweep. A socket is removed only
when a connect to it is refused; a live one is never unlinked."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import multiserver.client._start
from adopter._sweep import _remove_stale
from multiserver import DaemonNotRunning, UnsafeDirectory, connect_or_start
from multiserver._errors import DaemonAlreadyRunning
from multiserver.daemon._files import DaemonFiles
from multiserver.internal import remove_stale_socket, unlink_if_same
from multiserver.system._paths import try_lock
from tests.conftest import MsDirs


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


# --- the three drivers agree -----------------------------------------------------------


async def as_adopter(ms_dirs: MsDirs) -> str:
    return _remove_stale(ms_dirs.paths.socket)


async def as_daemon(ms_dirs: MsDirs) -> str:
    """The daemon's start: holding the lock, refuse or bind."""
    lock_fd = try_lock(ms_dirs.paths.lock)
    try:
        files = DaemonFiles.bind(ms_dirs.paths, lock_fd)
    except DaemonAlreadyRunning:
        os.close(lock_fd)
        return "refused"
    files.close()
    return "started"


async def as_client(ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch) -> str:
    """``connect_or_start`` past its first connect (as if the socket had not
    answered then), with a daemon start that binds a plain listener."""
    calls: list[str] = []
    real_connect = multiserver.client._start.connect

    async def connect_once_refused(path: Path) -> trio.socket.SocketType:
        if not calls:
            calls.append("refused")
            raise DaemonNotRunning(str(path))
        return await real_connect(path)

    with contextlib.ExitStack() as stack, monkeypatch.context() as m:

        async def start(*args: object) -> int:
            calls.append("started")
            listener = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            listener.bind(str(ms_dirs.paths.socket))  # fails if a socket is still there
            listener.listen(1)
            return 0

        m.setattr(multiserver.client._start, "connect", connect_once_refused)
        m.setattr(multiserver.client._start, "start_daemon", start)
        with trio.fail_after(5):
            sock = await connect_or_start(ms_dirs.paths)
        sock.close()
    return "started" if "started" in calls else "connected"


@pytest.mark.parametrize("situation", ["stale", "live", "gone"])
async def test_daemon_client_and_adopter_agree(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch, situation: str
) -> None:
    """The same socket, three drivers: each removes a stale socket, each
    leaves a live one (same inode, still answering), each is fine with none."""
    paths = ms_dirs.paths
    paths.prepare()
    answers = {}
    with contextlib.ExitStack() as stack:
        if situation == "live":
            live = stack.enter_context(listening(paths.socket))
            before = os.lstat(paths.socket)
        for name in ("adopter", "daemon", "client"):
            if situation == "stale":
                dead_socket(paths.socket)
            if name == "adopter":
                answers[name] = await as_adopter(ms_dirs)
            elif name == "daemon":
                answers[name] = await as_daemon(ms_dirs)
            else:
                answers[name] = await as_client(ms_dirs, monkeypatch)
            if situation == "live":
                assert os.path.samestat(os.lstat(paths.socket), before), name
                assert pending(live) >= 1, name  # it still answers
            with contextlib.suppress(FileNotFoundError):
                if situation != "live":
                    os.unlink(paths.socket)
    expected = {
        "stale": {"adopter": "removed", "daemon": "started", "client": "started"},
        "live": {"adopter": "live", "daemon": "refused", "client": "connected"},
        "gone": {"adopter": "removed", "daemon": "started", "client": "started"},
    }
    assert answers == expected[situation]
