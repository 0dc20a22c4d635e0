"""Terminal output read as a terminal reads it: an ECMA-48 parser (pure,
sans-IO: bytes in, tokens out). What is done with the tokens is
``_replay``'s.

The transition rules, all of them, as the terminals met apply them (the
DEC VT500 parser that xterm, tmux and kitty follow; Paul Williams'
diagram), 7-bit only (in a UTF-8 terminal 0x80-0x9F are parts of
characters, not C1 controls):

ground
    ESC -> escape. ENQ is its own token (a terminal answers it). Every
    other byte is text (C0 controls execute: they draw).
escape (after ESC)
    ``[`` -> csi; ``]`` -> OSC, ``P`` -> DCS, ``_`` -> APC, ``^`` -> PM,
    ``X`` -> SOS strings (only without intermediates); 0x20-0x2F are
    intermediates; 0x30-0x7E finishes an escape sequence.
csi (after ESC [)
    parameter bytes 0x30-0x3F (a private marker ``<=>?`` first), then
    intermediates 0x20-0x2F, then a final byte 0x40-0x7E. A parameter byte
    after an intermediate, a marker after the first byte, or a byte of
    0x80 and up makes the sequence malformed: a terminal ignores it up to
    its final byte.
strings
    end at ST (``ESC \\``); an OSC also at BEL. A DCS keeps ``ESC ESC`` as
    its own (tmux's passthrough doubles the ESCs it carries).

In escape and csi, a C0 control *executes* and the sequence goes on
(``ESC [ BS c`` moves the cursor back, then asks DA1); DEL is ignored.
Anywhere, ESC abandons the sequence and starts another, CAN and SUB
abandon it (and are text). An abandoned sequence is ``ABORTED``: a
terminal draws nothing of it but the C0 controls it executed. (kitty does
not end a string on a bare ESC; a string abandoned so is one that
terminals read differently.)

The data's end may cut a sequence: ``parse`` says where it began, and a
caller with more to come holds those bytes.
"""

from __future__ import annotations

import re

ESC, BEL, CAN, SUB, DEL = 0x1B, 0x07, 0x18, 0x1A, 0x7F
ENQ = 0x05

# Token kinds.
TEXT = "text"  # printables and C0 controls (they execute)
ENQUIRY = "enq"  # ENQ: answered with the answerback string
ESCAPE = "escape"  # ESC intermediates final
CSI = "csi"
STRING = "string"  # OSC, DCS, APC, PM, SOS
ABORTED = "aborted"  # a sequence abandoned by ESC, CAN or SUB
OPEN = "open"  # not finished by the data

_STRING_INTROS = frozenset(b"]P_^X")
# In ground, only ESC and ENQ change anything; the rest passes at regex speed.
_GROUND_STOP = re.compile(rb"[\x05\x1b]")
# A CSI of nothing but its own bytes: what the byte loop (``_csi``) makes of
# it too, at regex speed (most sequences of most programs).
_PLAIN_CSI = re.compile(rb"\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])")
_OSC_STOP = re.compile(rb"[\x07\x18\x1a\x1b]")
_STRING_STOP = re.compile(rb"[\x18\x1a\x1b]")


class Token:
    """One piece of the output, ``data[start:end]``.

    ``executed``: the C0 controls a sequence executed on its way (they
    draw even when the sequence is dropped). CSI: ``params`` (private
    marker included), ``inter``, ``final``, ``malformed``. ESCAPE:
    ``inter``, ``final``. STRING: ``intro`` (``]``, ``P``...), ``body``
    (between the intro and the terminator), ``terminator`` (BEL or ST)."""

    __slots__ = (
        "body",
        "end",
        "executed",
        "final",
        "inter",
        "intro",
        "kind",
        "malformed",
        "params",
        "start",
        "terminator",
    )

    def __init__(self, kind: str, start: int, end: int, executed: bytes = b"") -> None:
        self.kind = kind
        self.start = start
        self.end = end
        self.executed = executed
        self.params = b""
        self.inter = b""
        self.final = 0
        self.malformed = False
        self.intro = 0
        self.body = b""
        self.terminator = b""

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.start}, {self.end})"


