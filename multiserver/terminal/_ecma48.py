"""Terminal output read as a terminal reads it: an ECMA-48 parser (pure,
sans-IO: text in, tokens out). What a replay keeps of the tokens is
``_replay``'s, by the one table of ``_draws``.

Bytes are read as a UTF-8 terminal reads them, decoded first (``decode``):
a byte that is no part of a character is kept as a lone surrogate
(U+DC80..U+DCFF, Python's ``surrogateescape``), so nothing is lost and the
text encodes back to the same bytes. **C1 controls are read in both
encodings**, the character (U+0080..U+009F) and the raw byte (0x80..0x9F):
terminals differ (kitty and pyte act on them, xterm in UTF-8 mode does
not), and the parser takes each at its most powerful: U+009B and 0x9B start
a CSI, U+009D an OSC, U+0090 a DCS, U+009F an APC, U+009E a PM, U+0098 an
SOS, U+009C ends a string (ST). A token says whether a C1 started it.

The transition rules, all of them (the DEC VT500 parser that xterm, tmux
and kitty follow; Paul Williams' diagram):

ground
    ESC, or a C1 introducer, starts a sequence. A run of characters that
    draw is ``TEXT``; every other character (a C0 control, DEL, a C1 that
    introduces nothing, a byte that is no character) is a ``CONTROL`` of
    its own.
escape (after ESC)
    ``[`` -> csi; ``]`` -> OSC, ``P`` -> DCS, ``_`` -> APC, ``^`` -> PM,
    ``X`` -> SOS strings (only without intermediates); 0x20-0x2F are
    intermediates; 0x30-0x7E finishes an escape sequence.
csi (after ESC [ or CSI)
    parameter bytes 0x30-0x3F (a private marker ``<=>?`` first), then
    intermediates 0x20-0x2F, then a final byte 0x40-0x7E. A parameter byte
    after an intermediate, a marker after the first byte, or a character
    past ASCII makes the sequence malformed: a terminal ignores it up to
    its final byte.
strings
    end at ST (``ESC \\`` or the C1 ST) or BEL (kitty ends every string at
    BEL; xterm an OSC). A DCS keeps ``ESC ESC`` as its own (tmux's
    passthrough doubles the ESCs it carries).

In escape and csi, a C0 control *executes* and the sequence goes on
(``ESC [ BS c`` moves the cursor back, then asks DA1); DEL is ignored.
Anywhere, ESC or a C1 control abandons the sequence and starts another,
CAN and SUB abandon it (and are controls of their own). An abandoned
sequence is ``ABORTED``: a terminal draws nothing of it but the C0
controls it executed. An escape or control sequence longer than
``MAX_SEQUENCE`` is abandoned there, as no program writes one.

The data's end may cut a sequence: ``parse`` says where it began, and a
caller with more to come holds those characters.
"""

from __future__ import annotations

import re

ESC, BEL, CAN, SUB, DEL = "\x1b", "\x07", "\x18", "\x1a", "\x7f"

# Token kinds.
TEXT = "text"  # characters that draw
CONTROL = "control"  # one C0 control, DEL, C1 introducing nothing, or a byte no character
ESCAPE = "escape"  # ESC intermediates final
CSI = "csi"
STRING = "string"  # OSC, DCS, APC, PM, SOS
ABORTED = "aborted"  # a sequence abandoned by ESC, a C1, CAN or SUB, or too long
OPEN = "open"  # not finished by the data

# The longest escape or control sequence read as one: past it, a sequence
# is abandoned (a terminal's own parser keeps 16-32 parameters).
MAX_SEQUENCE = 512

