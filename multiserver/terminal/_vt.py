"""A terminal's screen as a model (pure): pyte's VT screen, fed what a
replay writes, with what tmux does besides; and a line of it as text.

pyte is the well-kept VT model for Python: a second terminal emulator of
our own would be a large body of code to get right. It is fed only what a
replay would write (``for_terminal``: the one table of what draws, read by
the one parser), so that what pyte reads amiss never reaches it: a DCS
string (pyte draws it as text), a query, ``CSI ? Pm m``. What a replay
keeps and pyte still reads amiss is rewritten first (``_for_pyte``):
``CSI > 4;1 m`` (pyte takes it for bold and underline) and the kitty
keyboard's ``CSI > 1 u`` are left out, colons in an SGR become what pyte
reads.

``Screen`` adds what tmux does and pyte does not: the alternate screen
(entered blank; left for the screen it hid, and for the cursor it had
when left by 1049);
history (the lines scrolled off the whole screen, and a clear's lines, as
tmux's ``scroll-on-clear``); RIS and ``CSI 3 J`` (``feed`` hands them over:
a replay drops both); erasing whole cells to the background colour in
effect (pyte erases with every attribute, and only cells it has
stored); colours kept as the program chose them (a palette
index stays one, not pyte's RGB of it); zero-width characters pyte would
stop drawing at (a joiner in an emoji, a variation selector).
"""

from __future__ import annotations

import copy
import re
from collections import defaultdict, deque
from collections.abc import Iterator

import pyte
from pyte import charsets as cs, modes as mo
from pyte.screens import Char, Cursor, Margins, StaticDefaultDict, wcwidth

from multiserver.terminal._replay import for_terminal

Line = StaticDefaultDict[int, Char]

_ALTERNATE = frozenset({47, 1047, 1049})
_REVERSE_VIDEO = 5  # DECSCNM: a replay only ever resets it; pyte's reset rewrites every line
# Zero-width characters that are not combining marks.
_ZERO_WIDTH = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f\ufeff]")
_MISREAD = re.compile("\x1b\\[[<=>][0-9;]*[a-zA-Z]")
_SUB_PARAMS = re.compile("\x1b\\[([0-9;]*:[0-9;:]*)m")
# What a replay drops and the model is handed: RIS, and CSI 3 J.
_RESETS = re.compile(rb"\x1bc|\x1b\[3J")


