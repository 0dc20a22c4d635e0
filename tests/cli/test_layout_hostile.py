"""Layouts read from, and written for, terminals that hold what they
should not (issue 23): each is one clear line (or a "not saved" line),
never a traceback, a hang past its bound, or an executed line."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from restore import Kitty, TerminalError
from restore.layout import _kitty


@contextlib.contextmanager
def dripping_peer(path: Path, every: float) -> Iterator[None]:
    """A unix socket that accepts, reads nothing useful back, and sends a
    byte every ``every`` seconds until the test is done (30 s at most)."""
    done = threading.Event()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()

        def drip() -> None:
            listener.settimeout(30)
            with contextlib.suppress(OSError), listener.accept()[0] as conn:
                end = time.monotonic() + 30
                while not done.is_set() and time.monotonic() < end:
                    conn.sendall(b"x")
                    done.wait(every)

        thread = threading.Thread(target=drip, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(35)


def test_a_kitty_that_drips_is_cut_at_the_call_s_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is the whole call's, not each recv's: a byte every 0.2 s
    would keep a 1 s per-recv timeout from ever firing."""
    monkeypatch.setattr(_kitty, "COMMAND_TIMEOUT", 1.0)
    sock = tmp_path / "kitty.sock"
    with dripping_peer(sock, 0.2):
        t0 = time.monotonic()
        with pytest.raises(TerminalError) as caught:
            Kitty.at(f"unix:{sock}").ls()
        took = time.monotonic() - t0
    assert str(caught.value) == "reading kitty's windows: kitty did not answer within 1 s"
    assert took < 3, took
