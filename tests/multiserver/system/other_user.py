"""Another local user, for the tests of whom a client trusts
(``test_trust.py``): a process forked from the test, which runs as root,
that drops to uid and gid ``NOBODY`` and acts as another user of the
machine would. The one place tests run as another uid with os.fork and
os.setuid.

The child runs only os, socket, select and ctypes calls, and always ends
with ``os._exit`` (never the test's teardown). It reports one JSON object
through a pipe. The test stops it by its pid (``OtherUser.stop``: closing
its stop pipe, then SIGKILL past a bound) and reaps it.

- ``fake_daemon``: a listener at a daemon's socket path, bound as root (the
  socket file is ours, so it passes the client's lstat checks) and made
  to listen as ``NOBODY`` (a connected socket's SO_PEERCRED is the
  listener's credentials as of ``listen()``), counting every byte any
  client sends it.
- ``swapper``: finding 4's attacker (issue 34): from a dir it works in,
  swaps two names with ``renameat2(RENAME_EXCHANGE)`` in a loop, beside a
  fake daemon of its own, counting what each try did.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from tests.conftest import START_TIMEOUT, STOP_TIMEOUT, wait_until_sync

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")

# What a child runs: ``body(ready, stop_fd)`` calls ``ready()`` once it is
# what the test waits for, returns its report once ``stop_fd`` reads EOF.
Body = Callable[[Callable[[], None], int], dict[str, object]]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def become_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


@attrs.define
class OtherUser:
    """A forked process of another user (its pid), until ``stop``."""

    pid: int
    _stop_w: int
    _result_r: int
    report: dict[str, object] | None = None

    def stop(self) -> dict[str, object]:
        """Ask it to end (EOF on its stop pipe), read its report and reap
        it; SIGKILL if it is not done within STOP_TIMEOUT. Idempotent."""
        if self.report is not None:
            return self.report
        os.close(self._stop_w)
        data = _read_all(self._result_r, time.monotonic() + STOP_TIMEOUT)
        os.close(self._result_r)
        if not wait_until_sync(lambda: _reaped(self.pid), STOP_TIMEOUT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        self.report = json.loads(data) if data else {"error": "no report"}
        return self.report


def _reaped(pid: int) -> bool:
    done, _ = os.waitpid(pid, os.WNOHANG)
    return done == pid


def _read_all(fd: int, deadline: float) -> bytes:
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


def start_other_user(body: Body) -> OtherUser:
    """Fork a child that runs ``body``; return once it said it is ready
    (within START_TIMEOUT), or fail with what it reported."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    result_r, result_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest, no trio, only os-level calls
        status = 1
        try:
            os.close(ready_r)
            os.close(stop_w)
            os.close(result_r)

            def ready() -> None:
                os.write(ready_w, b"R")

            out = body(ready, stop_r)
            status = 0
        except BaseException as exc:
            out = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            with contextlib.suppress(BaseException):
                data = json.dumps(out).encode()
                while data:
                    data = data[os.write(result_w, data) :]
            os._exit(status)
    for fd in (ready_w, stop_r, result_w):
        os.close(fd)
    other = OtherUser(pid, stop_w, result_r)
    said = _read_some(ready_r, time.monotonic() + START_TIMEOUT)
    os.close(ready_r)
    if said != b"R":
        pytest.fail(f"the process of uid {NOBODY} did not get ready: {other.stop()}")
    return other


def _read_some(fd: int, deadline: float) -> bytes:
    left = max(0.0, deadline - time.monotonic())
    return os.read(fd, 1) if select.select([fd], [], [], left)[0] else b""


# --- the fake daemon ----------------------------------------------------------------


def fake_daemon(path: Path, *, as_nobody: bool = True) -> Body:
    """A listener at ``path`` (bound by root), listening as ``NOBODY``
    (``as_nobody=False``: as root, this test's own uid, which any client
    talks to: the count's control). Its report: its uid, how many
    connections it accepted and how many bytes they sent."""

    def body(ready: Callable[[], None], stop_fd: int) -> dict[str, object]:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        if as_nobody:
            become_nobody()
        listener.listen(64)
        counter = ByteCounter(listener)
        ready()
        while not select.select([stop_fd], [], [], 0)[0]:
            select.select([listener, stop_fd, *counter.conns], [], [])
            counter.drain()
        counter.drain()
        return {"uid": os.getuid(), **counter.counts}

    return body


class ByteCounter:
    """Every connection ``listener`` accepts, and every byte each sends."""

    def __init__(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._listener = listener
        self.conns: list[socket.socket] = []
        self.counts = {"connections": 0, "bytes": 0}

    def drain(self) -> None:
        """Accept what waits in the backlog, read what each connection
        sent so far (never waits); a connection at its end is closed."""
        with contextlib.suppress(BlockingIOError):
            while True:
                conn, _ = self._listener.accept()
                conn.setblocking(False)
                self.conns.append(conn)
                self.counts["connections"] += 1
        for conn in list(self.conns):
            try:
                while chunk := conn.recv(65536):
                    self.counts["bytes"] += len(chunk)
            except BlockingIOError:
                continue
            except OSError:
                pass
            self.conns.remove(conn)
            conn.close()


# --- finding 4's attacker --------------------------------------------------------


def renameat2_available() -> bool:
    return hasattr(ctypes.CDLL(None), "renameat2")


def swapper(workdir: Path, pairs: list[tuple[str, str]], fake_socket: str) -> Body:
    """In ``workdir`` (entered as root: the dirs above it need not let
    ``NOBODY`` through, as /tmp lets everyone through), as ``NOBODY``: a
    fake daemon listening at ``fake_socket`` (a relative path, its dirs
    made 0777 by it), then ``renameat2(a, b, RENAME_EXCHANGE)`` of each
    pair in ``pairs``, round and round, until told to stop. Its report:
    the fake's connections and bytes, how many swaps were tried and done,
    and the errno names of those that failed, counted."""
    libc = ctypes.CDLL(None, use_errno=True)
    exchange = libc.renameat2
    exchange.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    exchange.argtypes += [ctypes.c_uint]

    def body(ready: Callable[[], None], stop_fd: int) -> dict[str, object]:
        os.chdir(workdir)
        become_nobody()
        os.umask(0)
        os.makedirs(os.path.dirname(fake_socket), mode=0o777, exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(fake_socket)
        listener.listen(64)
        counter = ByteCounter(listener)
        tried = done = 0
        failed: dict[str, int] = {}
        ready()
        while not select.select([stop_fd], [], [], 0)[0]:
            counter.drain()
            for a, b in pairs:
                tried += 1
                if exchange(_AT_FDCWD, a.encode(), _AT_FDCWD, b.encode(), _RENAME_EXCHANGE) == 0:
                    done += 1
                else:
                    name = errno.errorcode.get(ctypes.get_errno(), "?")
                    failed[name] = failed.get(name, 0) + 1
        counter.drain()
        return {
            "uid": os.getuid(),
            "tried": tried,
            "done": done,
            "failed": failed,
            **counter.counts,
        }

    return body
