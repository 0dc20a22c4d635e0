"""A terminal's control channel that answers garbage, or nothing: each is
one TerminalError line, never a crash or a hang past the bound."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from restore.layout import _kitty
from restore.layout._kitty import Kitty
from restore.layout._terminals import TerminalError
from restore.layout._tmux import Tmux


@pytest.fixture
def fake_kitty(tmp_path: Path) -> Iterator[tuple[str, list[bytes]]]:
    """A socket that answers each connection with the next of ``answers``."""
    path = tmp_path / "kitty.sock"
    answers: list[bytes] = []
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1 << 16)
                if answers:
                    conn.sendall(answers.pop(0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"unix:{path}", answers
    finally:
        server.close()


def framed(body: bytes) -> bytes:
    return b"\x1bP@kitty-cmd" + body + b"\x1b\\"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"", "closed the connection without an answer"),
        (b"garbage", "closed the connection without an answer"),
        (framed(b"not json"), "answer is not JSON"),
        (framed(b'{"ok": false, "error": "no\\nway"}'), "kitty: no way"),
        (framed(b'{"ok": true, "data": {"a": 1}}'), "not a list of OS windows"),
        (
            framed(
                b'{"ok": true, "data": "[{\\"tabs\\": [{\\"layout_state\\": {\\"pairs\\": {\\"one\\": \\"x\\"}}, \\"windows\\": []}]}]"}'
            ),
            "not a kitty split pair",
        ),
    ],
)
def test_garbage_from_kitty_is_one_line(
    fake_kitty: tuple[str, list[bytes]], answer: bytes, said: str
) -> None:
    address, answers = fake_kitty
    answers.append(answer)
    with pytest.raises(TerminalError) as caught:
        Kitty.at(address).read()
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_odd_shapes_from_kitty_are_skipped(fake_kitty: tuple[str, list[bytes]]) -> None:
    address, answers = fake_kitty
    data = '[{"tabs": 5}, 3, {"tabs": [{"windows": [{"id": "x"}, {"id": 7, "columns": "80"}]}]}]'
    answers.append(framed(json.dumps({"ok": True, "data": data}).encode()))
    (tab,) = Kitty.at(address).read()
    assert list(tab.panes) == [7] and tab.panes[7].cols == 0


def test_a_silent_kitty_is_given_up_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A socket that takes the connection and never answers (nobody accepts)."""
    path = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX) as silent:
        silent.bind(str(path))
        silent.listen()
        monkeypatch.setattr(_kitty, "COMMAND_TIMEOUT", 0.2)
        with pytest.raises(TerminalError, match=r"did not answer within 0\.2 s"):
            Kitty.at(f"unix:{path}").read()


@pytest.mark.parametrize("address", ["bogus", "unix:", "tcp:host", "ftp:x"])
def test_a_bad_kitty_address_is_one_line(address: str) -> None:
    with pytest.raises(TerminalError, match="not a kitty address"):
        Kitty.at(address).read()


def test_tmux_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TerminalError) as caught:
        Tmux(("tmux", "-S", str(tmp_path / "none.sock"))).read()
    assert str(caught.value).startswith("reading tmux's windows:")
    with pytest.raises(TerminalError, match="not installed"):
        Tmux(("no-such-tmux-here",)).read()