def parse(data: bytes) -> tuple[list[Token], int]:
    """The tokens of ``data`` in order, covering it up to the returned
    offset: where a sequence the data does not finish begins (``len(data)``
    if none)."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(data):
        token = next_token(data, pos)
        if token.kind == OPEN:
            return tokens, token.start
        tokens.append(token)
        pos = token.end
    return tokens, len(data)


def next_token(data: bytes, pos: int) -> Token:
    """The token at ``pos`` (the parser in ground there, ``pos < len(data)``);
    its kind is OPEN if the data ends before it does."""
    b = data[pos]
    if b == ESC:
        return _sequence(data, pos)
    if b == ENQ:
        return Token(ENQUIRY, pos, pos + 1)
    m = _GROUND_STOP.search(data, pos)
    return Token(TEXT, pos, len(data) if m is None else m.start())


def _open(start: int) -> Token:
    return Token(OPEN, start, start)


def _sequence(data: bytes, start: int) -> Token:
    """The sequence whose ESC is at ``start``; ``open`` if the data ends
    first. An ABORTED token ends where the abandoning byte begins (an ESC
    starts the next sequence, CAN or SUB are text)."""
    plain = _PLAIN_CSI.match(data, start)
    if plain is not None:
        return _csi_token(start, plain.end(), plain[1], plain[2], plain[3][0], b"", False)
    executed = bytearray()
    inter = bytearray()
    pos = start + 1
    n = len(data)
    while pos < n:
        b = data[pos]
        if b == ESC or b in (CAN, SUB) or b >= 0x80:
            # A byte past ASCII is no part of any sequence: abandoned, it is text.
            return Token(ABORTED, start, pos, bytes(executed))
        if b < 0x20:
            executed.append(b)
        elif b == DEL:
            pass
        elif b < 0x30:
            inter.append(b)
        elif not inter and b == 0x5B:  # [
            return _csi(data, start, pos + 1, executed)
        elif not inter and b in _STRING_INTROS:
            return _string(data, start, pos, executed)
        else:
            token = Token(ESCAPE, start, pos + 1, bytes(executed))
            token.inter = bytes(inter)
            token.final = b
            return token
        pos += 1
    return _open(start)


def _csi(data: bytes, start: int, pos: int, executed: bytearray) -> Token:
    params = bytearray()
    inter = bytearray()
    malformed = False
    n = len(data)
    while pos < n:
        b = data[pos]
        if b == ESC or b in (CAN, SUB):
            return Token(ABORTED, start, pos, bytes(executed))
        if b < 0x20:
            executed.append(b)
        elif b == DEL:
            pass
        elif b < 0x30:
            inter.append(b)
        elif b < 0x40:
            if inter or (params and b in b"<=>?"):
                malformed = True
            params.append(b)
        elif b < 0x7F:
            return _csi_token(start, pos + 1, bytes(params), bytes(inter), b, executed, malformed)
        else:  # 0x80 and up
            malformed = True
        pos += 1
    return _open(start)


def _csi_token(
    start: int,
    end: int,
    params: bytes,
    inter: bytes,
    final: int,
    executed: bytes | bytearray,
    malformed: bool,
) -> Token:
    if not malformed and any(c in b"<=>?" for c in params[1:]):
        malformed = True
    token = Token(CSI, start, end, bytes(executed))
    token.params, token.inter, token.final, token.malformed = params, inter, final, malformed
    return token


def _string(data: bytes, start: int, intro_at: int, executed: bytearray) -> Token:
    intro = data[intro_at]
    stops = _OSC_STOP if intro == 0x5D else _STRING_STOP
    pos = intro_at + 1
    n = len(data)
    while True:
        m = stops.search(data, pos)
        if m is None:
            return _open(start)
        at = m.start()
        b = data[at]
        if b == BEL:
            return _string_token(data, start, intro_at, at, at + 1, executed)
        if b != ESC:  # CAN, SUB
            return Token(ABORTED, start, at, bytes(executed))
        if at + 1 >= n:
            return _open(start)
        after = data[at + 1]
        if after == 0x5C:  # \: ST
            return _string_token(data, start, intro_at, at, at + 2, executed)
        if intro == 0x50 and after == ESC:  # a DCS's doubled ESC (tmux passthrough)
            pos = at + 2
            continue
        return Token(ABORTED, start, at, bytes(executed))


def _string_token(
    data: bytes, start: int, intro_at: int, body_end: int, end: int, executed: bytearray
) -> Token:
    token = Token(STRING, start, end, bytes(executed))
    token.intro = data[intro_at]
    token.body = data[intro_at + 1 : body_end]
    token.terminator = data[body_end:end]
    return token