class Screen(pyte.Screen):
    """pyte's screen with what tmux has besides (the module's docstring).
    ``history``: the most lines kept above the screen (None: all; 0: none)."""

    def __init__(self, cols: int, rows: int, history: int | None) -> None:
        self.kept: deque[Line] = deque(maxlen=history)
        self._keeping = history != 0
        self._hidden: tuple[dict[int, Line], Cursor] | None = None
        self._started = False
        super().__init__(cols, rows)
        self._started = True

    @property
    def cursor_shown(self) -> bool:
        return mo.DECTCEM in self.mode

    def _blank(self) -> defaultdict[int, Line]:
        return defaultdict(lambda: StaticDefaultDict(self.default_char))

    def reset(self) -> None:
        """RIS: the screen cleared (into history), the alternate left; the
        title stays, as in tmux. G1 is ASCII until set, as in tmux."""
        if self._started:
            if self._hidden is not None:
                self.buffer, self._hidden = self._hidden[0], None
            self._keep_screen()
        title = getattr(self, "title", "")
        super().reset()
        self.title, self.g1_charset = title, cs.LAT1_MAP

    def forget_history(self) -> None:
        self.kept.clear()

    def _keep_screen(self) -> None:
        """A clear of the main screen keeps its lines in history, up to the
        last one that is not blank (tmux's ``scroll-on-clear``)."""
        if not self._keeping or self._hidden is not None:
            return
        written = [
            y for y, line in self.buffer.items() if any(c.data != " " for c in line.values())
        ]
        self.kept.extend(self.buffer[y] for y in range(max(written, default=-1) + 1))
        self.buffer = self._blank()  # erased in place, the kept lines would go too

    def index(self) -> None:
        top, bottom = self.margins or Margins(0, self.lines - 1)
        if (
            self._keeping
            and self._hidden is None
            and self.cursor.y == bottom
            and (top, bottom) == (0, self.lines - 1)
        ):
            self.kept.append(self.buffer[0])
        super().index()

    def _erased(self) -> Char:
        """What an erased cell holds: a blank with the background colour in
        effect, as tmux and xterm erase (pyte: every attribute, and only in
        the cells it has stored)."""
        return self.default_char._replace(bg=self.cursor.attrs.bg)

    def erase_in_display(self, how: int = 0, *args: object, **kwargs: object) -> None:
        if how == 2 or (how == 0 and (self.cursor.x, self.cursor.y) == (0, 0)):
            self._keep_screen()
        if how == 0:
            whole = range(self.cursor.y + 1, self.lines)
        elif how == 1:
            whole = range(self.cursor.y)
        else:
            whole = range(self.lines)
        for y in whole:
            self.buffer[y] = StaticDefaultDict(self._erased())
        if how in (0, 1):
            self.erase_in_line(how)

    def erase_in_line(self, how: int = 0, private: bool = False) -> None:
        if how == 0:
            span = range(self.cursor.x, self.columns)
        elif how == 1:
            span = range(min(self.cursor.x + 1, self.columns))
        else:
            span = range(self.columns)
        self._erase(span)

    def erase_characters(self, count: int | None = None) -> None:
        self._erase(range(self.cursor.x, min(self.cursor.x + (count or 1), self.columns)))

    def _erase(self, span: range) -> None:
        line, erased = self.buffer[self.cursor.y], self._erased()
        for x in span:
            line[x] = erased

    def set_mode(self, *modes: int, **kwargs: object) -> None:
        super().set_mode(*self._modes(True, modes, kwargs.get("private")), **kwargs)

    def reset_mode(self, *modes: int, **kwargs: object) -> None:
        super().reset_mode(*self._modes(False, modes, kwargs.get("private")), **kwargs)

    def _modes(self, on: bool, modes: tuple[int, ...], private: object) -> tuple[int, ...]:
        """The modes left for pyte once the alternate screen is switched."""
        if not private:
            return modes
        for mode in modes:
            if mode in _ALTERNATE:
                self._alternate(on, mode)
        return tuple(m for m in modes if m not in _ALTERNATE and m != _REVERSE_VIDEO)

    def _alternate(self, on: bool, mode: int) -> None:
        """Entered: blank, the main screen and the cursor kept; left: the
        main screen back, and the cursor with its attributes if left by
        1049 (as tmux does)."""
        if on and self._hidden is None:
            self._hidden = (self.buffer, copy.copy(self.cursor))
            self.buffer = self._blank()
        elif not on and self._hidden is not None:
            self.buffer, cursor = self._hidden
            self._hidden = None
            if mode == 1049:
                self.cursor = cursor
                self.ensure_hbounds()
                self.ensure_vbounds()

    def draw(self, data: str) -> None:
        super().draw(_ZERO_WIDTH.sub("", data))

    def select_graphic_rendition(self, *params: int, **kwargs: object) -> None:
        """pyte's, but for the extended colours: kept as chosen (``5;N``,
        ``2;R;G;B``), not as pyte's RGB of them."""
        rest = list(params)
        plain: list[int] = []
        while rest:
            code = rest.pop(0)
            if code in (38, 48) and rest and rest[0] in (2, 5):
                width = 4 if rest[0] == 2 else 2
                colour, rest = rest[:width], rest[width:]
                if len(colour) == width:
                    if plain:
                        super().select_graphic_rendition(*plain)
                        plain = []
                    chosen = ";".join(str(n) for n in colour)
                    was = self.cursor.attrs
                    self.cursor.attrs = (
                        was._replace(fg=chosen) if code == 38 else was._replace(bg=chosen)
                    )
                continue
            plain.append(code)
        if plain or not params:
            super().select_graphic_rendition(*plain)


# --- feeding it --------------------------------------------------------------------


def shown(data: bytes) -> str:
    """What of ``data`` a replay writes, as text (RIS and CSI 3 J apart)."""
    return for_terminal(data)[0].decode("utf-8", "replace")


