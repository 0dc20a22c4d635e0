"""What ``multiserver attach`` says to the user's terminal, and what it lets
through from it: pure functions and state machines, bytes in and bytes out.

No I/O here (``_proxy`` writes and reads). Three jobs:

- **The replay asks nothing.** Output buffered while detached is replayed to a
  terminal the program never asked: a query in it (``CSI 6n``, ``CSI c``,
  ``OSC 11;?``...) would make the terminal answer now, and the answer would
  reach the program as typed input (in a shell, possibly as a command).
  ``QueryStripper`` removes every sequence a terminal answers with input and
  leaves every other byte as it is.
- **Answers during the replay go nowhere.** Whatever the stripper missed is
  answered while the replay is shown. After the replay ``_proxy`` asks the
  terminal one question of its own, ``SENTINEL`` (DA1, which every terminal
  answers); terminals answer in order, so once that answer is in, every
  answer to the replay is too. Until then ``AnswerFilter`` drops
  answer-shaped input and passes everything typed, in order; then nothing
  is filtered, so a live program's own questions get their answers.
- **Leaving gives the terminal back.** ``ScreenModes`` follows the
  alternate screen in what was shown, and ``ScreenModes.reset()`` is what to
  write on every way out: the alternate screen left, the cursor shown,
  normal cursor keys and keypad, no mouse, focus or paste reporting, no
  kitty keyboard flags, plain attributes, the whole screen as scroll region.

Every ESC a terminal reads starts a new sequence (an unfinished one is
abandoned, a string is ended), so a sequence can be recognised where its
ESC is, without following the whole parser. Only 7-bit introducers are
recognised: in a UTF-8 terminal the bytes 0x80-0x9F are parts of characters.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

ESC = 0x1B

# --- the replay: queries removed ---------------------------------------------------

# Sequences a terminal answers with input, as xterm's ctlseqs and the kitty
# keyboard protocol give them; ENQ (answered with the answerback string) is
# removed apart. One literal ESC first: the regex engine then skips to each
# ESC at memchr speed.
_CSI_QUERIES = rb"""
    \x1b (?:
      \[ (?:
          \??[0-9;]*n             # DSR: status (5n), CPR (6n), DECXCPR (?6n), ?15n, ?996n ...
        | [>=]?[0-9;]*c           # DA1 (c, 0c), DA2 (>c), DA3 (=c); ?...c is the Linux cursor
        | \??[0-9;]*\$p           # DECRQM, ANSI and DEC modes
        | >[0-9]*q                # XTVERSION
        | (?:1[13-689]|2[01])(?:;[0-9]*)*t  # XTWINOPS reports 11 13 14 15 16 18 19 20 21
        | \?u                     # kitty keyboard: the current flags
        | [0-9;]*\$[uw]           # DECRQTSR, DECRQPSR
        | &u                      # DECRQUPSS
        | [01]?x                  # DECREQTPARM
        | \?[0-9;]*[mS]           # XTQMODKEYS, XTSMGRAPHICS
        | [0-9;]*\*y              # DECRQCRA
        | [0-9;]*\#\|             # XTREPORTSGR
      )
    | P (?: \$q | \+[qQ] ) [^\x1b\x18\x1a]* \x1b\\   # DECRQSS, XTGETTCAP, XTGETXRES
    | Z                           # DECID: answered like DA1
    | (?P<osc> \] (?P<osc_n>[0-9]*) (?P<osc_args>;[^\x07\x1b\x18\x1a]*)? (?:\x07|\x1b\\) )
    | (?P<apc> _G (?P<apc_keys>[^;\x1b\x18\x1a]*) [^\x1b\x18\x1a]* \x1b\\ )
    )
