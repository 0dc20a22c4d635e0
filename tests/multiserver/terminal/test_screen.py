"""The one terminal reset (``multiserver.ScreenModes``, ``screen_reset``),
written wherever a program's screen ends: what it contains, in what order,
and what a terminal is left with after it (pyte here; tmux in
``tests/cli/attach/test_attach_tmux.py``)."""

from __future__ import annotations

import pyte
import pytest

from multiserver.internal import ScreenModes, screen_reset

ST = b"\x1b\\"

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
    assert reset.startswith(ST + b"\x1b[?%dl" % mode)
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
    assert reset.startswith(ST + b"\x1b[<99u\x1b[?1049l\x1b7\x1b[<99u")
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


# What programs set, and how each is seen in pyte once the reset is written.
MODES_SET = b"".join(
    [
        b"\x1b[?1049h",  # alternate screen
        b"\x1b[?25l",  # cursor hidden
        b"\x1b[?1h\x1b=",  # application cursor keys and keypad
        b"\x1b[?1000h\x1b[?1006h\x1b[?1004h\x1b[?2004h",  # mouse, focus, paste
        b"\x1b[?5h",  # reverse video
        b"\x1b[?6h",  # origin mode
        b"\x1b[4h",  # insert mode
        b"\x1b[2h\x1b[12h\x1b[20h",  # keyboard locked, local echo, Enter sends CR LF
        b"\x1b[?8l",  # keys do not repeat
        b"\x1b[2;5r",  # scroll region
        b"\x1b(0\x0e",  # line drawing
        b"\x1b[1;7;31m",  # bold, reverse, red
        b"\x1b]11;rgb:ff/00/00\x1b\\",  # background colour
    ]
)


@pytest.mark.parametrize("known", [True, False], ids=["followed", "unknown"])
def test_pyte_is_left_with_no_mode_a_program_set(known: bool) -> None:
    screen = pyte.Screen(40, 8)
    stream = pyte.ByteStream(screen)
    stream.feed(b"\x1b[?8h")  # keys repeat: how xterm and kitty start (pyte does not)
    before = (screen.mode.copy(), screen.cursor.hidden)
    stream.feed(b"$ prog\r\n" + MODES_SET + b"drawn")
    stream.feed(screen_reset(MODES_SET if known else None) + b"\r\n[detached]")
    if not known:
        # Unknown, origin mode is left on (``ScreenModes.unknown``): with the
        # scroll region the whole screen it positions as if off.
        screen.mode.discard(pyte.modes.DECOM)
    assert (screen.mode, screen.cursor.hidden) == before
    assert screen.margins is None or (screen.margins.top, screen.margins.bottom) == (0, 7)
    assert screen.cursor.attrs == pyte.screens.Char(" ")  # plain attributes
    assert screen.charset == 0 and screen.g0_charset == pyte.charsets.LAT1_MAP
    # pyte has no alternate screen: where the line lands is tmux's to show.
    assert any(line.startswith("[detached]") for line in screen.display)


def test_the_reset_first_ends_an_open_string() -> None:
    """kitty does not end a string on a bare ESC: without ST first, an
    unterminated ``ESC ] 0 ;`` takes the whole reset (and the status line)
    for its text."""
    for modes in (ScreenModes(), ScreenModes.unknown()):
        assert modes.reset().startswith(ST)
    screen = pyte.Screen(40, 4)
    stream = pyte.ByteStream(screen)
    stream.feed(b"\x1b[?25l\x1b]0;unterminated")
    stream.feed(ScreenModes().reset() + b"[detached]")
    assert "[detached]" in screen.display[0] and not screen.cursor.hidden