_STRING_INTROS = "]P_^X"
# The C1 controls that introduce a sequence, as the 7-bit form's second
# character: CSI, OSC, DCS, APC, PM, SOS.
_C1_INTROS = {0x9B: "[", 0x9D: "]", 0x90: "P", 0x9F: "_", 0x9E: "^", 0x98: "X"}
C1_ST = 0x9C
# A run of characters that draw: no C0, DEL, C1 (either encoding), nor a
# byte that is no character.
_TEXT_RUN = re.compile("[^\x00-\x1f\x7f-\x9f\ud800-\udfff]+")
# A CSI of nothing but its own characters: what the loop (``_csi``) makes
# of it too, at regex speed (most sequences of most programs).
_PLAIN_CSI = re.compile("\x1b\\[([0-?]*)([ -/]*)([@-~])")
# What may end a string, or abandon it.
_STRING_STOP = re.compile("[\x07\x18\x1a\x1b\x80-\x9f\udc80-\udc9f]")


def decode(data: bytes) -> str:
    """``data`` as a UTF-8 terminal reads it; ``encode`` gives it back."""
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def c1(ch: str) -> int:
    """The C1 control (0x80-0x9F) ``ch`` is, in either encoding; -1 if none."""
    o = ord(ch)
    if 0x80 <= o <= 0x9F:
        return o
    if 0xDC80 <= o <= 0xDC9F:  # the raw byte
        return o - 0xDC00
    return -1


def complete_utf8(data: bytes) -> int:
    """The length of the part of ``data`` that ends with no character cut
    short (a caller with more to come holds the rest)."""
    n = len(data)
    for back in range(1, min(4, n + 1)):
        b = data[n - back]
        if b < 0x80:
            return n
        if b >= 0xC0:  # a leading byte: the character needs this many
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n - back if need > back and b <= 0xF4 else n
    return n


class Token:
    """One piece of the text, ``text[start:end]``.

    ``executed``: the C0 controls a sequence executed on its way (they
    act even when the sequence is dropped). ``c1``: a C1 control started
    it. CSI: ``params`` (private marker included), ``inter``, ``final``,
    ``malformed``. ESCAPE: ``inter``, ``final``. STRING: ``intro`` (``]``,
    ``P``...), ``body`` (between the intro and the terminator)."""

    __slots__ = (
        "body",
        "c1",
        "end",
        "executed",
        "final",
        "inter",
        "intro",
        "kind",
        "malformed",
        "params",
        "start",
    )

    def __init__(self, kind: str, start: int, end: int, executed: str = "") -> None:
        self.kind = kind
        self.start = start
        self.end = end
        self.executed = executed
        self.c1 = False
        self.params = ""
        self.inter = ""
        self.final = ""
        self.malformed = False
        self.intro = ""
        self.body = ""

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.start}, {self.end})"


