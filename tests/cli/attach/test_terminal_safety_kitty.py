"""Issue 24 in kitty (headless under Xvfb, driven by remote control as in
``test_layout_kitty.py``): kitty does not end a string on a bare ESC, so
an unterminated OSC a program left open used to swallow the detach reset
and the status line. Keys are sent with ``kitty @ send-text`` (the bytes a
key sends with no keyboard protocol on); the modes are read back with
DECRQM, asked by a script in the person's shell after the detach.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import trio

from restore import RELAUNCH_MARKER
from tests.cli import test_layout_kitty
from tests.cli.conftest import SCREEN_TIMEOUT, ms, wait_buffered
from tests.cli.test_layout_kitty import KittyRun
from tests.cli.test_scrollback import reboot, wait_saved
from tests.conftest import POLL_INTERVAL, MsDirs

pytestmark = test_layout_kitty.pytestmark
display = test_layout_kitty.display  # fixtures
kittys = test_layout_kitty.kittys

# Asks kitty (DECRQM) whether each mode is set, prints "mode=answer" lines.
ASK_MODES = r"""
import os, re, select, termios, tty
modes = ["1049", "1000", "1006", "2004", "25"]
saved = termios.tcgetattr(0)
tty.setraw(0, termios.TCSANOW)
os.write(1, b"".join(b"\x1b[?%s$p" % m.encode() for m in modes) + b"\x1b[?u\x1b[c")
got = b""
while not re.search(rb"\x1b\[\?[0-9;]*c", got) and select.select([0], [], [], 10)[0]:
    got += os.read(0, 1024)
termios.tcsetattr(0, termios.TCSANOW, saved)
answers = dict(re.findall(rb"\x1b\[\?([0-9]+);([0-9])\$y", got))
flags = re.search(rb"\x1b\[\?([0-9]+)u", got)
print(" ".join(f"{m}={answers.get(m.encode(), b'?').decode()}" for m in modes), end=" ")
print("kitty=" + (flags[1].decode() if flags else "?"))
"""
# DECRPM: 1 set, 2 reset. Cursor shown, everything else off, no kitty
# keyboard flags.
GIVEN_BACK = "1049=2 1000=2 1006=2 2004=2 25=1 kitty=0"


async def _wait_text(k: KittyRun, pattern: str) -> str:
    with trio.move_on_after(SCREEN_TIMEOUT):
        while True:
            text = await trio.to_thread.run_sync(lambda: k.at("get-text"))
            if re.search(pattern, text, re.M):
                return text
            await trio.sleep(POLL_INTERVAL * 4)
    text = k.at("get-text")
    raise AssertionError(f"kitty: {pattern!r} not shown within {SCREEN_TIMEOUT} s:\n{text}")


async def test_an_unterminated_string_then_detach_shows_the_line_and_resets_modes(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun]
) -> None:
    script = (
        r'printf "\033[?1049h\033[?1000h\033[?1006h\033[?2004h\033[?25lfull-screen'
        r'\033]0;unterminated"; exec sleep 600'
    )
    await ms(ms_dirs, "new", "-d", "-n", "osct", "--", "sh", "-c", script)
    await wait_buffered(ms_dirs, "osct", b"unterminated")
    asker = ms_dirs.root / "ask_modes.py"
    asker.write_text(ASK_MODES)
    k = kittys("kitty")
    await trio.to_thread.run_sync(k.start, "sh")
    k.at("send-text", "multiserver attach osct\r")
    await _wait_text(k, "full-screen")
    k.at("send-text", "\x1c")  # Ctrl-\, the detach key
    await _wait_text(k, r"^\[detached from osct\]")
    k.at("send-text", f"{sys.executable} {asker}\r")
    text = await _wait_text(k, r"^1049=\S+ .*kitty=\S+$")
    assert GIVEN_BACK in text, text


FULL_SCREEN_THEN_SHELL = (
    r'if [ -e "$0" ]; then exec env "PS1=in$ " sh -i; fi; : > "$0";'
    r' printf "\033[?1049h\033[>1u\033[?1000h\033[?1006h\033[?2004h\033[?25l";'
    r" echo old-screen; exec sleep 600"
)


async def test_after_a_reboot_the_relaunched_shell_has_no_kitty_flags_nor_modes(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun]
) -> None:
    """Before: the saved screen of a program that pushed kitty keyboard
    flags (``>1u``: Ctrl-C then reaches bash as ``^[[99;5u``) and set the
    alternate screen, mouse, paste and a hidden cursor was replayed, then
    the marker, and the new shell ran inside all of them."""
    await ms(
        ms_dirs, "new", "-d", "-n", "r", "--",
        "sh", "-c", FULL_SCREEN_THEN_SHELL, str(ms_dirs.root / "ran-once"),
    )  # fmt: skip
    await wait_buffered(ms_dirs, "r", b"old-screen")
    asker = ms_dirs.root / "ask_modes.py"
    asker.write_text(ASK_MODES)
    k = kittys("kitty")
    await trio.to_thread.run_sync(k.start, "sh")
    k.at("send-text", "multiserver attach r\r")
    await _wait_text(k, "old-screen")
    k.at("send-text", "\x1c")  # the screen handed back is saved as the scrollback
    await _wait_text(k, r"^\[detached from r\]")
    await wait_saved("r", b"old-screen")
    await reboot(ms_dirs)
    await ms(ms_dirs, "restore")
    k.at("send-text", "clear; multiserver attach r\r")
    await _wait_text(k, re.escape(RELAUNCH_MARKER))
    await _wait_text(k, r"^in\$")
    k.at("send-text", f"{sys.executable} {asker}\r")
    text = await _wait_text(k, r"^1049=\S+ .*kitty=\S+$")
    assert GIVEN_BACK in text, text