def test_the_reset_contains_every_mode_of_the_table() -> None:
    """The table of issue 24: each piece is in the reset whatever was shown."""
    reset = ScreenModes().reset()
    for piece in [
        b"\x1b[?25h", b"\x1b[?1l", b"\x1b>", b"\x1b[?1000l", b"\x1b[?1003l", b"\x1b[?1006l",
        b"\x1b[?1004l", b"\x1b[?2004l", b"\x1b]110\x1b\\", b"\x1b]111\x1b\\",
        b"\x1b]112\x1b\\", b"\x1b[?5l", b"\x1b[r", b"\x1b(B\x0f", b"\x1b[0m",
    ]:  # fmt: skip
        assert piece in reset, piece
    unknown = ScreenModes.unknown().reset()
    for piece in [b"\x1b[<99u", b"\x1b[?1049l", b"\x1b[>4m"]:
        assert piece in unknown and piece not in reset


def test_origin_mode_set_on_the_main_screen_is_reset_after_the_cursor_is_back() -> None:
    modes = ScreenModes()
    modes.feed(b"\x1b[?6h")
    reset = modes.reset()
    # ESC 8 restores origin mode with the cursor: reset after it.
    assert reset.index(b"\x1b8") < reset.index(b"\x1b[?6l")
    modes.feed(b"\x1b[?6l")
    assert b"?6l" not in modes.reset()


def test_unknown_modes_leave_the_alternate_screen_from_a_saved_cursor() -> None:
    """Nobody here followed what was shown (a relay's output): on the main
    screen, leaving the alternate one restores the cursor saved just before
    (xterm keeps one a screen), so the lines that follow stay in place."""
    reset = ScreenModes.unknown().reset()
    assert reset.startswith(ST + b"\x1b7\x1b[<99u\x1b[?1049l")
    assert b"\x1b[?6l" not in reset  # it would home the cursor: see ScreenModes.unknown


# --- the reset is derived from the one table of what draws (issue 34) --------------


def test_every_mode_of_the_table_is_given_back_by_the_reset() -> None:
    """Every mode a replay may set, and every mode that traps a person, is
    put back to its safe value whatever was shown; the modes the reset
    follows (the alternate screen, origin mode) once something set them."""
    from multiserver.terminal._draws import MODES

    plain = ScreenModes().reset()
    for mode in MODES:
        if mode.tracked:
            modes = ScreenModes()
            modes.feed(mode.sequence("h" if mode.safe == "l" else "l"))
            assert mode.sequence(mode.safe) in modes.reset(), mode
        else:
            assert mode.sequence(mode.safe) in plain, mode
    for trap in (b"\x1b[2l", b"\x1b[12l", b"\x1b[20l", b"\x1b[4l", b"\x1b[?8h", b"\x1b[?5l"):
        assert trap in plain


@pytest.mark.parametrize("csi", ["\x1b[", "\u009b"], ids=["7-bit", "c1-char"])
def test_modes_set_in_c1_controls_are_followed_too(csi: str) -> None:
    """kitty acts on a CSI written as a C1 control (the character, or the
    raw byte): the alternate screen and kitty flags so set are undone."""
    for data in (f"{csi}?1049h{csi}>1u".encode(), b"\x9b?1049h\x9b>1u"):
        modes = ScreenModes()
        modes.feed(data)
        assert modes.alternate == 1049
        assert modes.reset().startswith(ST + b"\x1b[<99u\x1b[?1049l")
    # A UTF-8 character whose last byte is 9B is no CSI: U+00DB is C3 9B.
    text = ScreenModes()
    text.feed("Û?1049h".encode())
    assert text.alternate == 0
    split = ScreenModes()
    split.feed(b"a\xc2")
    split.feed(b"\x9b?1049h")
    assert split.alternate == 1049


def test_the_cursor_shape_is_given_back_if_something_shown_set_it() -> None:
    modes = ScreenModes()
    assert b"\x1b[0 q" not in modes.reset()
    modes.feed(b"\x1b[5 q")
    assert b"\x1b[0 q" in modes.reset()
    modes.feed(b"\x1b[0 q")
    assert b"\x1b[0 q" not in modes.reset()
    assert b"\x1b[0 q" in ScreenModes.unknown().reset()
