"""What draws: the one table of what a replay may write to a person's
terminal, and of the modes the reset gives back (pure data).

Output kept while nobody watched is written again later, to a terminal the
program never asked anything. A replay (``_replay``) passes only what is in
this table, and drops everything else; the reset (``_screen``) is derived
from the same table, so that every mode a replay may set, leaving unsets.

- **Text**: characters that draw, and the C0 controls a screen needs
  (``CONTROLS``).
- **Control sequences** (``SEQUENCES``): the CSI finals that move the
  cursor, erase (never the terminal's own history, ``CSI 3 J``), insert and
  delete, scroll, set the scroll region, set attributes and the cursor's
  shape, and the kitty keyboard and modifyOtherKeys modes; each with the
  parameters it may take.
- **Modes** (``MODES``), set and reset with ``CSI [?] Pm h/l``: those a
  program keeps on its screen (``kept``: a replay may set or reset them),
  and those that would trap the person (keyboard locked, local echo,
  autorepeat off...): a replay may only put them back to their ``safe``
  value, which the reset writes.
- **Escape sequences** (``ESCAPES``): cursor save and restore, index,
  reverse index, tab stops, keypad modes and character sets.
- **The window title**: OSC 0, 1 or 2, the latest only, its text alone,
  at most ``TITLE_MAX`` characters.

Nothing else: no C1 control in either encoding, no DCS, APC, PM or SOS
string, no OSC but the title, no mode not named here, no query (nothing
in the table is one: ``tests/multiserver/terminal/test_draws.py`` holds it to a
list of every question the terminals met answer).
"""

from __future__ import annotations

# The C0 controls a replay writes: backspace, tab, line feed, vertical tab
# and form feed (line feeds to a terminal), carriage return, shift out and
# in (the G1 and G0 character sets: line drawing). Not BEL (a bell from
# the past), NUL, ENQ (answered) nor the rest.
CONTROLS = frozenset("\b\t\n\x0b\x0c\r\x0e\x0f")

# The largest number a parameter of a kept sequence may be (a count of
# cells or lines, a colour): past it, the sequence is dropped.
PARAM_MAX = 9999
TITLE_MAX = 512
TITLES = frozenset({"0", "1", "2"})


class Sequence:
    """A control sequence a replay keeps: at most ``most`` parameters, the
    first of them one of ``first`` if given; ``sub`` if sub-parameters
    (``:``) may appear. (Plain classes here: ``attach`` reads this table
    before its terminal is raw, and must not pay for ``typing``.)"""

    __slots__ = ("first", "most", "name", "sub")

    def __init__(
        self, name: str, most: int, first: frozenset[int] | None = None, sub: bool = False
    ) -> None:
        self.name, self.most, self.first, self.sub = name, most, first, sub

    def __repr__(self) -> str:
        return f"Sequence({self.name!r})"


def _only(*values: int) -> frozenset[int]:
    return frozenset(values)


# By (private marker, intermediates, final).
SEQUENCES: dict[tuple[str, str, str], Sequence] = {
    ("", "", "@"): Sequence("ICH insert blank characters", 1),
    ("", "", "A"): Sequence("CUU cursor up", 1),
    ("", "", "B"): Sequence("CUD cursor down", 1),
    ("", "", "C"): Sequence("CUF cursor forward", 1),
    ("", "", "D"): Sequence("CUB cursor back", 1),
    ("", "", "E"): Sequence("CNL cursor to a next line", 1),
    ("", "", "F"): Sequence("CPL cursor to a previous line", 1),
    ("", "", "G"): Sequence("CHA cursor to a column", 1),
    ("", "", "H"): Sequence("CUP cursor position", 2),
    ("", "", "I"): Sequence("CHT tab forward", 1),
    # 3 erases the terminal's own history, which is the person's.
    ("", "", "J"): Sequence("ED erase in display", 1, _only(0, 1, 2)),
    ("?", "", "J"): Sequence("DECSED selective erase in display", 1, _only(0, 1, 2)),
    ("", "", "K"): Sequence("EL erase in line", 1, _only(0, 1, 2)),
    ("?", "", "K"): Sequence("DECSEL selective erase in line", 1, _only(0, 1, 2)),
    ("", "", "L"): Sequence("IL insert lines", 1),
    ("", "", "M"): Sequence("DL delete lines", 1),
    ("", "", "P"): Sequence("DCH delete characters", 1),
    ("", "", "S"): Sequence("SU scroll up", 1),
    ("", "", "T"): Sequence("SD scroll down", 1),  # 5 parameters: xterm's mouse highlight
    ("", "", "X"): Sequence("ECH erase characters", 1),
    ("", "", "Z"): Sequence("CBT tab back", 1),
    ("", "", "`"): Sequence("HPA cursor to a column", 1),
    ("", "", "a"): Sequence("HPR cursor right", 1),
    ("", "", "b"): Sequence("REP repeat the last character", 1),
    ("", "", "d"): Sequence("VPA cursor to a line", 1),
    ("", "", "e"): Sequence("VPR cursor down", 1),
    ("", "", "f"): Sequence("HVP cursor position", 2),
    ("", "", "g"): Sequence("TBC clear tab stops", 1, _only(0, 3)),
    ("", "", "m"): Sequence("SGR attributes and colours", 32, sub=True),
    ("", "", "r"): Sequence("DECSTBM scroll region", 2),
    ("", "", "s"): Sequence("SCOSC save the cursor", 0),
    ("", "", "u"): Sequence("SCORC restore the cursor", 0),
    ("", " ", "q"): Sequence("DECSCUSR cursor shape", 1, _only(0, 1, 2, 3, 4, 5, 6)),
    (">", "", "u"): Sequence("kitty keyboard flags pushed", 1),
    ("<", "", "u"): Sequence("kitty keyboard flags popped", 1),
    ("=", "", "u"): Sequence("kitty keyboard flags set", 2),
    (">", "", "m"): Sequence("XTMODKEYS modifyOtherKeys", 2, _only(4)),
}


