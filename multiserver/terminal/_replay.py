"""What a replay may write to a person's terminal (pure: bytes in, bytes
out). Output kept while nobody watched is written again later, to a
terminal the program never asked anything: it should draw the screen as the
program drew it, and do nothing else. Attach (its replay, and a relaunched
session's saved screen), peek to a terminal, and the notice of ``attach
HOST:NAME`` all write through ``for_terminal``.

**Only what is known to draw passes**: the output is read with the one
parser (``_ecma48``, which reads C1 controls in both encodings), and each
token is written again only if the one table (``_draws``) names it, in a
form of its own making (``ESC [`` parameters final; a title's text alone),
or dropped whole. What a dropped sequence executed on its way (the C0
controls of ``CONTROLS``) is kept: those draw. A byte that is no UTF-8
character is written as U+FFFD, as a UTF-8 terminal shows it. The window
title is set once, to the latest.

The replay's end may cut a sequence or a character: ``for_terminal`` hands
it back unwritten, and ``ReplayEnd`` finishes it with the live output that
follows, as a replay's, before that output goes on as it comes.
"""

from __future__ import annotations

import re

from multiserver.terminal._draws import (
    CONTROLS,
    ESCAPES,
    MODE_BY_NUMBER,
    PARAM_MAX,
    SEQUENCES,
    TITLE_MAX,
    TITLES,
    Sequence,
)
from multiserver.terminal._ecma48 import (
    CONTROL,
    CSI,
    ESCAPE,
    OPEN,
    STRING,
    TEXT,
    Token,
    complete_utf8,
    decode,
    encode,
    next_token,
)

_MARKERS = ("<", "=", ">", "?")


def _mode_runs() -> str:
    """The single modes of the table a replay writes as they come (kept:
    set or reset; a trap: put back), as regex alternatives."""
    forms = [
        f"{'[?]' if m.private else ''}{m.number}{'[hl]' if m.kept else m.safe}"
        for m in MODE_BY_NUMBER.values()
    ]
    return "|".join(sorted(forms, key=len, reverse=True))


# A run of what the table keeps, taken whole at regex speed (most of most
# programs' output): text and the C0 controls kept, and the commonest
# sequences in the form the table writes them (so a run is written as the
# tokens one by one would be: a test holds the two to each other).
_DRAWS_ONLY = re.compile(
    r"""(?:
        [^\x00-\x07\x10-\x1f\x7f-\x9f\ud800-\udfff]+
      | \x1b\[ [0-9]{0,4} (?:[;:][0-9]{0,4}){0,31} m
      | \x1b\[ [0-9]{0,4} (?:;[0-9]{0,4})? [Hfr]
      | \x1b\[ [0-9]{0,4} [@A-GILMPSTXZ`abde]
      | \x1b\[ [012]? [JK]
      | \x1b\[ (?:"""
    + _mode_runs()
    + r""")
      | \x1b [78DEM=>]
      | \x1b [()] [B0]
    )+""",
    re.VERBOSE,
)


def _controls(executed: str) -> str:
    return "".join(ch for ch in executed if ch in CONTROLS)


def _fits(params: str, rule: Sequence) -> bool:
    """Whether ``params`` are numbers the rule takes."""
    if not params:
        return rule.first is None or 0 in rule.first
    fields = params.split(";")
    if len(fields) > rule.most:
        return False
    for i, field in enumerate(fields):
        parts = field.split(":") if rule.sub else [field]
        for part in parts:
            if part and not (part.isdigit() and part.isascii() and int(part) <= PARAM_MAX):
                return False
        if i == 0 and rule.first is not None and int(parts[0] or "0") not in rule.first:
            return False
    return True


def _modes(marker: str, params: str, value: str) -> str:
    """``CSI [?] Pm h/l`` with only the modes of the table a replay may
    write so (``Mode.kept``, or back to ``safe``)."""
    kept = []
    for field in params.split(";"):
        if not (field.isdigit() and field.isascii() and len(field) <= 5):
            continue
        mode = MODE_BY_NUMBER.get((marker == "?", int(field)))
        if mode is not None and (mode.kept or value == mode.safe):
            kept.append(str(mode.number))
    return f"\x1b[{marker}{';'.join(kept)}{value}" if kept else ""


