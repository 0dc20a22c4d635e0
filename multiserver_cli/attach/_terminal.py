"""What ``multiserver attach`` says to the user's terminal, and what it lets
through from it: pure functions and state machines, bytes in and bytes out.

No I/O here (``_proxy`` writes and reads). Three jobs:

- **The replay draws, and asks nothing.** Output buffered while detached is
  replayed to a terminal the program never asked: a query in it would make
  the terminal answer now, and the answer would reach the program as typed
  input; a clipboard write or a notification in it would act again.
  ``guard_replay`` writes only what ``multiserver.for_terminal`` keeps:
  what the one table of what draws names (shared with ``peek``).
- **Answers during the replay go nowhere.** A replay asks nothing; but a
  live program's own question, written before the attach, may be
  answered while the replay is shown. After the replay ``_proxy`` asks the
  terminal a question of its own, ``SENTINEL``: the cursor's position and
  DA1, which every terminal answers, in order. Once that pair of answers is
  in, every answer to the replay is too; a DA1 answer alone (to a DA1 the
  stripper missed) does not end the window. Until then ``AnswerFilter``
  drops answer-shaped input and passes everything typed, in order; then
  nothing is filtered, so a live program's own questions get their answers.
- **Leaving gives the terminal back**: ``multiserver.ScreenModes``, the one
  reset written wherever a program's screen ends.
"""

from __future__ import annotations

import re

from multiserver import for_terminal
from multiserver.internal import unfinished_at

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

ESC = 0x1B


def guard_replay(replay: bytes) -> tuple[bytes, bytes]:
    """(the replay as a terminal should get it, an unfinished sequence at
    its end). Whatever is written between the two (``SENTINEL``) reaches
    the terminal with its parser at rest; the tail is written after it."""
    return for_terminal(replay)


# --- the answer window: answers dropped, keys kept ----------------------------------

# The question asked after the replay: the cursor's position (CPR), then
# DA1; every terminal answers both. The pair of answers, back to back, is
# the sentinel's: a DA1 the replay leaked is answered alone.
SENTINEL = b"\x1b[6n\x1b[c"
_SENTINEL_ANSWER = re.compile(rb"\x1b\[[0-9]+;[0-9]+R\x1b\[\?[0-9;]*c")
# Its answer cut at the end of a read (held if at least ESC [ and a digit or ?).
_SENTINEL_ANSWER_OPEN = re.compile(rb"\x1b\[[0-9;]*(?:R(?:\x1b(?:\[(?:\?[0-9;]*)?)?)?)?\Z")
_DA1_ANSWER_OPEN = re.compile(rb"(?:\x1b(?:\[(?:\?[0-9;]*)?)?)?")
_PASTE_START = b"\x1b[200~"
_PASTE_END = b"\x1b[201~"
# What terminals send only as answers. Keys never send strings, nor CSI with
# these finals and markers; the one key that does look like an answer is
# xterm's F3 with a modifier (CSI 1;2R), dropped too while the window lasts.
_WINDOW_INPUT = re.compile(
    rb"""
    (?P<sentinel> \x1b\[[0-9]+;[0-9]+R\x1b\[\?[0-9;]*c )   # CPR, DA1: the window ends
  | (?P<paste> \x1b\[200~ )                 # bracketed paste: passed as it is, to its end
  | (?P<cpr> \x1b\[[0-9]+;[0-9]+R )         # maybe the sentinel's first half
  | \x1b\[ (?:
        \?[0-9;]*c                          # DA1 (to a query the replay leaked)
      | \??[0-9;]*R                         # CPR, DECXCPR
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
    everything passes but the sentinel's pair of answers, still owed. ``done``:
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
            elif m["cpr"] is not None and _DA1_ANSWER_OPEN.fullmatch(data, pos):
                # The DA1 answer after it may be in the next read: held whole.
                self._held = data[m.start() :]
                break
        return bytes(out)

    def _late(self, data: bytes, pos: int, out: bytearray) -> int:
        m = _SENTINEL_ANSWER.search(data, pos)
        if m is not None:
            out += data[pos : m.start()]
            out += data[m.end() :]
            self._phase = "done"
            return len(data)
        cut = len(data)
        m = _SENTINEL_ANSWER_OPEN.search(data, pos)
        if m is not None and len(m[0]) >= 3:
            cut = m.start()
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