class Mode:
    """A mode set with ``CSI [?] number h`` and reset with ``... l``.

    ``safe``: the value leaving gives back (``h`` or ``l``), and the only
    one a replay may write unless ``kept``. ``tracked``: the reset writes it
    only if something shown moved it (``_screen.ScreenModes``: leaving the
    alternate screen or origin mode moves the cursor)."""

    __slots__ = ("kept", "name", "number", "private", "safe", "tracked")

    def __init__(
        self, private: bool, number: int, name: str, safe: str, kept: bool, tracked: bool = False
    ) -> None:
        self.private, self.number, self.name = private, number, name
        self.safe, self.kept, self.tracked = safe, kept, tracked

    def __repr__(self) -> str:
        return f"Mode({'?' if self.private else ''}{self.number}: {self.name})"

    def sequence(self, value: str) -> bytes:
        return b"\x1b[%s%d%s" % (b"?" if self.private else b"", self.number, value.encode())


MODES: tuple[Mode, ...] = (
    # What a program keeps on its screen.
    Mode(True, 1, "cursor keys send application codes (DECCKM)", "l", kept=True),
    Mode(True, 6, "origin mode (DECOM)", "l", kept=True, tracked=True),
    Mode(True, 7, "autowrap (DECAWM)", "h", kept=True),
    Mode(True, 25, "cursor shown (DECTCEM)", "h", kept=True),
    Mode(True, 47, "alternate screen", "l", kept=True, tracked=True),
    Mode(True, 66, "keypad sends application codes (DECNKM)", "l", kept=True),
    Mode(True, 9, "mouse reporting, X10", "l", kept=True),
    Mode(True, 1000, "mouse reporting, buttons", "l", kept=True),
    Mode(True, 1002, "mouse reporting, motion with a button down", "l", kept=True),
    Mode(True, 1003, "mouse reporting, all motion", "l", kept=True),
    Mode(True, 1004, "focus reporting", "l", kept=True),
    Mode(True, 1005, "mouse encoding, UTF-8", "l", kept=True),
    Mode(True, 1006, "mouse encoding, SGR", "l", kept=True),
    Mode(True, 1015, "mouse encoding, urxvt", "l", kept=True),
    Mode(True, 1016, "mouse encoding, SGR pixels", "l", kept=True),
    Mode(True, 1047, "alternate screen", "l", kept=True, tracked=True),
    Mode(True, 1049, "alternate screen, cursor saved", "l", kept=True, tracked=True),
    Mode(True, 2004, "bracketed paste", "l", kept=True),
    Mode(True, 2026, "synchronized output", "l", kept=True),
    Mode(False, 4, "insert (IRM)", "l", kept=True),
    # What would trap the person: a replay may only put these back.
    Mode(False, 2, "keyboard locked (KAM)", "l", kept=False),
    # xterm, the terminal met that echoes: set, it echoes what is typed
    # ("SRM (if set, local echo)"), against the VT100's own meaning.
    Mode(False, 12, "local echo (SRM, as xterm reads it)", "l", kept=False),
    Mode(False, 20, "Enter sends CR LF (LNM)", "l", kept=False),
    Mode(True, 5, "reverse video (DECSCNM)", "l", kept=False),
    Mode(True, 8, "keys repeat (DECARM)", "h", kept=False),
    Mode(True, 1001, "mouse reporting, highlight (needs an answer)", "l", kept=False),
)

MODE_BY_NUMBER: dict[tuple[bool, int], Mode] = {(m.private, m.number): m for m in MODES}


# The escape sequences a replay keeps, by (intermediates, final): their names.
ESCAPES: dict[tuple[str, str], str] = {
    ("", "7"): "DECSC save the cursor",
    ("", "8"): "DECRC restore the cursor",
    ("", "D"): "IND index",
    ("", "E"): "NEL next line",
    ("", "M"): "RI reverse index",
    ("", "H"): "HTS set a tab stop",
    ("", "="): "DECKPAM keypad application mode",
    ("", ">"): "DECKPNM keypad numeric mode",
    **{
        (g, charset): f"G{'()*+'.index(g)} character set {name}"
        for g in "()*+"
        for charset, name in (("B", "ASCII"), ("0", "line drawing"), ("A", "British"))
    },
}
# The escape sequence leaving writes for the keypad (``ESC =`` is kept).
KEYPAD_RESET = b"\x1b>"
