"""The screen as text (pure: a program's output and a size in; lines,
cursor and title out): what a terminal of the session's size shows after
that output, as ``tmux capture-pane -p`` prints a pane (``render``). The
terminal is ``_vt``'s model (pyte's screen, and what tmux does besides).

**Where it starts.** A terminal's last screen depends on little of a long
output, and the model reads about a MiB a second: so it starts as late as
it can, and a long buffer costs about what its last screen costs.

- From the latest point that leaves the screen shown at the end blank,
  the cursor's place known (``screen_cuts``): RIS; a clear whose cursor
  is known (``CSI H`` then ``CSI 2 J`` or ``CSI J``, or ``CSI 2 J`` then
  a cursor position), of the main screen or of the alternate screen
  shown at the end (not of one left since). Exact.
- Output that only scrolls (a log, ``cat``) has none: from a line's start
  (after ``CR LF``) with twice the screen's lines after it, if nothing
  after it moves the cursor up or sets a mode that changes where text
  lands (``line_local``): the screen then holds only those lines, however
  it looked before. Exact too.

A program that repaints in place and never clears (``top``, ``watch``,
an ncurses program after its first screen) leaves no such point after
its start: it costs its whole buffer. (A start where only the cursor's
place is known, kept if every cell was written since, was tried: such
programs redraw only what changed, and it never held.)

What the start cuts off and still counts is put back first
(``carried``): the alternate screen, the latest title, the attributes in effect (the SGRs since
the last reset, within 64 KiB; attributes a restored cursor got back are
taken as the defaults), whether the cursor is shown and autowrap. Not
other modes (a scroll region, a character set) set before it. With
history (``-S -N``) the start is the latest blank point with N line feeds
after it; when those scrolled fewer than N lines off (a program that
places its text, an alternate screen), the rendering is done again from
the buffer's start: twice the cost.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from multiserver.terminal._vt import Screen, feed, line_text, shown

SCHEMA = 1

_MARKS = re.compile(
    rb"(?P<ris>\x1bc)"
    rb"|\x1b\[\?(?P<mode>1049|1047|47)(?P<alt>[hl])"
    rb"|(?P<restore>\x1b8|\x1b\[u)"
    rb"|\x1b\[(?:1?(?:;1?)?)?H\x1b\[[02]?J|\x1b\[2J\x1b\[[0-9;]*H"
)
# After a line's start: what moves the cursor up or sets where text lands
# (in a replay's own forms: ``for_terminal``), and the modes that do.
_NOT_LINE_LOCAL = re.compile(
    r"\x1b(?:[78DEM]|\[[0-9;]*[ABEFHJLMSTdefrsu])|\x1b\[(\??)([0-9;]*)[hl]"
)
_PLACING_MODES = frozenset({"6", "7", "47", "1047", "1049"})  # private ones; and IRM, 4
_SGR = re.compile(rb"\x1b\[([0-9;:]*)m")
_TITLE = re.compile(rb"\x1b\][012];[^\x07\x1b]*(?:\x07|\x1b\\)")
_CARRIED_MODES = (b"25", b"7")  # the cursor shown; autowrap
_LOOK_BACK = 64 * 1024  # how far back the attributes in effect are looked for


# --- where to start -----------------------------------------------------------


@dataclass(frozen=True)
class Marks:
    """What one walk through an output finds (``marks``): the points that
    leave the screen shown at its end blank, with the cursor's place
    known, latest first, each with whether it is on the alternate screen;
    whether that screen is shown at the end; where the cursor got its
    attributes back (the ends of RIS, DECRC, leaving the alternate screen
    by 1049), in order; and the end of the last switch of screens (RIS,
    entering or leaving the alternate screen)."""

    cuts: list[tuple[int, bool]]
    alternate: bool
    restores: list[int]
    switched: int = 0

    def restored_before(self, start: int) -> int:
        """The end of the last restore before ``start``, or 0."""
        return self.restores[bisect.bisect_right(self.restores, start) - 1] if start else 0


def marks(data: bytes) -> Marks:
    """The points to start at: RIS, and a clear (of the main screen, or of
    the alternate screen still shown). Which screen each is on is followed
    from the start, as the model does: entering the alternate screen while
    it is shown, or leaving the main screen, does nothing. (Entering it is
    no point: the cursor stays where it was.)"""
    alternate, entered, switched = False, -1, 0
    points: list[tuple[int, bool]] = []
    restores = [0]
    for mark in _MARKS.finditer(data):
        if mark["ris"]:
            alternate, switched = False, mark.end()
            points.append((mark.start(), False))
            restores.append(mark.end())
        elif mark["restore"]:
            restores.append(mark.end())
        elif mark["alt"] == b"h":
            if not alternate:
                alternate, entered, switched = True, mark.start(), mark.end()
        elif mark["alt"] == b"l":
            if alternate:
                switched = mark.end()
                if mark["mode"] == b"1049":
                    restores.append(mark.end())
            alternate = False
        else:
            points.append((mark.start(), alternate))
    # Of the alternate screens, only the one still shown counts.
    cuts = [(at, on) for at, on in reversed(points) if not on or (alternate and at > entered)]
    return Marks(cuts, alternate, restores, switched)


def line_cut(data: bytes, lines: int) -> int | None:
    """The start of a line (after ``CR LF``) with at least ``lines`` line
    feeds after it, or None if ``data`` has none."""
    end = len(data)
    for _ in range(lines):
        end = data.rfind(b"\n", 0, end)
        if end < 0:
            return None
    found = data.rfind(b"\r\n", 0, end)
    return None if found < 0 else found + 2


def line_local(replayed: str) -> bool:
    """Whether ``replayed`` (as a replay writes it) only writes on the line
    the cursor is on and goes down: nothing moves it up, no mode changes
    where text lands."""
    for found in _NOT_LINE_LOCAL.finditer(replayed):
        if found[2] is None:
            return False
        numbers = set(found[2].split(";"))
        if (numbers & _PLACING_MODES) if found[1] else "4" in numbers:
            return False
    return True


@dataclass(frozen=True)
class Start:
    """Where rendering starts (``at``); whether the alternate screen is
    shown there; where the cursor last got its attributes back before it;
    what a replay writes of the rest, when that was read to decide."""

    at: int
    alternate: bool = False
    restored: int = 0
    replayed: str | None = None


def start_of(data: bytes, rows: int, history: int | None) -> Start:
    """Where rendering ``data`` on a screen of ``rows`` starts for the
    screen and ``history`` lines above it (None: all there is) to be as a
    terminal shows them."""
    if history is None:
        return Start(0)
    start, end, feeds = Start(0), len(data), 0
    found = marks(data)
    for pos, on_alternate in found.cuts:
        if on_alternate and history:
            continue  # history comes from the main screen: rendered from there
        feeds += data.count(b"\n", pos, end)
        if feeds >= (history + rows if history else 0):
            start = Start(pos, on_alternate, found.restored_before(pos))
            break
        end = pos
    at_line = line_cut(data, 2 * rows + history)
    if history and at_line is not None and (found.alternate or at_line < found.switched):
        at_line = None  # the screen there may be the alternate one, whose lines are no history
    if at_line is not None and at_line > start.at:
        rest = shown(data[at_line:])
        if line_local(rest):
            return Start(at_line, False, found.restored_before(at_line), rest)
    return start


def carried(data: bytes, start: Start) -> bytes:
    """What of ``data`` before ``start`` still counts after it: the
    alternate screen shown (entering it again there does nothing), the
    latest title, whether the cursor is shown and autowrap (since the last
    RIS), the attributes in effect: the SGRs since the last reset, and
    since the cursor last got its attributes back (as the defaults
    programs save them as; not followed back to where they were saved)."""
    if not start.at:
        return b""
    out = b"\x1b[?1047h" if start.alternate else b""
    title = data.rfind(b"\x1b]", 0, start.at)
    while title >= 0:
        found = _TITLE.match(data, title)
        if found is not None and found.end() <= start.at:
            out += found[0]
            break
        title = data.rfind(b"\x1b]", 0, title)
    since = data.rfind(b"\x1bc", 0, start.at) + 1
    for mode in _CARRIED_MODES:
        at, last = max((data.rfind(b"\x1b[?" + mode + v, since, start.at), v) for v in (b"h", b"l"))
        if at >= 0:
            out += b"\x1b[?" + mode + last
    sgrs = list(_SGR.finditer(data, max(start.restored, start.at - _LOOK_BACK), start.at))
    for k in range(len(sgrs) - 1, -1, -1):
        if sgrs[k][1] in (b"", b"0") or sgrs[k][1].startswith(b"0;"):
            sgrs = sgrs[k:]
            break
    return out + b"".join(s[0] for s in sgrs)


def _screen(data: bytes, rows: int, cols: int, history: int | None) -> Screen:
    start = start_of(data, rows, history)
    screen = Screen(cols, rows, history)
    feed(screen, carried(data, start))
    feed(screen, data[start.at :], start.replayed)
    if history and len(screen.kept) < history and start.at:
        screen = Screen(cols, rows, history)  # fewer than asked: from the buffer's start
        feed(screen, data)
    return screen


# --- the result ---------------------------------------------------------------


@dataclass(frozen=True)
class Capture:
    """A session's screen as text: ``lines`` are the ``history`` lines
    above the screen, then its ``rows`` lines, each without its trailing
    blanks; with ``styled``, each carries its attributes as SGR sequences.
    The cursor is on the screen (row 0 is its top line)."""

    rows: int
    cols: int
    lines: tuple[str, ...]
    history: int
    cursor_row: int
    cursor_col: int
    cursor_visible: bool
    title: str
    styled: bool = False

    def text(self) -> str:
        """The lines as ``tmux capture-pane -p`` prints them."""
        return "".join(f"{line}\n" for line in self.lines)

    def as_json(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "rows": self.rows,
            "cols": self.cols,
            "history": self.history,
            "styled": self.styled,
            "lines": list(self.lines),
            "cursor": {
                "row": self.cursor_row,
                "col": self.cursor_col,
                "visible": self.cursor_visible,
            },
            "title": self.title,
        }

    @classmethod
    def from_json(cls, found: object) -> Capture:
        """A capture's JSON (``as_json``), read strictly: every field there,
        of its exact type, in its range; ValueError saying what is not."""
        top = _fields(
            found,
            {
                "schema": int,
                "rows": int,
                "cols": int,
                "history": int,
                "styled": bool,
                "lines": list,
                "cursor": dict,
                "title": str,
            },
        )
        if top["schema"] != SCHEMA:
            raise ValueError(f"schema {top['schema']!r}, not {SCHEMA}")
        cursor = _fields(top["cursor"], {"row": int, "col": int, "visible": bool})
        lines = top["lines"]
        assert isinstance(lines, list)
        if not all(isinstance(line, str) for line in lines):
            raise ValueError("a line that is not a string")
        got = cls(
            top["rows"],  # type: ignore[arg-type]
            top["cols"],  # type: ignore[arg-type]
            tuple(lines),
            top["history"],  # type: ignore[arg-type]
            cursor["row"],  # type: ignore[arg-type]
            cursor["col"],  # type: ignore[arg-type]
            cursor["visible"],  # type: ignore[arg-type]
            top["title"],  # type: ignore[arg-type]
            top["styled"],  # type: ignore[arg-type]
        )
        if not (
            got.rows >= 1
            and got.cols >= 1
            and got.history >= 0
            and len(got.lines) == got.history + got.rows
            and 0 <= got.cursor_row < got.rows
            and 0 <= got.cursor_col < got.cols
        ):
            raise ValueError("sizes that do not add up")
        return got


def _fields(found: object, types: dict[str, type]) -> dict[str, object]:
    """``found``'s fields, if it is an object with exactly ``types``' keys,
    each of exactly its type (a bool is no int here)."""
    if not isinstance(found, dict) or set(found) != set(types):
        raise ValueError(f"not an object with the fields {sorted(types)}")
    for key, kind in types.items():
        if type(found[key]) is not kind:
            raise ValueError(f"{key}: not a {kind.__name__}")
    return found


# --- rendering ------------------------------------------------------------------


def render(
    data: bytes, rows: int, cols: int, *, history: int | None = 0, styled: bool = False
) -> Capture:
    """The screen a terminal of ``rows`` x ``cols`` shows after ``data``
    (a program's output), with ``history`` lines of what scrolled off
    above it (None: all there is); ``styled``: with SGR sequences."""
    if rows < 1 or cols < 1:
        raise ValueError(f"no screen of {rows}x{cols}")
    if history is not None and history < 0:
        raise ValueError("history must be >= 0")
    screen = _screen(data, rows, cols, history)
    above = list(screen.kept)
    lines = [line_text(line, cols, styled) for line in above]
    lines += [line_text(screen.buffer[y], cols, styled) for y in range(rows)]
    return Capture(
        rows=rows,
        cols=cols,
        lines=tuple(lines),
        history=len(above),
        cursor_row=min(screen.cursor.y, rows - 1),
        cursor_col=min(screen.cursor.x, cols - 1),
        cursor_visible=screen.cursor_shown,
        title=screen.title,
        styled=styled,
    )
