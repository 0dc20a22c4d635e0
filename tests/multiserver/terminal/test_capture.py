"""The screen as text (``multiserver.terminal._capture`` and its model,
``_vt``): what a terminal shows after an output, where rendering starts,
and that starting there never changes what is rendered (a property,
against the same model fed the whole output). Real programs against
tmux: tests/cli/test_capture.py."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, given, settings, strategies as st

from multiserver.terminal._capture import (
    Capture,
    Marks,
    Start,
    carried,
    line_cut,
    line_local,
    marks,
    render,
    start_of,
)
from multiserver.terminal._vt import Screen, feed, line_text

# --- what is shown ------------------------------------------------------------------


def test_an_erased_line_shows_what_was_written_after_it() -> None:
    capture = render(b"A\x1b[2K\rB", 3, 10)
    assert capture.lines == ("B", "", "")
    assert (capture.cursor_row, capture.cursor_col) == (0, 1)


def test_trailing_blanks_are_left_out_and_every_row_is_a_line() -> None:
    capture = render(b"a  b   \r\n\r\n  c ", 4, 10)
    assert capture.lines == ("a  b", "", "  c", "")
    assert capture.text() == "a  b\n\n  c\n\n"


def test_a_wide_character_is_one_character() -> None:
    capture = render("中文 x\r\nab".encode(), 2, 10)
    assert capture.lines == ("中文 x", "ab")


def test_zero_width_characters_do_not_stop_a_line() -> None:
    # pyte stops drawing a run at a joiner or a variation selector.
    capture = render("a\u200db \u2764\ufe0f c".encode(), 1, 20)
    assert capture.lines == ("ab \u2764 c",)


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (b"\x1b[31mred\x1b[0m plain", "\x1b[0;31mred\x1b[0m plain"),
        (b"\x1b[1;4;7mx\x1b[m", "\x1b[0;1;4;7mx\x1b[0m"),
        (b"\x1b[92;44mx", "\x1b[0;92;44mx\x1b[0m"),
        # Extended colours stay as the program chose them.
        (b"\x1b[38;5;196mx\x1b[48;5;1my", "\x1b[0;38;5;196mx\x1b[0;38;5;196;48;5;1my\x1b[0m"),
        (b"\x1b[38;2;1;2;3mx", "\x1b[0;38;2;1;2;3mx\x1b[0m"),
        (b"\x1b[38:2::1:2:3mx\x1b[4:3my", "\x1b[0;38;2;1;2;3mx\x1b[0;4;38;2;1;2;3my\x1b[0m"),
        # modifyOtherKeys is no SGR (pyte takes it for bold and underline).
        (b"\x1b[>4;1mx", "x"),
        # A coloured blank shows; a plain one is left out.
        (b"a\x1b[42m  \x1b[0m  ", "a\x1b[0;42m  \x1b[0m"),
    ],
)
def test_styled_lines_carry_their_attributes(output: bytes, line: str) -> None:
    assert render(output, 1, 20, styled=True).lines == (line,)
    assert render(output, 1, 20).lines[0] == re.sub("\x1b\\[[0-9;]*m", "", line).rstrip(" ")


def test_what_does_not_draw_never_reaches_the_screen() -> None:
    # A DCS string (pyte would draw it), a query, a private SGR.
    capture = render(b"a\x1bP+q544e\x1b\\b\x1b[6nc\x1b[?4md", 1, 10)
    assert capture.lines == ("abcd",)


def test_the_title_and_the_cursor() -> None:
    capture = render(b"\x1b]2;vim - notes\x07\x1b[?25l\x1b[3;4Hx", 5, 10)
    assert capture.title == "vim - notes"
    assert (capture.cursor_row, capture.cursor_col, capture.cursor_visible) == (2, 4, False)


def test_the_alternate_screen_is_left_for_the_screen_it_hid() -> None:
    shell = b"$ ls\r\nnotes\r\n$ vim\r\n"
    vim = b"\x1b[?1049h\x1b[H\x1b[2Jvim's screen\x1b[5;1H:q"
    assert render(shell + vim, 5, 20).lines[0] == "vim's screen"
    left = render(shell + vim + b"\x1b[?1049l$ ", 5, 20)
    assert left.lines == ("$ ls", "notes", "$ vim", "$", "")
    assert (left.cursor_row, left.cursor_col) == (3, 2)  # 1049: the cursor back too


def test_ris_clears_and_keeps_the_title() -> None:
    capture = render(b"\x1b]0;t\x07old\r\nold\x1b[31m\x1bcnew", 3, 10, styled=True)
    assert capture.lines == ("new", "", "")
    assert capture.title == "t"


# --- history ----------------------------------------------------------------------------


def _lines(n: int) -> bytes:
    return b"".join(b"line %d\r\n" % k for k in range(n))


def test_history_is_what_scrolled_off_above_the_screen() -> None:
    capture = render(_lines(100), 5, 20, history=3)
    assert capture.history == 3
    assert capture.lines == (*(f"line {k}" for k in range(93, 100)), "")
    assert capture.lines[3:] == render(_lines(100), 5, 20).lines
    assert render(_lines(3), 5, 20, history=10).history == 0
    assert render(_lines(100), 5, 20, history=None).history == 96


def test_a_clear_keeps_the_screen_in_history_and_csi_3_j_forgets_it() -> None:
    # As tmux's scroll-on-clear; ``clear`` writes CSI 3 J after the clear.
    cleared = render(b"one\r\ntwo\r\n\x1b[H\x1b[2Jthree", 3, 10, history=5)
    assert cleared.lines == ("one", "two", "three", "", "")
    assert render(b"one\r\ntwo\r\n\x1b[H\x1b[2J\x1b[3Jthree", 3, 10, history=5).history == 0


def test_the_alternate_screen_adds_no_history() -> None:
    capture = render(b"\x1b[?1049h" + _lines(20), 3, 10, history=5)
    assert capture.history == 0


# --- where rendering starts -----------------------------------------------------------


def test_the_cuts_are_the_points_that_leave_the_shown_screen_blank() -> None:
    clear, enter, leave = b"\x1b[H\x1b[2J", b"\x1b[?1049h", b"\x1b[?1049l"
    data = b"a" + clear + b"b" + enter + b"c" + clear + b"d" + leave + b"e"
    # The alternate screen was left: its clear is not the shown screen's.
    left = data.index(leave) + len(leave)
    assert marks(data) == Marks([(1, False)], False, [0, left], left)
    # Entered twice, once in effect; its entering is no cut (the cursor stays).
    data += enter + b"f" + enter + clear + b"g"
    found = marks(data)
    assert (found.cuts, found.alternate) == ([(data.rindex(clear), True), (1, False)], True)
    found = marks(data + b"\x1bc")
    assert (found.cuts, found.alternate) == ([(len(data), False), (1, False)], False)
    assert found.restored_before(len(data) + 2) == len(data) + 2
    # A clear whose cursor is not known is none.
    assert marks(b"x\x1b[2Jy").cuts == []
    assert marks(b"x\x1b[2J\x1b[3;4Hy").cuts == [(1, False)]


def test_output_that_only_scrolls_starts_at_a_line() -> None:
    data = _lines(1000)
    start = start_of(data, 24, 0)
    assert data[start.at :].count(b"\n") == 48 and data[start.at - 2 : start.at] == b"\r\n"
    assert start.replayed is not None and start.replayed.startswith("line 952")
    assert line_cut(b"a\nb\r\nc\n", 5) is None
    # Something that moves up after it: the line cut would not be exact.
    assert not line_local("x\r\n\x1b[A") and not line_local("\x1b[?1049h")
    assert line_local("\x1b[31mx\x1b[K\r\n\x1b[?25l\x1b[?2004h")
    assert start_of(data + b"\x1b[2A", 24, 0) == Start(0)


def test_what_the_start_cuts_off_and_still_counts_is_carried() -> None:
    data = b"\x1b]0;old\x07\x1b]0;title\x07\x1b[?25l\x1b[1m\x1b[0m\x1b[31m\x1b[4mtext"
    start = Start(data.index(b"text"))
    assert carried(data, start) == b"\x1b]0;title\x07\x1b[?25l\x1b[0m\x1b[31m\x1b[4m"
    assert carried(b"\x1b[?25l\x1bcx", Start(3, restored=2)) == b""  # RIS gave them back
    # Attributes given back with the cursor are taken as the defaults.
    assert carried(b"\x1b[31m\x1b8x", Start(8, restored=7)) == b""
    assert carried(b"x\x1b[H\x1b[2J", Start(1, alternate=True)) == b"\x1b[?1047h"


# Pieces of output, as programs write them: text that wraps, lines, the
# clears and switches the cuts are made at, moves, attributes, titles.
PIECES = [
    b"word ",
    b"a long line that wraps past the edge of the screen ",
    b"\r\n",
    b"\r\n\r\n\r\n\r\n\r\n\r\n",
    b"\r",
    b"\x1b[K",
    b"\x1b[H\x1b[2J",
    b"\x1b[H\x1b[J",
    b"\x1b[2J\x1b[3;5H",
    b"\x1b[3J",
    b"\x1b[?1049h",
    b"\x1b[?1049l",
    b"\x1b[?47h",
    b"\x1b[?47l",
    b"\x1bc",
    b"\x1b[A",
    b"\x1b[2;3H",
    b"\x1b[31m",
    b"\x1b[1;44m",
    b"\x1b[0m",
    b"\x1b]0;a title\x07",
    b"\x1b[?25l",
    b"\x1b[?25h",
]


def _whole(data: bytes, rows: int, cols: int, history: int, styled: bool) -> Capture:
    """The same model fed the whole output: what every start must give."""
    screen = Screen(cols, rows, history)
    feed(screen, data)
    above = list(screen.kept)
    lines = [*above, *(screen.buffer[y] for y in range(rows))]
    return Capture(
        rows,
        cols,
        tuple(line_text(line, cols, styled) for line in lines),
        len(above),
        min(screen.cursor.y, rows - 1),
        min(screen.cursor.x, cols - 1),
        screen.cursor_shown,
        screen.title,
        styled,
    )


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=120),
    rows=st.integers(1, 6),
    history=st.sampled_from([0, 0, 1, 4]),
    styled=st.booleans(),
)
def test_where_rendering_starts_never_changes_what_is_rendered(
    pieces: list[bytes], rows: int, history: int, styled: bool
) -> None:
    # What a start does not follow (docs/capture.md): the attributes a
    # cursor saved gets back are taken as the defaults programs save.
    coloured = False
    for piece in pieces:
        coloured = piece in (b"\x1b[31m", b"\x1b[1;44m") or (coloured and piece != b"\x1b[0m")
        assume(not (coloured and piece in (b"\x1b[?1049h", b"\x1b[?47h")))
    data = b"".join(pieces)
    assert render(data, rows, 12, history=history, styled=styled) == _whole(
        data, rows, 12, history, styled
    )


# --- the JSON --------------------------------------------------------------------------


def test_the_json_reads_back_and_nothing_else_does() -> None:
    capture = render(b"\x1b]0;t\x07" + _lines(10), 3, 8, history=2, styled=True)
    shape = capture.as_json()
    assert json.loads(json.dumps(shape)) == shape
    assert set(shape) == {
        "schema",
        "rows",
        "cols",
        "history",
        "styled",
        "lines",
        "cursor",
        "title",
    }
    assert shape["schema"] == 1 and shape["cursor"] == {"row": 2, "col": 0, "visible": True}
    assert Capture.from_json(shape) == capture
    for bad in [
        {**shape, "schema": 2},
        {**shape, "extra": 1},
        {**shape, "rows": True},
        {**shape, "rows": 4},  # lines and sizes do not add up
        {**shape, "lines": [1, 2, 3, 4, 5]},
        {**shape, "cursor": {"row": 0, "col": 0}},
        {**shape, "cursor": {"row": 9, "col": 0, "visible": True}},
        {k: v for k, v in shape.items() if k != "title"},
        [shape],
    ]:
        with pytest.raises(ValueError):
            Capture.from_json(bad)


def test_a_size_that_is_no_screen_is_refused() -> None:
    with pytest.raises(ValueError):
        render(b"", 0, 80)
    with pytest.raises(ValueError):
        render(b"", 24, 80, history=-1)
