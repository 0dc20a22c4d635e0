"""Issue 34 in xterm (under Xvfb): a session that locked the keyboard
(KAM, ``CSI 2 h``) while nobody watched does not lock the person's
keyboard when replayed, and a program that locks it live gives it back
when the attach ends.

xterm is the terminal met that honours KAM: locked, it drops every key,
the detach key too. Keys are typed for real, with xdotool into the
focused window (XTEST): xterm ignores the synthetic events ``xdotool
--window`` sends (its ``allowSendEvents`` resource is off, as in a
person's xterm). What xterm does is seen through what the shells write to
files, and through its window title (xterm sets it as it reads the output:
a title written after a sequence means xterm has read that sequence).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
import trio

from tests.cli.attach.test_attach_kitty import XDOTOOL
from tests.cli.conftest import (
    SCREEN_TIMEOUT,
    ms,
    person_env,
    wait_buffered,
    wait_session,
    write_fifo,
)
from tests.cli.test_layout_kitty import XVFB, Display, display, kill_tree  # noqa: F401 - fixture
from tests.conftest import POLL_INTERVAL, MsDirs, wait_until_sync

XTERM = shutil.which("xterm")
pytestmark = pytest.mark.skipif(
    XTERM is None or XVFB is None or XDOTOOL is None,
    reason="xterm, Xvfb or xdotool is not installed (make test installs them where it can)",
)

# A line typed in xterm ran in its shell at most 0.02 s after xdotool
# returned (30 lines, the test under nice against two busy loops on 2
# cores): a key that has done nothing for 100 times that was dropped.
KEY_BOUND = 2.0


@attrs.define
class XtermRun:
    """One xterm on the test's display, running the person's shell, its
    window focused so that typed keys go to it."""

    env: dict[str, str]
    cwd: Path
    proc: subprocess.Popen[bytes] | None = None
    window: str = ""

    def start(self) -> None:
        assert XTERM is not None
        self.proc = subprocess.Popen(
            [XTERM, "-geometry", "100x30", "-e", "sh"],
            env=self.env, cwd=self.cwd,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        assert wait_until_sync(self._find_window, SCREEN_TIMEOUT), "xterm shows no window"
        self.xdotool("windowfocus", "--sync", self.window)

    def _find_window(self) -> bool:
        assert self.proc is not None
        # Mapped (focus can be given only to a window on the screen).
        found = self.xdotool("search", "--onlyvisible", "--pid", str(self.proc.pid), check=False)
        found = found.split()
        self.window = found[0] if found else ""
        return bool(found)

    def xdotool(self, *args: str, check: bool = True) -> str:
        assert XDOTOOL is not None
        done = subprocess.run(
            [XDOTOOL, *args], env=self.env, capture_output=True, text=True, timeout=10, check=check
        )
        return done.stdout

    def type(self, text: str) -> None:
        """Type ``text`` (a newline is Return)."""
        self.xdotool("type", "--delay", "2", text)

    def key(self, keys: str) -> None:
        """Press ``keys``: xdotool's names, ``ctrl+backslash``."""
        self.xdotool("key", "--clearmodifiers", keys)

    def title(self) -> str:
        return self.xdotool("getwindowname", self.window).strip()

    def kill(self) -> None:
        if self.proc is not None:
            kill_tree(self.proc)
            self.proc = None


@pytest.fixture
def xterm(ms_dirs: MsDirs, display: Display) -> Iterator[XtermRun]:  # noqa: F811 - the fixture
    run = XtermRun({**person_env(ms_dirs), "DISPLAY": f":{display.number}"}, ms_dirs.root)
    try:
        run.start()
        yield run
    finally:
        run.kill()


async def _wait(check: Callable[[], object], what: str) -> None:
    with trio.move_on_after(SCREEN_TIMEOUT):
        while not await trio.to_thread.run_sync(check):
            await trio.sleep(POLL_INTERVAL * 4)
        return
    pytest.fail(f"xterm: not {what} within {SCREEN_TIMEOUT} s")


async def _wait_file(path: Path, text: str) -> None:
    await _wait(lambda: path.exists() and path.read_text() == text + "\n", f"{path.name}: {text}")


async def _not_held(ms_dirs: MsDirs, name: str) -> None:
    await wait_session(ms_dirs, name, lambda c: c is not None and not c.held, "detached")


