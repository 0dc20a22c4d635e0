"""``multiserver capture``: a session's screen as text, run as a person and
a script run it; vim's screen as tmux shows the same vim, detached and
while a client shows it. (The rendering itself:
tests/multiserver/terminal/test_capture.py; through a host:
tests/remote/test_remote_capture.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

from tests.cli.attach.test_attach_tmux import TMUX, TmuxWindow, attach
from tests.cli.conftest import SCREEN_TIMEOUT, ms, person_env, wait_buffered, wait_session
from tests.conftest import POLL_INTERVAL, MsDirs

SHOWS = "printf 'A\\033[2K\\rB\\n\\033[31mred\\033[0m plain\\n'; exec sleep 100"


async def test_a_session_captures_as_its_terminal_shows_it(ms_dirs: MsDirs) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "s", "--", "sh", "-c", SHOWS)
    await wait_buffered(ms_dirs, "s", b"plain")
    plain = (await ms(ms_dirs, "capture", "s")).stdout.decode()
    assert plain.split("\n") == ["B", "red plain", *[""] * 22, ""]  # 24 rows, each a line
    styled = (await ms(ms_dirs, "capture", "-e", "s")).stdout.decode()
    assert styled.split("\n")[:2] == ["B", "\x1b[0;31mred\x1b[0m plain"]
    shape = json.loads((await ms(ms_dirs, "capture", "--json", "s")).stdout)
    assert shape == {
        "schema": 1,
        "rows": 24,
        "cols": 80,
        "history": 0,
        "styled": False,
        "lines": plain.split("\n")[:-1],
        "cursor": {"row": 2, "col": 0, "visible": True},
        "title": "",
    }


async def test_history_is_shown_above_the_screen(ms_dirs: MsDirs) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "h", "--", "sh", "-c", "seq 1 100; exec sleep 100")
    await wait_buffered(ms_dirs, "h", b"100\r\n")
    lines = (await ms(ms_dirs, "capture", "-S", "-10", "h")).stdout.decode().split("\n")
    # The screen: 78 to 100 and the cursor's empty line; above it, 68 to 77.
    assert lines[:-1] == [*(str(k) for k in range(68, 101)), ""]
    every = json.loads((await ms(ms_dirs, "capture", "--json", "-S", "-", "h")).stdout)
    assert every["history"] == 77 and every["lines"][0] == "1"


async def test_a_session_whose_program_ended_has_no_screen(ms_dirs: MsDirs) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "e", "--", "sh", "-c", "echo bye; exit 3")
    await wait_session(ms_dirs, "e", lambda c: c is not None and c.exit_code == 3, "exited")
    done = await ms(ms_dirs, "capture", "e", check=False)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == (
        "multiserver: e exited with code 3: no screen to capture"
        " (multiserver peek e prints its output)\n"
    )


# --- vim, as tmux shows it ---------------------------------------------------------------

needs_vim = pytest.mark.skipif(
    TMUX is None or shutil.which("vim") is None, reason="tmux and vim are needed (make test)"
)


def _file(ms_dirs: MsDirs) -> Path:
    notes = ms_dirs.root / "notes.txt"
    notes.write_text("".join(f"line {k}: some text of the file\n" for k in range(1, 200)))
    return notes


def _vim(notes: Path) -> list[str]:
    # The same vim, whatever tmux tells it its terminal is; no swap file
    # (two of them edit the file).
    return ["env", "TERM=xterm", "vim", "--clean", "-n", str(notes)]


async def _same(tmux: TmuxWindow, ms_dirs: MsDirs, name: str) -> None:
    """Wait until ``capture NAME`` prints what tmux's pane shows (tmux
    prints a line for every row, as capture does)."""
    shown, captured = "", ""
    with trio.move_on_after(SCREEN_TIMEOUT):
        while True:
            shown = tmux.tmux("capture-pane", "-p")
            captured = (await ms(ms_dirs, "capture", name)).stdout.decode()
            if captured == shown:
                return
            await trio.sleep(POLL_INTERVAL * 4)
    pytest.fail(f"capture is not what tmux shows:\n{captured}\n--- tmux:\n{shown}")


@needs_vim
async def test_vim_captures_as_tmux_shows_the_same_vim(ms_dirs: MsDirs) -> None:
    notes = _file(ms_dirs)
    await ms(ms_dirs, "new", "-d", "-n", "v", "--", *_vim(notes))
    window = TmuxWindow(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    try:
        # tmux's window is the session's size, 80x24; it runs the same vim.
        window.tmux("new-session", "-d", "-x", "80", "-y", "24", *_vim(notes))
        window.server_pid = int(window.tmux("display", "-p", "#{pid}"))
        window.pane_pid = int(window.tmux("display", "-p", "#{pane_pid}"))
        await window.wait_screen("199L")
        await wait_buffered(ms_dirs, "v", b"199L")
        await _same(window, ms_dirs, "v")
    finally:
        window.close()


@needs_vim
async def test_a_held_vim_captures_as_its_holder_shows_it(ms_dirs: MsDirs) -> None:
    """Attached in tmux, typed into: capture reads what the attach client
    keeps of what it showed. (The window is the session's size: a replay
    into a larger one keeps vim's old scroll region, which vim's redraw
    does not set again.)"""
    notes = _file(ms_dirs)
    await ms(ms_dirs, "new", "-d", "-n", "v", "--", *_vim(notes))
    await wait_buffered(ms_dirs, "v", b"199L")
    window = TmuxWindow(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    try:
        window.tmux("new-session", "-d", "-x", "80", "-y", "24", "sh", "-i")
        window.server_pid = int(window.tmux("display", "-p", "#{pid}"))
        window.pane_pid = int(window.tmux("display", "-p", "#{pane_pid}"))
        await window.wait_prompt()
        await attach(window, "v", "line 1:")
        window.keys("G", "o")
        window.tmux("send-keys", "-l", "typed while held")
        window.keys("Escape")
        await window.wait_screen("typed while held")
        await wait_session(ms_dirs, "v", lambda c: c is not None and c.held, "held")
        await _same(window, ms_dirs, "v")
    finally:
        window.close()
