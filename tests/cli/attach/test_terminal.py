"""The pure pieces of what ``attach`` says to a terminal and lets through
from it (``multiserver_cli.attach._terminal``): the replay guarded, answers
dropped from input. (What a replay keeps: ``tests/multiserver/terminal/test_replay.py``; the
reset: ``tests/multiserver/terminal/test_screen.py``.)

Real programs' output (vim, top, less, run here on a PTY; skipped where not
installed) is the check that stripping mangles nothing: pyte renders it the
same with and without the queries.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import pyte
import pytest

from multiserver import for_terminal
from multiserver_cli.attach._terminal import SENTINEL, AnswerFilter, guard_replay


def strip_queries(data: bytes) -> bytes:
    """A whole output as a replay writes it, an unfinished end kept."""
    body, tail = for_terminal(data)
    return body + tail


# --- real programs' output, rendered by pyte ------------------------------------------


class _Screen(pyte.Screen):
    """pyte takes "CSI ? Pm m" (XTQMODKEYS, which vim sends) for SGR and
    fails on it: a query, so it is ignored, as terminals do."""

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)


def _render(data: bytes) -> _Screen:
    screen = _Screen(80, 24)
    pyte.ByteStream(screen).feed(data)
    return screen


def _capture(argv: Sequence[str], steps: Sequence[tuple[bytes, bytes]], term: str) -> bytes:
    """Run ``argv`` on a 24x80 PTY with ``TERM=term``; for each step wait
    until its output contains the marker, then type the keys; return all it
    wrote until it exited."""
    master, slave = os.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {"PATH": "/usr/bin:/bin", "TERM": term, "HOME": "/nonexistent", "LC_ALL": "C.UTF-8"}
    proc = subprocess.Popen(
        list(argv), stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 20
    try:
        for marker, keys in steps:
            while marker not in out:
                assert time.monotonic() < deadline, f"{argv}: {marker!r} not seen: {bytes(out)!r}"
                if select.select([master], [], [], 0.1)[0]:
                    try:
                        out += os.read(master, 65536)
                    except OSError:
                        break
            os.write(master, keys)
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                out += data
        else:
            pytest.fail(f"{argv} did not exit")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        os.close(master)
    return bytes(out)


PROGRAMS = {
    "vim": (["vim"], [(b"~", b"ihello\x1b"), (b"hello", b":qa!\r")]),
    "top": (["top", "-d", "0.2"], [(b"load average", b"q")]),
    "less": (["less", "{lines}"], [(b"line 23", b" "), (b"line 46", b"q")]),
}


@pytest.mark.parametrize("term", ["xterm", "screen"])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_real_programs_render_the_same_without_their_queries(
    program: str, term: str, tmp_path: Path
) -> None:
    argv, steps = PROGRAMS[program]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    lines = tmp_path / "lines"
    lines.write_text("".join(f"line {k}\n" for k in range(1, 200)))
    raw = _capture([a.format(lines=lines) for a in argv], steps, term)
    stripped = strip_queries(raw)
    if program == "vim":
        # vim asks for the cursor position (ambiguous widths) at least.
        assert b"\x1b[6n" in raw and b"\x1b[6n" not in stripped
    # Every prefix renders the same: the screen at any moment, not only the
    # last one (the program's exit may clear it).
    cuts = sorted({len(raw) * k // 8 for k in range(1, 9)})
    for cut in cuts:
        head = raw[:cut]
        a, b = _render(head), _render(strip_queries(head))
        assert a.display == b.display, cut
        assert (a.cursor.x, a.cursor.y) == (b.cursor.x, b.cursor.y), cut
        assert all(a.buffer[y] == b.buffer[y] for y in range(24)), cut


# --- answers from the terminal ------------------------------------------------------

ANSWERS = [
    b"\x1b[12;40R",  # CPR
    b"\x1b[?12;40;1R",  # DECXCPR
    b"\x1b[>41;380;0c",  # DA2
    b"\x1b[?2004;1$y",  # DECRPM
    b"\x1b[4;2$y",
    b"\x1b[?1u",  # kitty flags
    b"\x1b[4;600;800t",  # XTWINOPS reports
    b"\x1b[8;24;80t",
    b"\x1b[1t",
    b"\x1b[0n",  # DSR
    b"\x1b[?997;1n",
    b"\x1b[>4;2m",  # XTQMODKEYS
    b"\x1b[?1;0;256S",  # XTSMGRAPHICS
    b"\x1b[2;1;1;120;120;1;0x",  # DECREPTPARM
    b"\x1b]11;rgb:0000/0000/0000\x07",  # OSC colours
    b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\",
    b"\x1b]52;c;aGVsbG8=\x07",
    b"\x1b]l title\x1b\\",
    b"\x1bP1$r0m\x1b\\",  # DECRQSS
    b"\x1bP!|00000000\x1b\\",  # DA3
    b"\x1bP>|XTerm(388)\x1b\\",  # XTVERSION
    b"\x1bP1+r544e=787465726d\x1b\\",  # XTGETTCAP
    b"\x1b_Gi=31;OK\x1b\\",  # kitty graphics
]

KEYS = [
    b"plain text",
    "ünïcode ✓".encode(),
    b"\r",
    b"\x7f",
    b"\x03",
    b"\x1b",  # Escape: the lone ESC waits (see below); with more after it, it goes
    b"\x1bx",  # Alt-x
    b"\x1b[A\x1b[B\x1b[C\x1b[D",  # arrows
    b"\x1bOA\x1bOP",  # application cursor keys, F1
    b"\x1b[1;5A",  # Ctrl-Up
    b"\x1b[3~\x1b[15~\x1b[5;5~",  # Delete, F5, Ctrl-PgUp
    b"\x1b[97;5u\x1b[13u",  # kitty keyboard key events
    b"\x1b[<0;10;5M\x1b[<0;10;5m",  # SGR mouse
    b"\x1b[M !!",  # X10 mouse
    b"\x1b[I\x1b[O",  # focus
    b"\x1b[200~pasted \x1b]11;rgb:1/2/3\x07 text\x1b[201~",  # a paste passes whole
]


def _window() -> AnswerFilter:
    return AnswerFilter(deadline=0.0)


@pytest.mark.parametrize("answer", ANSWERS)
def test_answers_are_dropped_in_the_window(answer: bytes) -> None:
    f = _window()
    assert f.feed(b"a" + answer + b"b") == b"ab"
    assert f.feed(answer) == b""


@pytest.mark.parametrize("keys", KEYS)
def test_typed_keys_pass_in_the_window(keys: bytes) -> None:
    f = _window()
    assert f.feed(keys + b"z") == keys + b"z"


def test_keys_and_answers_interleaved_keep_the_keys_in_order() -> None:
    f = _window()
    stream = b"".join(k + a for k, a in zip(KEYS, ANSWERS, strict=False))
    want = b"".join(k for k, _ in zip(KEYS, ANSWERS, strict=False))
    assert f.feed(stream + b".") == want + b"."


def test_an_answer_split_across_reads_is_dropped() -> None:
    stream = b"x" + b"".join(ANSWERS) + b"y"
    for cut in range(len(stream) + 1):
        f = _window()
        assert f.feed(stream[:cut]) + f.feed(stream[cut:]) == b"xy", cut


def test_the_sentinels_answer_ends_the_window() -> None:
    """Terminals answer in order: after DA1's answer, nothing more answers
    the replay. It is dropped; what follows passes, answer-shaped or not
    (a live program's own questions)."""
    f = _window()
    assert f.feed(b"\x1b[2;2Rk\x1b[2;1R\x1b[?62;22c\x1b[2;2Rl") == b"k\x1b[2;2Rl"
    assert f.phase == "done"
    assert f.feed(b"\x1b[?62;22c\x1b[5;5R") == b"\x1b[?62;22c\x1b[5;5R"


def test_a_lone_escape_waits_for_the_next_read_or_the_window_end() -> None:
    f = _window()
    assert f.feed(b"ab\x1b") == b"ab"
    assert f.feed(b"[A") == b"\x1b[A"
    assert f.feed(b"\x1b") == b""
    assert f.expire() == b"\x1b"
    assert f.phase == "late"


def test_after_the_window_only_the_sentinels_answer_is_dropped() -> None:
    """The window expired before the terminal answered DA1 (slow link): the
    answer still comes first among DA1 answers, and must not reach the
    program; everything else passes at once, a lone Escape too."""
    f = _window()
    f.expire()
    assert f.feed(b"\x1b") == b"\x1b"
    assert f.feed(b"\x1b[?62;22c") == b"\x1b[?62;22c"  # alone: not the sentinel's
    assert f.feed(b"a\x1b[2;2R\x1b[?6") == b"a"  # could be the answer: held
    assert f.feed(b"2;22cb") == b"b"
    assert f.phase == "done"
    assert f.feed(b"\x1b[?62;22c") == b"\x1b[?62;22c"


def test_close_gives_what_was_held() -> None:
    f = _window()
    assert f.feed(b"q\x1b[") == b"q"
    assert f.close() == b"\x1b["
    assert f.feed(b"\x1b[6;6R") == b"\x1b[6;6R"


def test_a_paste_split_across_reads_passes_whole() -> None:
    paste = b"\x1b[200~\x1b[6;6R\x1b]11;?\x07\x1b[201~"
    for cut in range(len(paste) + 1):
        f = _window()
        got = f.feed(paste[:cut]) + f.feed(paste[cut:] + b"\x1b[6;6R!")
        assert got == paste + b"!", cut


def test_the_sentinel_is_a_cursor_report_then_da1_and_a_replay_writes_neither() -> None:
    assert SENTINEL == b"\x1b[6n\x1b[c"
    assert guard_replay(SENTINEL) == (b"", b"")


def test_a_da1_answer_alone_does_not_end_the_window() -> None:
    """Before: a DA1 the stripper missed (``ESC [ BS c``) was answered first,
    the filter took that answer for the sentinel's, and the sentinel's own
    answer reached the program. Only the pair (CPR, DA1) ends the window."""
    f = _window()
    assert f.feed(b"\x1b[?62;22ca") == b"a"
    assert f.phase == "window"
    assert f.feed(b"\x1b[3;1R\x1b[?62;22cb") == b"b"
    assert f.phase == "done"


def test_the_sentinels_answer_split_between_its_two_halves_ends_the_window() -> None:
    answer = b"\x1b[3;1R\x1b[?62;22c"
    for cut in range(len(answer) + 1):
        f = _window()
        got = f.feed(b"k" + answer[:cut]) + f.feed(answer[cut:] + b"\x1b[5;5R")
        assert (got, f.phase) == (b"k\x1b[5;5R", "done"), cut