def _attach(xterm: XtermRun, name: str, status: Path) -> None:
    """Type ``attach NAME``, the attach's exit status then written to
    ``status``: once it is, the person's shell has its terminal back, and
    reads what is typed next (keys typed while the attach gives the terminal
    back are discarded, as they should be)."""
    xterm.type(f'multiserver attach {name}; echo "exit=$?" > {status}\n')


# The session's output while nobody watched: the keyboard locked, then
# what ``clear`` writes (its ``CSI 3 J`` erases the terminal's own
# history: test_terminal_safety_tmux.py), then a title that says the
# replay got past both.
LOCK_AND_CLEAR = r'printf "\033[2h"; clear; printf "\033]2;replayed\007"; echo kept'


async def test_a_replayed_keyboard_lock_leaves_the_keys_working(
    ms_dirs: MsDirs, xterm: XtermRun
) -> None:
    """Before: attaching replayed ``CSI 2 h``; xterm locked its keyboard, and
    neither the detach key nor anything else typed did anything (3 of 3)."""
    root = ms_dirs.root
    status, typed_in, after = root / "status", root / "typed-in", root / "typed-after"
    script = f'{LOCK_AND_CLEAR}; read line; echo "$line" > "$0"; exec sleep 600'
    await ms(ms_dirs, "new", "-d", "-n", "kam", "--", "sh", "-c", script, str(typed_in))
    kept = await wait_buffered(ms_dirs, "kam", b"kept")
    assert b"\x1b[2h" in kept and b"\x1b[3J" in kept, kept
    _attach(xterm, "kam", status)
    await _wait(lambda: xterm.title() == "replayed", "showing the replay")
    xterm.type("in-session\n")  # read by the session's program
    await _wait_file(typed_in, "in-session")
    xterm.key("ctrl+backslash")
    await _wait_file(status, "exit=0")
    await _not_held(ms_dirs, "kam")
    xterm.type(f"echo after > {after}\n")  # read by the person's shell
    await _wait_file(after, "after")
    # Control: the bytes the session printed, shown raw, lock the keyboard.
    raw, locked = root / "raw.bin", root / "typed-locked"
    raw.write_bytes(kept + b"\x1b]2;shown-raw\x07")
    xterm.type(f"cat {raw}\n")
    await _wait(lambda: xterm.title() == "shown-raw", "showing the raw bytes")
    xterm.type(f"echo locked > {locked}\n")
    assert not await trio.to_thread.run_sync(wait_until_sync, locked.exists, KEY_BOUND)


# Once attached (its title replayed), the program locks the keyboard at a
# key, live; then exits with 7 when the test says.
LOCKS_LIVE = (
    r'printf "\033]2;attached\007"; read x; printf "\033[2h\033]2;locked\007";'
    r' cat "$0" > /dev/null; exit 7'
)


async def test_a_keyboard_the_program_locked_works_again_when_the_attach_ends(
    ms_dirs: MsDirs, xterm: XtermRun
) -> None:
    """A program that locks the keyboard while attached is obeyed (its
    output is live, not a replay): the detach key does nothing. When the
    program exits, the attach ends with the reset, ``CSI 2 l`` in it, and
    the person's shell gets the keys again. Before: no reset unlocked it."""
    root = ms_dirs.root
    go, status, after = root / "go", root / "status", root / "typed-after"
    os.mkfifo(go)
    await ms(ms_dirs, "new", "-d", "-n", "live", "--", "sh", "-c", LOCKS_LIVE, str(go))
    await wait_buffered(ms_dirs, "live", b"attached")
    _attach(xterm, "live", status)
    await _wait(lambda: xterm.title() == "attached", "attached")
    xterm.type("\n")
    await _wait(lambda: xterm.title() == "locked", "locked by the program")
    # The hazard: locked, xterm drops the detach key.
    xterm.key("ctrl+backslash")
    with trio.move_on_after(KEY_BOUND):
        await _not_held(ms_dirs, "live")
        pytest.fail("the detach key detached from a locked xterm")
    await write_fifo(go)  # the program exits
    await _wait_file(status, "exit=7")  # and the attach with it
    xterm.type(f"echo after > {after}\n")
    await _wait_file(after, "after")