def parse(text: str) -> tuple[list[Token], int]:
    """The tokens of ``text`` in order, covering it up to the returned
    offset: where a sequence the text does not finish begins (``len(text)``
    if none)."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        token = next_token(text, pos)
        if token.kind == OPEN:
            return tokens, token.start
        tokens.append(token)
        pos = token.end
    return tokens, len(text)


def unfinished_at(data: bytes, start: int = 0) -> int:
    """Where in ``data`` (bytes) an escape sequence, or a character, that
    it does not finish begins (``len(data)`` if none): the bytes a filter
    holds until more come."""
    whole = start + complete_utf8(data[start:])
    text = decode(data[start:whole])
    cut = parse(text)[1]
    return start + len(encode(text[:cut])) if cut < len(text) else whole


def next_token(text: str, pos: int) -> Token:
    """The token at ``pos`` (the parser in ground there, ``pos < len(text)``);
    its kind is OPEN if the text ends before it does."""
    ch = text[pos]
    if ch == ESC:
        return _escape(text, pos)
    intro = _C1_INTROS.get(c1(ch))
    if intro is not None:
        token = (
            _csi(text, pos, pos + 1, "") if intro == "[" else _string(text, pos, intro, pos + 1, "")
        )
        token.c1 = True
        return token
    m = _TEXT_RUN.match(text, pos)
    if m is not None:
        return Token(TEXT, pos, m.end())
    return Token(CONTROL, pos, pos + 1)


def _open_or_cut(start: int, n: int, executed: list[str]) -> Token:
    if n - start >= MAX_SEQUENCE:
        return Token(ABORTED, start, start + MAX_SEQUENCE, "".join(executed))
    return Token(OPEN, start, start)


def _escape(text: str, start: int) -> Token:
    """The sequence whose ESC is at ``start``."""
    plain = _PLAIN_CSI.match(text, start)
    if plain is not None and plain.end() - start <= MAX_SEQUENCE:
        params = plain[1]
        token = Token(CSI, start, plain.end())
        token.params, token.inter, token.final = params, plain[2], plain[3]
        token.malformed = any(ch in "<=>?" for ch in params[1:])
        return token
    executed: list[str] = []
    inter: list[str] = []
    pos = start + 1
    n = min(len(text), start + MAX_SEQUENCE)
    while pos < n:
        ch = text[pos]
        o = ord(ch)
        if ch in (ESC, CAN, SUB) or o >= 0x80:
            # A character past ASCII is no part of any escape sequence:
            # abandoned, it is read anew.
            return Token(ABORTED, start, pos, "".join(executed))
        if o < 0x20:
            executed.append(ch)
        elif o == 0x7F:
            pass
        elif o < 0x30:
            inter.append(ch)
        elif not inter and ch == "[":
            return _csi(text, start, pos + 1, "".join(executed))
        elif not inter and ch in _STRING_INTROS:
            return _string(text, start, ch, pos + 1, "".join(executed))
        else:
            token = Token(ESCAPE, start, pos + 1, "".join(executed))
            token.inter = "".join(inter)
            token.final = ch
            return token
        pos += 1
    return _open_or_cut(start, len(text), executed)


def _csi(text: str, start: int, pos: int, executed_before: str) -> Token:
    executed = [executed_before]
    params: list[str] = []
    inter: list[str] = []
    malformed = False
    n = min(len(text), start + MAX_SEQUENCE)
    while pos < n:
        ch = text[pos]
        o = ord(ch)
        if ch in (ESC, CAN, SUB) or c1(ch) >= 0:
            return Token(ABORTED, start, pos, "".join(executed))
        if o < 0x20:
            executed.append(ch)
        elif o == 0x7F:
            pass
        elif o < 0x30:
            inter.append(ch)
        elif o < 0x40:
            if inter or (params and ch in "<=>?"):
                malformed = True
            params.append(ch)
        elif o < 0x7F:
            token = Token(CSI, start, pos + 1, "".join(executed))
            token.params, token.inter, token.final = "".join(params), "".join(inter), ch
            token.malformed = malformed
            return token
        else:  # past ASCII
            malformed = True
        pos += 1
    return _open_or_cut(start, len(text), executed)


def _string(text: str, start: int, intro: str, pos: int, executed: str) -> Token:
    body_start = pos
    n = len(text)
    while True:
        m = _STRING_STOP.search(text, pos)
        if m is None:
            return Token(OPEN, start, start)
        at = m.start()
        ch = text[at]
        if ch == BEL or c1(ch) == C1_ST:
            return _string_token(text, start, intro, body_start, at, at + 1, executed)
        if ch != ESC:  # CAN, SUB, another C1: abandoned
            return Token(ABORTED, start, at, executed)
        if at + 1 >= n:
            return Token(OPEN, start, start)
        after = text[at + 1]
        if after == "\\":  # ST
            return _string_token(text, start, intro, body_start, at, at + 2, executed)
        if intro == "P" and after == ESC:  # a DCS's doubled ESC (tmux passthrough)
            pos = at + 2
            continue
        return Token(ABORTED, start, at, executed)


def _string_token(
    text: str, start: int, intro: str, body_start: int, body_end: int, end: int, executed: str
) -> Token:
    token = Token(STRING, start, end, executed)
    token.intro = intro
    token.body = text[body_start:body_end]
    return token