def _csi(token: Token) -> str:
    if token.c1 or token.malformed:
        return ""
    marker = token.params[:1] if token.params[:1] in _MARKERS else ""
    params = token.params[len(marker) :]
    if token.final in ("h", "l") and not token.inter and marker in ("", "?"):
        return _modes(marker, params, token.final)
    rule = SEQUENCES.get((marker, token.inter, token.final))
    if rule is None or not _fits(params, rule):
        return ""
    return f"\x1b[{marker}{params}{token.inter}{token.final}"


def _title(token: Token) -> str | None:
    """The title a string sets, as a replay writes it; None if it is none."""
    if token.c1 or token.intro != "]":
        return None
    number, semi, text = token.body.partition(";")
    if not semi or number not in TITLES:
        return None
    # Printable alone, as every name a person is shown (``printable``): no
    # control, nor a format character such as a bidi override.
    shown = "".join(ch for ch in text if ch.isprintable())[:TITLE_MAX]
    return f"\x1b]{number};{shown}\x1b\\"


def _kept(token: Token) -> str:
    """What of one token (not text) a replay writes."""
    kind = token.kind
    if kind == CSI:
        return _controls(token.executed) + _csi(token)
    if kind == ESCAPE and (token.inter, token.final) in ESCAPES:
        return f"{_controls(token.executed)}\x1b{token.inter}{token.final}"
    if kind == STRING:
        return _controls(token.executed) + (_title(token) or "")
    return _controls(token.executed)  # ESCAPE not in the table, ABORTED


def _control(ch: str) -> str:
    """A control as a replay writes it: kept if the table names it; a byte
    that is no character as U+FFFD; dropped otherwise (C0, DEL, C1)."""
    if ch in CONTROLS:
        return ch
    return "\ufffd" if 0xDCA0 <= ord(ch) <= 0xDCFF else ""


def for_terminal(data: bytes) -> tuple[bytes, bytes]:
    """(what of ``data`` a replay writes, the unfinished sequence or
    character at its end, unwritten). What is written leaves the
    terminal's parser at rest."""
    whole = complete_utf8(data)
    text = decode(data[:whole])
    pieces: list[str] = []
    titles: list[tuple[int, str]] = []  # (piece, what stands for it if not the last)
    pos, end = 0, len(text)
    while pos < end:
        run = _DRAWS_ONLY.match(text, pos)
        if run is not None:
            pieces.append(run[0])
            pos = run.end()
            continue
        token = next_token(text, pos)
        if token.kind == OPEN:
            end = token.start
            break
        if token.kind in (CONTROL, TEXT):  # text: a run the fast path did not take whole
            piece = text[pos : token.end]
            pieces.append(piece if token.kind == TEXT else _control(piece))
            pos = token.end
            continue
        kept = _kept(token)
        if token.kind == STRING and kept.endswith("\x1b\\"):  # a title
            titles.append((len(pieces), _controls(token.executed)))
        pieces.append(kept)
        pos = token.end
    for k, instead in titles[:-1]:  # the title set once, to the latest
        pieces[k] = instead
    return "".join(pieces).encode(), encode(text[end:]) + data[whole:]


def strip_for_terminal(data: bytes) -> bytes:
    """``data`` as a replay writes it, an unfinished end left out: for
    output that ends there (``peek``, a notice)."""
    return for_terminal(data)[0]


# The most a replay's unfinished end is held for the live output to finish
# it: past it, the sequence is dropped, never written open.
TAIL_MAX = 64 * 1024


class ReplayEnd:
    """The live output after a replay whose end was cut (``for_terminal``'s
    tail): held until it finishes the first sequence, which is written as a
    replay's is; from there on it goes on as it comes."""

    def __init__(self, tail: bytes) -> None:
        self._held = tail

    @property
    def pending(self) -> bool:
        return bool(self._held)

    def feed(self, data: bytes) -> bytes:
        """What of the live output ``data`` to write now."""
        if not self._held:
            return data
        held = self._held + data
        whole = complete_utf8(held)
        text = decode(held[:whole])
        token = next_token(text, 0) if text else None
        if token is None or token.kind == OPEN:
            self._held = b"" if len(held) > TAIL_MAX else held
            return b""
        first = len(encode(text[: token.end]))
        self._held = b""
        return strip_for_terminal(held[:first]) + held[first:]
