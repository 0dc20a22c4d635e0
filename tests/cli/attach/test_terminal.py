"""The pure pieces of what ``attach`` says to a terminal and lets through
from it (``multiserver_cli.attach._terminal``): queries stripped from a replay,
answers dropped from input, the reset on the way out.

Real programs' output (vim, top, less, run here on a PTY; skipped where not
installed) is the check that stripping mangles nothing: pyte renders it the
same with and without the queries, whole or fed in pieces.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
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

from multiserver_cli.attach._terminal import (
    SENTINEL,
    AnswerFilter,
    QueryStripper,
    ScreenModes,
    guard_replay,
    strip_queries,
    unfinished_at,
)

QUERIES = [
    b"\x1b[5n",  # DSR status
    b"\x1b[6n",  # CPR
    b"\x1b[?6n",  # DECXCPR
    b"\x1b[?15n",  # printer status
    b"\x1b[?996n",  # colour scheme
    b"\x1b[c",  # DA1
    b"\x1b[0c",
    b"\x1b[>c",  # DA2
    b"\x1b[>0c",
    b"\x1b[=c",  # DA3
    b"\x1b[=0c",
    b"\x1b[?2004$p",  # DECRQM, DEC mode
    b"\x1b[4$p",  # DECRQM, ANSI mode
    b"\x1bP$qm\x1b\\",  # DECRQSS
    b'\x1bP$q"p\x1b\\',
    b"\x1b[>q",  # XTVERSION
    b"\x1b[>0q",
    b"\x1bP+q544e\x1b\\",  # XTGETTCAP
    b"\x1b]4;1;?\x07",  # palette colour
    b"\x1b]4;1;?\x1b\\",
    b"\x1b]10;?\x07",  # foreground
    b"\x1b]11;?\x1b\\",  # background
    b"\x1b]12;?\x07",  # cursor colour
    b"\x1b]10;?;?\x07",  # two at once
    b"\x1b]52;c;?\x07",  # clipboard
    b"\x1b]21;foreground=?\x1b\\",  # kitty colours
    b"\x1b]22;?__current__\x1b\\",  # kitty pointer shape
    b"\x1b[?u",  # kitty keyboard flags
    b"\x1b[11t",  # XTWINOPS reports
    b"\x1b[13t",
    b"\x1b[13;2t",
    b"\x1b[14t",
    b"\x1b[14;2t",
    b"\x1b[15t",
    b"\x1b[16t",
    b"\x1b[18t",
    b"\x1b[19t",
    b"\x1b[20t",
    b"\x1b[21t",
    b"\x1b[?4m",  # XTQMODKEYS
    b"\x1b[?1;1S",  # XTSMGRAPHICS
    b"\x1b[1;1;1;1;1;1*y",  # DECRQCRA
    b"\x1b[x",  # DECREQTPARM
    b"\x1b[1x",
    b"\x1bZ",  # DECID
    b"\x05",  # ENQ
    b"\x1b_Ga=q,i=31;AAAA\x1b\\",  # kitty graphics query
]

NOT_QUERIES = [
    b"\x1b[1;31m",
    b"\x1b[m",
    b"\x1b[2J\x1b[H",
    b"\x1b[10;20H",
    b"\x1b[?1049h\x1b[?1049l",
    b"\x1b[?25l",
    b"\x1b[1;24r",
    b"\x1b[22;0;0t",  # title stack push: a command, not a report
    b"\x1b[23;0;0t",
    b"\x1b[8;24;80t",  # resize: a command
    b"\x1b[?8c",  # the Linux console's cursor shape
    b"\x1b[>4;2m",  # modifyOtherKeys on
    b"\x1b[>1u",  # kitty keyboard push
    b"\x1b[<u",  # and pop
    b"\x1b[2 q",  # cursor shape
    b"\x1b[6 q",
    b"\x1b[0%m",  # vim's probe, ignored by terminals
    b"\x1bPzz\x1b\\",
    b"\x1b]0;what?\x07",  # a title with a question mark
    b"\x1b]2;?\x07",  # even a title that is one
    b"\x1b]8;;https://example.org/?q=?\x1b\\see\x1b]8;;\x1b\\",  # a link
    b"\x1b]7;file://host/tmp?x\x07",
    b"\x1b]4;1;rgb:ff/00/00\x07",  # setting a colour
    b"\x1b]52;c;aGVsbG8=\x07",  # setting the clipboard
    b"\x1b]1337;SetUserVar=a=Pw==\x07",
    b"\x1b_Ga=T,f=100;AAAA\x1b\\",  # kitty graphics, shown
    b"\x1bPq#0;2;0;0;0#0~~@@\x1b\\",  # sixel
    b"\x1b7\x1b8\x1b(B\x1b=\x1b>",
    "héllo wörld ✓\r\n".encode(),
]


@pytest.mark.parametrize("query", QUERIES)
def test_each_query_is_removed_and_the_text_around_it_kept(query: bytes) -> None:
    assert strip_queries(b"before" + query + b"after") == b"beforeafter"
    assert strip_queries(query * 3) == b""


@pytest.mark.parametrize("sequence", NOT_QUERIES)
def test_other_sequences_are_left_byte_for_byte(sequence: bytes) -> None:
    data = b"a" + sequence + b"b"
    assert strip_queries(data) == data


def test_a_sequence_cut_short_by_another_escape_is_not_one() -> None:
    """The terminal abandons ESC [ 1 ; at the next ESC: the CPR after it is
    a query, the fragment is left as the terminal will see it."""
    assert strip_queries(b"\x1b[1;\x1b[6nx") == b"\x1b[1;x"
    # CAN aborts a sequence: no query then.
    assert strip_queries(b"\x1b[6\x18n") == b"\x1b[6\x18n"


MIXED = b"".join(
    [
        b"\x1b[?1049h\x1b[H\x1b[2J",
        b"line one\r\n",
        b"\x1b[6n",
        "ünïcode ✓\r\n".encode(),
        b"\x1b]0;title?\x07",
        b"\x1b]11;?\x1b\\",
        b"\x1b[1;31mred\x1b[m",
        b"\x1bP$qm\x1b\\",
        b"\x1b[>c\x05",
        b"\x1b]8;;http://x/?a\x1b\\link\x1b]8;;\x1b\\",
        b"\x1b[?2026$p\x1b[14t",
        b"\x1b[10;5Hend",
    ]
)


def test_split_at_every_point_strips_as_whole() -> None:
    whole = strip_queries(MIXED)
    for cut in range(len(MIXED) + 1):
        stripper = QueryStripper()
        got = stripper.feed(MIXED[:cut]) + stripper.feed(MIXED[cut:]) + stripper.finish()
        assert got == whole, cut


def test_random_pieces_strip_as_whole() -> None:
    rnd = random.Random(13)
    whole = strip_queries(MIXED * 5)
    for _ in range(200):
        stripper = QueryStripper()
        data, got = MIXED * 5, b""
        while data:
            n = rnd.randint(1, 12)
            got += stripper.feed(data[:n])
            data = data[n:]
        assert got + stripper.finish() == whole


@pytest.mark.parametrize(
    "head", [b"6n", b"[6n", b";?\x07", b"11;?\x1b\\", b"\\", b"$qm\x1b\\", b"?u"]
)
def test_a_replay_starting_inside_a_sequence_passes_its_fragment(head: bytes) -> None:
    """The head of a sequence was dropped with the oldest output: what is
    left is text to the terminal, which answers nothing; it passes as is."""
    body, tail = guard_replay(head + b"rest\x1b[6n.")
    assert (body, tail) == (head + b"rest.", b"")


@pytest.mark.parametrize(
    ("replay", "body", "tail"),
    [
        (b"abc", b"abc", b""),
        (b"abc\x1b", b"abc", b"\x1b"),
        (b"abc\x1b[", b"abc", b"\x1b["),
        (b"abc\x1b[6", b"abc", b"\x1b[6"),
        (b"abc\x1b[1;2", b"abc", b"\x1b[1;2"),
        (b"abc\x1b(", b"abc", b"\x1b("),
        (b"abc\x1b]11;?", b"abc", b"\x1b]11;?"),
        (b"abc\x1b]11;?\x1b", b"abc", b"\x1b]11;?\x1b"),
        (b"abc\x1bP$qm\x1b", b"abc", b"\x1bP$qm\x1b"),
        (b"abc\x1b]0;t\x07\x1b", b"abc\x1b]0;t\x07", b"\x1b"),
        (b"\x1b[6nabc\x1b[m", b"abc\x1b[m", b""),
    ],
)
def test_guard_replay_holds_back_an_unfinished_sequence(
    replay: bytes, body: bytes, tail: bytes
) -> None:
    """The sentinel goes between body and tail, with the terminal's parser
    at rest; live output finishes the tail."""
    assert guard_replay(replay) == (body, tail)
    assert unfinished_at(replay) == len(replay) - len(tail)


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
    pieces = QueryStripper()
    rnd = random.Random(len(raw))
    got, rest = b"", raw
    while rest:
        n = rnd.randint(1, 300)
        got += pieces.feed(rest[:n])
        rest = rest[n:]
    assert got + pieces.finish() == stripped


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
    assert f.feed(b"\x1b[2;2Rk\x1b[?62;22c\x1b[2;2Rl") == b"k\x1b[2;2Rl"
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
    assert f.feed(b"\x1b[2;2R") == b"\x1b[2;2R"
    assert f.feed(b"a\x1b[?6") == b"a"  # could be the answer: held
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


# --- the reset -----------------------------------------------------------------------

COMMON_RESET = [
    b"\x1b[0m",
    b"\x1b[?25h",
    b"\x1b[?1l",
    b"\x1b>",
    b"\x1b[?1000l",
    b"\x1b[?1002l",
    b"\x1b[?1003l",
    b"\x1b[?1005l",
    b"\x1b[?1006l",
    b"\x1b[?1015l",
    b"\x1b[?1004l",
    b"\x1b[?2004l",
    b"\x1b[r",
]


def test_the_reset_on_the_main_screen_leaves_no_screen_and_keeps_the_cursor() -> None:
    modes = ScreenModes()
    modes.feed(b"\x1b[?1049h\x1b[?1h\x1b=text\x1b[?1049l more")
    reset = modes.reset()
    for piece in COMMON_RESET:
        assert piece in reset
    assert b"1049" not in reset and b"1047" not in reset and b"?47" not in reset
    assert b"\x1b[<" not in reset and b"\x1b[>4" not in reset
    # The scroll region's reset homes the cursor: saved and restored around it.
    assert reset.index(b"\x1b7") < reset.index(b"\x1b[r") < reset.index(b"\x1b8")


@pytest.mark.parametrize("mode", [47, 1047, 1049])
def test_the_alternate_screen_is_left_the_way_it_was_entered(mode: int) -> None:
    modes = ScreenModes()
    modes.feed(b"\x1b[?%dh" % mode)
    assert modes.alternate == mode
    reset = modes.reset()
    assert reset.startswith(b"\x1b[?%dl" % mode)
    assert reset.index(b"\x1b[?%dl" % mode) < reset.index(b"\x1b7")


def test_modes_are_followed_across_pieces_and_in_multi_mode_sequences() -> None:
    data = b"x\x1b[?1000;1049;1006hdraw\x1b[?25l"
    for cut in range(len(data) + 1):
        modes = ScreenModes()
        modes.feed(data[:cut])
        modes.feed(data[cut:])
        assert modes.alternate == 1049, cut
    modes.feed(b"\x1bc")  # RIS
    assert modes.alternate == 0


def test_kitty_flags_are_popped_on_the_screen_that_pushed_them() -> None:
    modes = ScreenModes()
    modes.feed(b"\x1b[>1u")  # the session's shell, on the main screen
    modes.feed(b"\x1b[?1049h\x1b[>11u\x1b[>1u")  # an editor, on the alternate one
    reset = modes.reset()
    # Popped on the alternate screen, left, popped on the main screen.
    assert reset.startswith(b"\x1b[<99u\x1b[?1049l\x1b7\x1b[<99u")
    popped = ScreenModes()
    popped.feed(b"\x1b[>1u\x1b[<u")
    assert b"\x1b[<" not in popped.reset()
    changed = ScreenModes()
    changed.feed(b"\x1b[=5u")
    assert b"\x1b[<99u" in changed.reset()


def test_modify_other_keys_is_put_back_if_it_was_set() -> None:
    modes = ScreenModes()
    modes.feed(b"\x1b[>4;2m")
    assert b"\x1b[>4m" in modes.reset()
    modes.feed(b"\x1b[>4;m")  # vim's own reset on exit
    assert b"\x1b[>4m" not in modes.reset()


def test_pyte_shows_the_status_line_on_the_main_screen_where_the_cursor_was() -> None:
    screen = pyte.Screen(40, 6)
    stream = pyte.ByteStream(screen)
    shown = b"$ attach\r\n\x1b[2;5r\x1b[?25l\x1b[5;1Hfull screen"
    stream.feed(shown)
    modes = ScreenModes()
    modes.feed(shown)
    stream.feed(modes.reset() + b"\r\n[detached]")
    assert screen.cursor.y == 5 and screen.display[5].rstrip() == "[detached]"
    assert not screen.cursor.hidden
    assert screen.margins is None or (screen.margins.top, screen.margins.bottom) == (0, 5)


def test_the_sentinel_is_da1() -> None:
    assert SENTINEL == b"\x1b[c"
    assert strip_queries(SENTINEL) == b""