"""
_QUERY = re.compile(_CSI_QUERIES, re.VERBOSE)
# OSC commands whose arguments are text (titles, URIs, notifications, shell
# marks): a "?" in them is text, not a question.
_TEXT_OSC = frozenset({b"0", b"1", b"2", b"7", b"8", b"9", b"133", b"633", b"777", b"1337"})
# iTerm2's reports among its many 1337 commands.
_ITERM_REPORTS = (b"ReportCellSize", b"ReportVariable")

# An escape sequence begun and not finished at the end of the data: a CSI
# or ESC sequence without its final byte, a string without its terminator.
_OPEN = re.compile(
    rb"\x1b(?:\[[\x20-\x3f]*|[\x20-\x2f]*|\][^\x07\x1b\x18\x1a]*|[P_^X][^\x1b\x18\x1a]*)"
)
# A string whose terminator (ESC \) has only its ESC in the data so far.
_OPEN_STRING = re.compile(rb"\x1b(?:\][^\x07\x1b\x18\x1a]*|[P_^X][^\x1b\x18\x1a]*)")


def _is_query(m: re.Match[bytes]) -> bool:
    if m["osc"] is not None:
        number, args = m["osc_n"], (m["osc_args"] or b"")[1:]
        fields = args.split(b";")
        if number == b"1337":
            return fields[0].startswith(_ITERM_REPORTS)
        if number in _TEXT_OSC:
            return False
        # OSC 4;N;?  10;?  52;c;?  22;?name (kitty pointer)  21;fg=? (kitty colours)
        return any(f.startswith(b"?") or f.endswith(b"=?") for f in fields)
    if m["apc"] is not None:
        # Kitty graphics: a=q asks whether an image would be accepted.
        return b"a=q" in m["apc_keys"].split(b",")
    return True


def _drop_query(m: re.Match[bytes]) -> bytes:
    return b"" if _is_query(m) else m[0]


def unfinished_at(data: bytes, start: int = 0) -> int:
    """Where an escape sequence that ``data`` does not finish begins
    (``len(data)`` if none): the bytes a filter holds until more come."""
    last = data.rfind(b"\x1b", start)
    if last < 0:
        return len(data)
    if last == len(data) - 1:
        # A lone ESC: maybe the first half of the ST ending a string.
        before = data.rfind(b"\x1b", start, last)
        if before >= 0 and _OPEN_STRING.fullmatch(data, before, last):
            return before
        return last
    return last if _OPEN.fullmatch(data, last) else len(data)


def strip_queries(data: bytes) -> bytes:
    """``data`` without the queries in it; every other byte as it was.
    ``data`` is whole: a sequence cut at its end is left as it is."""
    return _QUERY.sub(_drop_query, data.replace(b"\x05", b""))


class QueryStripper:
    """``strip_queries`` over data that comes in pieces: a sequence split
    between two pieces is held until it is whole, and judged then.

    A piece may begin inside a sequence whose head it never saw (the replay
    of a buffer whose oldest bytes were dropped): a terminal takes such a
    fragment (``6n``, ``;?\\a``) as text and answers nothing, so it passes.
    """

    def __init__(self) -> None:
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        if self._held:
            data, self._held = self._held + data, b""
        cut = unfinished_at(data)
        if cut < len(data):
            data, self._held = data[:cut], data[cut:]
        return strip_queries(data)

    def finish(self) -> bytes:
        """The unfinished sequence at the end, as it is: what comes next (live
        output) finishes it, as it would have without a replay in between."""
        held, self._held = self._held, b""
        return held


def guard_replay(replay: bytes) -> tuple[bytes, bytes]:
    """(the replay without its queries, an unfinished sequence at its end).
    Whatever is written between the two (``SENTINEL``) reaches the terminal
    with its parser at rest; the tail is written after it."""
    stripper = QueryStripper()
    body = stripper.feed(replay)
    return body, stripper.finish()


# --- the answer window: answers dropped, keys kept ----------------------------------

# DA1: the question asked after the replay, which every terminal answers.
SENTINEL = b"\x1b[c"
_SENTINEL_ANSWER = re.compile(rb"\x1b\[\?[0-9;]*c")
# Its answer cut at the end of a read: at least ESC [ ?, which no one key sends.
_SENTINEL_ANSWER_OPEN = re.compile(rb"\x1b\[\?[0-9;]*")
_PASTE_START = b"\x1b[200~"
_PASTE_END = b"\x1b[201~"
# What terminals send only as answers. Keys never send strings, nor CSI with
# these finals and markers; the one key that does look like an answer is
# xterm's F3 with a modifier (CSI 1;2R), dropped too while the window lasts.
_WINDOW_INPUT = re.compile(
    rb"""
    (?P<sentinel> \x1b\[\?[0-9;]*c )        # DA1: the sentinel's answer ends the window
  | (?P<paste> \x1b\[200~ )                 # bracketed paste: passed as it is, to its end
  | \x1b\[ (?:
        \??[0-9;]*R                         # CPR, DECXCPR
      | >[0-9;]*c                           # DA2
      | \??[0-9;]*\$y                       # DECRPM
      | \?[0-9;]*u                          # kitty keyboard flags
      | [0-9;]*t                            # XTWINOPS reports
      | \??[0-9;]*n                         # DSR answers
      | >[0-9;]*m                           # XTQMODKEYS
      | \?[0-9;]*S                          # XTSMGRAPHICS
      | [23];[0-9;]*x                       # DECREPTPARM
    )
  | \x1b\][^\x07\x1b\x18\x1a]*(?:\x07|\x1b\\)   # OSC answers: colours, clipboard, titles
  | \x1b[P_^X][^\x1b\x18\x1a]*\x1b\\            # DCS (DA3, DECRQSS, XTGETTCAP, XTVERSION), APC
""",
    re.VERBOSE,
)

if TYPE_CHECKING:
    Phase = Literal["window", "late", "done"]


def _marker_start_at_end(data: bytes, marker: bytes) -> int:
    """Where a proper prefix of ``marker`` ends ``data`` (len(data) if none)."""
    for k in range(min(len(marker) - 1, len(data)), 0, -1):
        if data.endswith(marker[:k]):
            return len(data) - k
    return len(data)


class AnswerFilter:
    """Input from the terminal after a replay, answers dropped.

    Phases: ``window`` until the sentinel's answer arrives: answer-shaped
    sequences are dropped, everything else passes in order (a sequence cut
    at the end of a read is held until the next read or the window's end,
    so the Esc key may wait that long). ``late`` once the window has
    expired without that answer (``expire``, at the caller's ``deadline``):
    everything passes but the sentinel's answer, still owed; terminals
    answer in order, so the first DA1 answer is the sentinel's. ``done``:
    everything passes.

    The filter keeps no clock: ``deadline`` (a ``time.monotonic()`` value)
    is for the caller, which calls ``expire`` once it has passed.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._phase: Phase = "window"
        self._held = b""
        self._in_paste = False

    @property
    def phase(self) -> Phase:
        return self._phase

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` goes on to the program."""
        if self._phase == "done":
            return data
        if self._held:
            data, self._held = self._held + data, b""
        out = bytearray()
        pos = 0
        while pos < len(data):
            if self._in_paste:
                end = data.find(_PASTE_END, pos)
                if end < 0:
                    cut = _marker_start_at_end(data, _PASTE_END)
                    out += data[pos:cut]
                    self._held = data[cut:]
                    break
                out += data[pos : end + len(_PASTE_END)]
                pos = end + len(_PASTE_END)
                self._in_paste = False
                continue
            if self._phase == "late":
                pos = self._late(data, pos, out)
                break
            m = _WINDOW_INPUT.search(data, pos)
            if m is None:
                cut = unfinished_at(data, pos)
                out += data[pos:cut]
                self._held = data[cut:]
                break
            out += data[pos : m.start()]
            pos = m.end()
            if m["sentinel"] is not None:
                self._phase = "done"
                out += data[pos:]
                break
            if m["paste"] is not None:
                out += m[0]
                self._in_paste = True
        return bytes(out)

    def _late(self, data: bytes, pos: int, out: bytearray) -> int:
        m = _SENTINEL_ANSWER.search(data, pos)
        if m is not None:
            out += data[pos : m.start()]
            out += data[m.end() :]
            self._phase = "done"
            return len(data)
        last = data.rfind(b"\x1b", pos)
        cut = len(data)
        if last >= 0 and len(data) - last >= 3 and _SENTINEL_ANSWER_OPEN.fullmatch(data, last):
            cut = last
        out += data[pos:cut]
        self._held = data[cut:]
        return len(data)

    def expire(self) -> bytes:
        """The window's time is up: what was held goes on to the program."""
        if self._phase == "window":
            self._phase = "late"
        held, self._held = self._held, b""
        return held

    def close(self) -> bytes:
        """Nothing more will be read: what was held goes on to the program."""
        self._phase = "done"
        held, self._held = self._held, b""
        return held


# --- leaving: the terminal given back ------------------------------------------------

# What ScreenModes follows: DEC private modes set and reset (the alternate
# screen), RIS, the kitty keyboard stack (push ">", set "=", pop "<") and
# xterm's modifyOtherKeys ("CSI > 4 ; N m").
_TRACKED = re.compile(
    rb"\x1b(?:\[(?:"
    rb"\?(?P<modes>[0-9;]*)(?P<set>[hl])"
    rb"|(?P<kitty>[<=>])(?P<kitty_args>[0-9;]*)u"
    rb"|>(?P<modkeys>[0-9;]*)m"
    rb")|(?P<ris>c))"
)
_TRACKED_OPEN = re.compile(rb"\x1b(?:\[(?:[?<=>][0-9;]*)?)?")
_ALTERNATE_MODES = {b"47": 47, b"1047": 1047, b"1049": 1049}
# Kitty keyboard protocol: "CSI < number u" pops that many entries, and "if
# a pop request is received that empties the stack, all flags are reset".
# Each screen has its own stack. Terminals bound the stack (kitty keeps 8
# entries a screen); 99 is past any of them.
_KITTY_POP_ALL = b"\x1b[<99u"
_MODIFY_OTHER_KEYS_RESET = b"\x1b[>4m"  # back to the terminal's initial value
# Modes that every terminal parses, reset whatever was shown.
_RESET_MODES = b"".join(
    [
        b"\x1b[0m",  # attributes
        b"\x1b(B\x0f",  # G0 is ASCII, and in use (line drawing off)
        b"\x1b[4l",  # replace mode, not insert
        b"\x1b[?25h",  # cursor shown
        b"\x1b[?7h",  # autowrap
        b"\x1b[?1l",  # normal cursor keys
        b"\x1b>",  # normal keypad
        # mouse reporting off: X10, normal, highlight, button, any, and the
        # UTF-8, SGR, urxvt and SGR-pixel encodings
        b"\x1b[?9l\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l",
        b"\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l",
        b"\x1b[?1004l",  # focus reporting off
        b"\x1b[?2004l",  # bracketed paste off
        b"\x1b[?2026l",  # synchronized output ended
    ]
)


class _KittyStack:
    def __init__(self) -> None:
        self.depth = 0  # pushes not popped
        self.changed = False  # flags set ("CSI = flags u") since the stack was last empty

    def dirty(self) -> bool:
        return self.depth > 0 or self.changed

    def apply(self, op: bytes, args: bytes) -> None:
        first = args.split(b";")[0]
        if op == b">":
            self.depth += 1
        elif op == b"<":
            self.depth = max(0, self.depth - int(first or b"1"))
            if self.depth == 0:
                self.changed = False
        elif int(first or b"0"):
            self.changed = True


class ScreenModes:
    """Follows, through everything shown the terminal, what leaving must
    undo with care; ``reset()`` is what to write on the way out.

    - The alternate screen is left the way it was entered: ``CSI ?1049l``
      also restores the saved cursor, and does so on the main screen too
      (xterm, tmux), which would put the status line wherever a cursor was
      last saved.
    - Kitty keyboard flags and xterm's modifyOtherKeys are undone only if
      something shown set them: a terminal that does not know those
      sequences may misread them (pyte takes "CSI > 4 m" for underline and
      prints "CSI < 99 u"), and flags the terminal had before attaching are
      not ours to drop.

    Everything else (mouse, keypad, cursor...) is reset whatever was shown.
    """

    def __init__(self) -> None:
        self._alternate = 0  # the DEC mode (47, 1047, 1049) that entered it; 0: main screen
        self._kitty_main = _KittyStack()
        self._kitty_alternate = _KittyStack()
        self._modify_other_keys = False
        self._carry = b""

    @property
    def alternate(self) -> int:
        return self._alternate

    def feed(self, data: bytes) -> None:
        """Take note of ``data``, the next bytes shown (in any pieces)."""
        if self._carry:
            data, self._carry = self._carry + data, b""
        elif b"\x1b" not in data:  # most output, at memchr speed
            return
        for m in _TRACKED.finditer(data):
            if m["modes"] is not None:
                for param in m["modes"].split(b";"):
                    mode = _ALTERNATE_MODES.get(param)
                    if mode is not None:
                        self._alternate = mode if m["set"] == b"h" else 0
            elif m["kitty"] is not None:
                stack = self._kitty_alternate if self._alternate else self._kitty_main
                stack.apply(m["kitty"], m["kitty_args"])
            elif m["modkeys"] is not None:
                resource, _, value = m["modkeys"].partition(b";")
                if resource == b"4":
                    self._modify_other_keys = bool(int(value or b"0"))
            else:  # RIS: the terminal as it started
                self._alternate = 0
                self._kitty_main = _KittyStack()
                self._kitty_alternate = _KittyStack()
                self._modify_other_keys = False
        last = data.rfind(b"\x1b", max(0, len(data) - 32))
        if last >= 0 and _TRACKED_OPEN.fullmatch(data, last):
            self._carry = data[last:]

    def reset(self) -> bytes:
        """What to write on the way out. The cursor ends where the main
        screen has it, so the status line comes out there: ESC 7 ... ESC 8
        around what moves it (DECSTBM homes the cursor)."""
        out = bytearray()
        if self._alternate:
            if self._kitty_alternate.dirty():
                out += _KITTY_POP_ALL
            out += b"\x1b[?%dl" % self._alternate
        out += b"\x1b7"
        if self._kitty_main.dirty():
            out += _KITTY_POP_ALL
        out += b"\x1b[r\x1b8"  # scroll region: the whole screen
        if self._modify_other_keys:
            out += _MODIFY_OTHER_KEYS_RESET
        out += _RESET_MODES
        return bytes(out)
