"""``multiserver attach`` in a real terminal emulator: tmux.

pyte renders text but keeps no modes a person would trip over (the alternate
screen, a hidden cursor, application cursor keys, mouse reporting) and
answers no queries; tmux does both. Each test runs its own tmux server on a
socket in the test's private dir (``tmux -S ROOT/tmux.sock -f /dev/null``),
the person's shell in its one pane, and asks tmux what the pane's terminal
is like (``display -p '#{alternate_on} ...'``, ``capture-pane -p``). The
server is killed through its own socket at teardown, and anything left in
the pane's session by pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import pytest
import trio

from tests.cli.conftest import (
    MULTISERVER,
    SCREEN_TIMEOUT,
    Terminal,
    ms,
    person_env,
    session_pids,
    wait_buffered,
    wait_session,
)
from tests.conftest import POLL_INTERVAL, MsDirs, is_alive, wait_until_sync

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")

# The pane's terminal: on the alternate screen, cursor shown, application
# cursor keys, any mouse reporting.
FLAGS = "#{alternate_on} #{cursor_flag} #{keypad_cursor_flag} #{mouse_any_flag}"
GIVEN_BACK = "0 1 0 0"
PROMPT = "outer$"


@attrs.define
class TmuxWindow:
    """One tmux server with one window (100x30) running the person's shell."""

    socket: Path
    env: dict[str, str]
    server_pid: int = 0
    pane_pid: int = 0

    def tmux(self, *args: str) -> str:
        assert TMUX is not None
        result = subprocess.run(
            [TMUX, "-S", str(self.socket), "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            timeout=10,
        )
        if result.returncode != 0:
            pytest.fail(f"tmux {' '.join(args)} -> {result.returncode}: {result.stderr!r}")
        return result.stdout.decode()

    def start(self) -> None:
        self.tmux("new-session", "-d", "-x", "100", "-y", "30", "sh", "-i")
        self.server_pid = int(self.tmux("display", "-p", "#{pid}"))
        self.pane_pid = int(self.tmux("display", "-p", "#{pane_pid}"))

    def keys(self, *keys: str) -> None:
        """tmux key names: ``Enter``, ``C-\\\\``, ``Escape``."""
        self.tmux("send-keys", *keys)

    def line(self, text: str) -> None:
        self.tmux("send-keys", "-l", text)
        self.keys("Enter")

    def screen(self) -> str:
        """The visible screen, trailing blanks removed."""
        lines = [line.rstrip() for line in self.tmux("capture-pane", "-p").split("\n")]
        return "\n".join(lines).rstrip("\n")

    def flags(self) -> str:
        return self.tmux("display", "-p", FLAGS).strip()

    async def wait(self, ok: Callable[[], object], what: str) -> None:
        with trio.move_on_after(SCREEN_TIMEOUT):
            while not ok():
                await trio.sleep(POLL_INTERVAL * 4)
            return
        pytest.fail(f"tmux: not {what} within {SCREEN_TIMEOUT} s: {self.flags()}\n{self.screen()}")

    async def wait_screen(self, text: str | re.Pattern[str]) -> str:
        def ok() -> bool:
            screen = self.screen()
            return (text in screen) if isinstance(text, str) else bool(text.search(screen))

        await self.wait(ok, f"showing {text!r}")
        return self.screen()

    async def wait_prompt(self) -> str:
        await self.wait(lambda: self.screen().endswith(PROMPT), "at the prompt")
        return self.screen()

    async def wait_flags(self, check: Callable[[str], bool], what: str) -> None:
        await self.wait(lambda: check(self.flags()), what)

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                [str(TMUX), "-S", str(self.socket), "kill-server"],
                env=self.env,
                capture_output=True,
                timeout=10,
            )
        pids = [self.server_pid] if self.server_pid else []
        if self.pane_pid:
            pids += session_pids(self.pane_pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until_sync(lambda: not any(is_alive(p) for p in pids), 5.0)


@pytest.fixture
async def tmux(ms_dirs: MsDirs) -> AsyncIterator[TmuxWindow]:
    window = TmuxWindow(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    try:
        window.start()
        await window.wait_prompt()
        yield window
    finally:
        window.close()


def on_alternate_screen(flags: str) -> bool:
    return flags.split()[0] == "1"


def cursor_hidden(flags: str) -> bool:
    return flags.split()[1] == "0"


async def attach(
    t: TmuxWindow, name: str, shown: str, modes: Callable[[str], bool] = on_alternate_screen
) -> None:
    """Type ``multiserver attach NAME`` at the prompt; wait until the
    program's screen is up (its ``modes`` on) and shows ``shown``."""
    t.line(f"multiserver attach {name}")
    await t.wait_flags(modes, f"in the program's modes ({modes.__name__})")
    await t.wait_screen(shown)


async def assert_given_back(t: TmuxWindow, status: str, command: str | None) -> None:
    """The terminal is as the shell left it, the status line on the main
    screen: under the command that attached, if the program drew on the
    alternate screen (``command``)."""
    await t.wait_screen(status)
    await t.wait_prompt()
    assert t.flags() == GIVEN_BACK
    screen = t.screen()
    lines = screen.split("\n")
    at = lines.index(status)
    if command is not None:
        assert f"{PROMPT} {command}" in lines[:at], screen
    assert lines[-1] == PROMPT and at < len(lines) - 1, screen


PROGRAMS = {
    # name: (argv, something its screen shows, a mode it sets)
    "vim": (["vim"], "~", on_alternate_screen),
    "top": (["top", "-d", "1"], "load average", cursor_hidden),  # no alternate screen
    "less": (["less", "{lines}"], "line 1", on_alternate_screen),
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
async def test_detaching_from_a_full_screen_program_gives_the_terminal_back(
    ms_dirs: MsDirs, tmux: TmuxWindow, program: str
) -> None:
    """Seen in tmux: after detaching from top the cursor stayed hidden and
    the cursor keys in application mode; from vim, the alternate screen
    stayed, with the status line drawn over vim. Now the terminal is as the
    shell had it, the status line under the attach command; and the next
    attach shows the program again."""
    argv, shown, modes = PROGRAMS[program]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    lines = ms_dirs.root / "lines.txt"
    lines.write_text("".join(f"line {k}\n" for k in range(1, 500)))
    name = f"{program}1"
    await ms(ms_dirs, "new", "-d", "-n", name, "--", *[a.format(lines=lines) for a in argv])
    await wait_session(ms_dirs, name, lambda s: s and s.buffered_bytes > 0, "drawn")

    command = f"multiserver attach {name}" if modes is on_alternate_screen else None
    await attach(tmux, name, shown, modes)
    tmux.keys("C-\\")
    await assert_given_back(tmux, f"[detached from {name}]", command)

    tmux.line("clear")
    await tmux.wait_prompt()
    await attach(tmux, name, shown, modes)
    tmux.keys("C-\\")
    await assert_given_back(tmux, f"[detached from {name}]", command)


async def test_taken_over_the_first_terminal_is_given_back(
    ms_dirs: MsDirs, tmux: TmuxWindow, open_terminal: Callable[..., Terminal]
) -> None:
    if shutil.which("vim") is None:
        pytest.skip("vim is not installed")
    await ms(ms_dirs, "new", "-d", "-n", "vi1", "--", "vim")
    await wait_session(ms_dirs, "vi1", lambda s: s and s.buffered_bytes > 0, "drawn")
    await attach(tmux, "vi1", "~")
    other = open_terminal([MULTISERVER, "attach", "-d", "vi1"], name="another window")
    await other.wait_raw_mode()
    await assert_given_back(tmux, "[vi1 attached elsewhere]", "multiserver attach vi1")


# Leaves its terminal in every mode it sets: the alternate screen, the cursor
# hidden, application cursor keys and keypad, mouse and paste reporting.
MESSY = (
    r'printf "\033[?1049h\033[?25l\033[?1h\033=\033[?1000h\033[?1006h\033[?2004h";'
    r" echo messy; read x; exit 3"
)


async def test_a_program_that_exits_leaving_its_modes_gives_the_terminal_back(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "p", "--", "sh", "-c", MESSY)
    await wait_buffered(ms_dirs, "p", b"messy")
    tmux.line('multiserver attach p; echo "st=$?"')
    await tmux.wait_flags(lambda f: f == "1 0 1 1", "in the program's modes")
    tmux.keys("Enter")
    await tmux.wait_screen(re.compile(r"^st=3$", re.M))
    await assert_given_back(tmux, "[p exited with code 3]", 'multiserver attach p; echo "st=$?"')


# Asks the terminal where its cursor is and what it is, then reads a line
# and says whether anything but what was typed came with it.
ASKS = (
    r'printf "\033[6n\033[c\033[>c\033]11;?\007\033[?u\033[14t\033[?2004\$p"; echo asked;'
    r' read x; case "$x" in typed) echo clean;; *) printf "dirty: %s\n" "$x" | od -c;; esac;'
    r" sleep 1000"
)


async def test_replayed_queries_are_not_answered_into_the_program(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    """The program asked while detached. Before: attaching replayed the
    questions, tmux answered them, and the program read the answers
    (``ESC[4;1R ESC[?1;2c...``) as typed input. Now it reads only what the
    person typed. (Without tmux: ``test_attach_replay.py``.)"""
    await ms(ms_dirs, "new", "-d", "-n", "q", "--", "sh", "-c", ASKS)
    await wait_buffered(ms_dirs, "q", b"asked")
    tmux.line("multiserver attach q")
    await tmux.wait_screen(re.compile(r"^asked$", re.M))
    tmux.line("typed")
    screen = await tmux.wait_screen(re.compile(r"^(clean|0000000 .*)$", re.M))
    assert re.search(r"^clean$", screen, re.M), screen


LIVE_QUESTION = r"""
import os, select, sys, termios, tty
print("waiting", flush=True)
sys.stdin.readline()
tty.setraw(0)
os.write(1, b"\x1b[6n")
answer = b""
while not answer.endswith(b"R") and select.select([0], [], [], 10)[0]:
    answer += os.read(0, 64)
termios.tcsetattr(0, termios.TCSANOW, termios.tcgetattr(0))
os.write(1, b"\r\nanswer: " + repr(answer).encode() + b"\r\n")
select.select([], [], [], 1000)
"""


async def test_a_live_programs_question_after_the_replay_is_answered(
    ms_dirs: MsDirs, tmux: TmuxWindow
) -> None:
    """Only the replay's answers are dropped: a program that asks once
    attached (here: the cursor position) gets its answer."""
    script = ms_dirs.root / "ask.py"
    script.write_text(LIVE_QUESTION)
    await ms(ms_dirs, "new", "-d", "-n", "live", "--", sys.executable, str(script))
    await wait_buffered(ms_dirs, "live", b"waiting")
    tmux.line("multiserver attach live")
    await tmux.wait_screen(re.compile(r"^waiting$", re.M))
    tmux.keys("Enter")
    screen = await tmux.wait_screen("answer: ")
    assert re.search(r"answer: b'\\x1b\[\d+;\d+R'", screen), screen