def _semicolons(found: re.Match[str]) -> str:
    """An SGR with sub-parameters (``38:2::R:G:B``, ``4:3``) in the form
    pyte reads: colours with semicolons, an underline's style as underline,
    the underline's colour (58) left out."""
    out: list[str] = []
    for field in found[1].split(";"):
        parts = field.split(":")
        if parts[0] in ("38", "48") and len(parts) > 2:
            if parts[1] == "5":
                out += parts[:3]
            elif parts[1] == "2":
                out += [parts[0], "2", *parts[-3:]]
        elif parts[0] == "4":
            out.append("24" if parts[1:] == ["0"] else "4")
        elif parts[0] != "58":
            out.append(parts[0])
    return f"\x1b[{';'.join(out)}m"


def _for_pyte(text: str) -> str:
    text = _MISREAD.sub("", text)
    return _SUB_PARAMS.sub(_semicolons, text) if ":" in text else text


def feed(screen: Screen, data: bytes, replayed: str | None = None) -> None:
    """``data`` (a program's output) into ``screen``: what a replay writes
    of it (``replayed``, if that was read already), RIS and CSI 3 J handed
    over between."""
    stream = pyte.Stream(screen)
    stream.use_utf8 = False  # character sets (line drawing) as a terminal has them
    if replayed is not None and _RESETS.search(data) is None:
        stream.feed(_for_pyte(replayed))
        return
    pos = 0
    for found in _RESETS.finditer(data):
        stream.feed(_for_pyte(shown(data[pos : found.start()])))
        if found[0] == b"\x1bc":
            screen.reset()
        else:
            screen.forget_history()
        pos = found.end()
    stream.feed(_for_pyte(shown(data[pos:])))


# --- a line as text ------------------------------------------------------------------

_NAMES = ("black", "red", "green", "brown", "blue", "magenta", "cyan", "white")
_TEXT_ATTRS = (
    ("bold", 1),
    ("italics", 3),
    ("underscore", 4),
    ("blink", 5),
    ("reverse", 7),
    ("strikethrough", 9),
)
_PLAIN = Char(" ")


def _colour(value: str, base: int) -> str:
    """An SGR's parameters for a colour of the model (``base``: 30
    foreground, 40 background); "" for the default."""
    if value in _NAMES:
        return str(base + _NAMES.index(value))
    if value.startswith("bright") and value[6:] in _NAMES:
        return str(base + 60 + _NAMES.index(value[6:]))
    if value[:2] in ("5;", "2;"):
        return f"{base + 8};{value}"
    return ""  # the default (or an RGB pyte made of what the model never hands it)


def _sgr(cell: Char) -> str:
    codes = ["0", *(str(n) for name, n in _TEXT_ATTRS if getattr(cell, name))]
    codes += [c for c in (_colour(cell.fg, 30), _colour(cell.bg, 40)) if c]
    return f"\x1b[{';'.join(codes)}m"


def _cells(line: Line, cols: int) -> Iterator[Char]:
    """The cells of a line that show a character (a wide one's second cell
    is none)."""
    x = 0
    while x < cols:
        cell = line[x]
        yield cell
        x += 2 if cell.data and wcwidth(cell.data[0]) == 2 else 1


def _shows(cell: Char) -> bool:
    """Whether a cell shows anything: a character, or a colour behind it."""
    return cell.data != " " or cell.bg != "default" or cell.reverse or cell.underscore


def line_text(line: Line, cols: int, styled: bool) -> str:
    """One line as text, its trailing blanks left out (as tmux does);
    ``styled``: with an SGR wherever the attributes change, and a reset at
    its end if they are not the default there (blanks with a colour behind
    them are kept)."""
    cells = list(_cells(line, cols))
    if not styled:
        return "".join(c.data for c in cells).rstrip(" ")
    while cells and not _shows(cells[-1]):
        cells.pop()
    out: list[str] = []
    current = _PLAIN
    for cell in cells:
        style = cell._replace(data=" ")
        if style != current:
            out.append(_sgr(style))
            current = style
        out.append(cell.data)
    if current != _PLAIN:
        out.append("\x1b[0m")
    return "".join(out)
