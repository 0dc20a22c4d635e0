"""What a replay may write to a person's terminal (pure: bytes in, bytes
out). Output kept while nobody watched is written again later, to a
terminal the program never asked anything: it should draw the screen as
the program drew it, and do nothing else. Attach (its replay, and a
relaunched session's saved screen), peek to a terminal, and the notice of
``attach HOST:NAME`` all write through ``for_terminal``.

Read with the one parser (``_ecma48``), each token is kept byte for byte,
or dropped:

- **What a terminal answers** (the answer would reach the program, or the
  shell under ``peek``, as typed input): ENQ, DA1/DA2/DA3, DSR and CPR,
  DECRQM, XTVERSION, window reports (``CSI 11..21 t``), kitty's ``CSI ? u``,
  DECID, DECRQSS, XTGETTCAP, OSC colour and clipboard questions (``?``),
  iTerm2's reports, kitty graphics queries; a kitty image that would be
  acknowledged is kept, told to be quiet (``q=2``); a tmux passthrough
  carrying any of these is dropped whole.
- **What acts outside the screen**: clipboard writes and reads (OSC 52,
  iTerm2's ``Copy``, kitty's OSC 5522), desktop notifications (OSC 9, 99,
  777).
- **What draws nothing**: a sequence abandoned (by ESC, CAN, SUB) or
  malformed, which a terminal ignores; kept, terminals would read it
  differently (kitty keeps a string open past a bare ESC). The C0 controls
  such a sequence executed are kept: they draw.
- **Titles**: set once, to the latest (the last OSC 0/1/2 of the replay).
"""

from __future__ import annotations

import re

from multiserver_cli._ecma48 import CSI, ESCAPE, OPEN, STRING, TEXT, Token, next_token

_OSC, _DCS, _APC = 0x5D, 0x50, 0x5F
_ENQ = b"\x05"

# OSC commands whose arguments are text (titles, URIs, shell marks): a "?"
# in them is text, not a question.
_TEXT_OSC = frozenset({b"0", b"1", b"2", b"7", b"8", b"133", b"633", b"1337"})
_TITLES = frozenset({b"0", b"1", b"2"})
# Clipboard (xterm's 52, kitty's 5522) and desktop notifications
# (iTerm2/ConEmu 9, kitty 99, rxvt/foot 777).
_OUTSIDE_OSC = frozenset({b"52", b"5522", b"9", b"99", b"777"})
# iTerm2's 1337 commands that report, or write the clipboard.
_ITERM_DROPPED = (b"Report", b"Copy", b"RequestUpload")
# XTWINOPS reports: 11 13 14 15 16 18 19 20 21.
_WINDOW_REPORTS = frozenset({b"11", b"13", b"14", b"15", b"16", b"18", b"19", b"20", b"21"})


def _csi_answered(params: bytes, inter: bytes, final: int) -> bool:
    marker = params[:1] if params[:1] in (b"<", b"=", b">", b"?") else b""
    first = params[len(marker) :].split(b";")[0]
    f = chr(final)
    if f == "n":  # DSR, CPR, DECXCPR, kitty's colour scheme (?996n)...; ">n" sets
        return marker in (b"", b"?")
    if f == "c":  # DA1, DA2, DA3; "?c" is the Linux cursor
        return marker != b"?"
    if inter == b"$":
        # DECRQM (p), DECRQTSR (u), DECRQPSR (w)
        return f in "puw"
    if inter == b"":
        if marker == b">":
            return f == "q"  # XTVERSION
        if marker == b"?":
            return f in "umS"  # kitty keyboard flags, XTQMODKEYS, XTSMGRAPHICS
        if marker == b"":
            return (f == "t" and first in _WINDOW_REPORTS) or (
                f == "x" and first in (b"", b"0", b"1")  # DECREQTPARM
            )
        return False
    # DECRQUPSS, DECRQCRA, XTREPORTSGR, DECRQDE, DECRQLP
    return (inter, f) in ((b"&", "u"), (b"*", "y"), (b"#", "|"), (b'"', "v"), (b"'", "|"))


def _osc_number(body: bytes) -> bytes:
    return body.partition(b";")[0]


def _osc_dropped(body: bytes) -> bool:
    number, _, args = body.partition(b";")
    if number in _OUTSIDE_OSC:
        return True
    if number == b"1337":
        return args.startswith(_ITERM_DROPPED)
    if number in _TEXT_OSC:
        return False
    # OSC 4;N;?  10;?  22;?name (kitty pointer)  21;fg=? (kitty colours)
    return any(f.startswith(b"?") or f.endswith(b"=?") for f in args.split(b";"))


def _dcs_dropped(body: bytes) -> bool:
    if body.startswith((b"$q", b"+q", b"+Q")):  # DECRQSS, XTGETTCAP, XTGETXRES
        return True
    if body.startswith(b"tmux;"):  # passthrough: what it carries reaches the outer terminal
        inner = body[len(b"tmux;") :].replace(b"\x1b\x1b", b"\x1b")
        body_kept, tail = for_terminal(inner)
        return body_kept + tail != inner
    return False


def _kitty_graphics(body: bytes) -> bytes | None:
    """An APC's body as a replay writes it: a kitty graphics query dropped
    (None), a command kitty would acknowledge made quiet (``q=2``)."""
    if not body.startswith(b"G"):
        return body
    keys, semi, payload = body[1:].partition(b";")
    pairs = [p.partition(b"=") for p in keys.split(b",") if p]
    given = {k: v for k, _, v in pairs}
    if given.get(b"a") == b"q":
        return None
    if given.get(b"q") == b"2" or not (b"i" in given or b"I" in given):
        return body
    kept = [k + eq + v for k, eq, v in pairs if k != b"q"]
    return b"G" + b",".join([*kept, b"q=2"]) + semi + payload


def _string(data: bytes, token: Token) -> bytes:
    """What of a string token a replay writes."""
    raw = data[token.start : token.end]
    if token.intro == _OSC and _osc_dropped(token.body):
        return b""
    if token.intro == _DCS and _dcs_dropped(token.body):
        return b""
    if token.intro == _APC:
        body = _kitty_graphics(token.body)
        if body is None:
            return b""
        if body != token.body:
            return data[token.start : token.end - len(token.body) - len(token.terminator)] + (
                body + token.terminator
            )
    return raw


# A run of what only draws, taken whole at regex speed (most of most
# programs' output): text, and sequences of nothing but their own bytes
# that no terminal answers: a CSI without marker or intermediates and a
# final byte that is never a question's (n, c, t, x), DEC modes set and
# reset, an escape sequence
# other than a string's start, a CSI's and DECID. What the parser makes of
# such a run is the same tokens, each kept byte for byte.
_DRAWS_ONLY = re.compile(
    rb"""(?:
        [^\x05\x1b]+
      | \x1b\[ [0-9:;]* [\x40-\x62\x64-\x6d\x6f-\x73\x75-\x77\x79-\x7e]
      | \x1b\[ \? [0-9;]* [hl]
      | \x1b [\x30-\x4f\x51-\x57\x59\x5c\x60-\x7e]
      | \x1b [\x20-\x2f]+ [\x30-\x7e]
    )+""",
    re.VERBOSE,
)


def _kept(data: bytes, token: Token) -> bytes:
    """What of one token a replay writes."""
    kind = token.kind
    if kind == TEXT:
        return data[token.start : token.end]
    if kind == CSI:
        if token.malformed or _csi_answered(token.params, token.inter, token.final):
            return token.executed
        return data[token.start : token.end]
    if kind == ESCAPE:
        if token.final == 0x5A and not token.inter:  # DECID: answered as DA1
            return token.executed
        return data[token.start : token.end]
    if kind == STRING:
        return _string(data, token) or token.executed
    return token.executed  # ABORTED, ENQUIRY


def for_terminal(data: bytes) -> tuple[bytes, bytes]:
    """(what of ``data`` a replay writes, the unfinished sequence at its
    end as it is). Whatever is written between the two reaches the
    terminal with its parser at rest."""
    pieces: list[bytes] = []
    titles: list[tuple[int, bytes]] = []  # (piece, what stands for it if not the last)
    pos, end = 0, len(data)
    while pos < end:
        run = _DRAWS_ONLY.match(data, pos)
        if run is not None:
            pieces.append(run[0])
            pos = run.end()
            continue
        token = next_token(data, pos)
        if token.kind == OPEN:
            end = token.start
            break
        if token.kind == STRING and token.intro == _OSC and _osc_number(token.body) in _TITLES:
            titles.append((len(pieces), token.executed))
        pieces.append(_kept(data, token))
        pos = token.end
    for k, instead in titles[:-1]:  # the title set once, to the latest
        pieces[k] = instead
    # ENQ executes wherever it is (in a sequence too) and changes no state:
    # taken out alone, it leaves every other byte's meaning as it was.
    return b"".join(pieces).replace(_ENQ, b""), data[end:]


def strip_for_terminal(data: bytes) -> bytes:
    """``data`` as a replay writes it, an unfinished sequence at its end
    left out: for output that ends there (``peek``, a notice)."""
    return for_terminal(data)[0]
