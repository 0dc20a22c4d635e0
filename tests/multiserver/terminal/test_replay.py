"""What a replay writes to a person's terminal (``multiserver.for_terminal``
on the one parser, ``multiserver.terminal._ecma48``, and the one table,
``multiserver.terminal._draws``): only what draws.

Three checks written here, apart from the parser:

- ``drawn_tokens``, a strict tokenizer of what a replay wrote: it must be
  UTF-8 with no C1 character, and every piece text, a control of the table,
  or a sequence the table names, in the table's own form;
- ``answers``, a terminal as a model (what it answers, read the way xterm
  reads strings and the way kitty does, C1 controls in both encodings
  taken as kitty takes them);
- pyte, which answers DA1 and DSR as a terminal does.
"""

from __future__ import annotations

import itertools
import re

import pyte
import pytest
from hypothesis import given, settings, strategies as st

from multiserver import ReplayEnd, for_terminal
from multiserver.terminal._draws import (
    CONTROLS,
    ESCAPES,
    MODE_BY_NUMBER,
    PARAM_MAX,
    SEQUENCES,
    TITLE_MAX,
    TITLES,
)
from multiserver.terminal._ecma48 import OPEN, TEXT, decode, next_token, parse


def strip(data: bytes) -> bytes:
    """A whole replay as written, the unfinished end left out (not yet
    sent to the terminal: live output finishes it)."""
    return for_terminal(data)[0]


def c1(*codes: int) -> list[bytes]:
    """C1 controls in both encodings: the character, and the raw byte."""
    return [b for code in codes for b in (chr(code).encode(), bytes([code]))]


CSI_C1 = c1(0x9B)
OSC_C1 = c1(0x9D)
DCS_C1 = c1(0x90)
ST_C1 = c1(0x9C)

QUERIES = [
    b"\x1b[5n",  # DSR status
    b"\x1b[6n",  # CPR
    b"\x1b[?6n",  # DECXCPR
    b"\x1b[?15n",  # printer status
    b"\x1b[?996n",  # colour scheme
    b"\x1b[c",  # DA1
    b"\x1b[0c",
    b"\x1b[>c",  # DA2
    b"\x1b[>0c",
    b"\x1b[=c",  # DA3
    b"\x1b[=0c",
    b"\x1b[?2004$p",  # DECRQM, DEC mode
    b"\x1b[4$p",  # DECRQM, ANSI mode
    b"\x1bP$qm\x1b\\",  # DECRQSS
    b'\x1bP$q"p\x1b\\',
    b"\x1b[>q",  # XTVERSION
    b"\x1b[>0q",
    b"\x1bP+q544e\x1b\\",  # XTGETTCAP
    b"\x1b]4;1;?\x07",  # palette colour
    b"\x1b]4;1;?\x1b\\",
    b"\x1b]10;?\x07",  # foreground
    b"\x1b]11;?\x1b\\",  # background
    b"\x1b]12;?\x07",  # cursor colour
    b"\x1b]10;?;?\x07",  # two at once
    b"\x1b]52;c;?\x07",  # clipboard
    b"\x1b]21;foreground=?\x1b\\",  # kitty colours
    b"\x1b]22;?__current__\x1b\\",  # kitty pointer shape
    b"\x1b[?u",  # kitty keyboard flags
    b"\x1b[11t",  # XTWINOPS reports
    b"\x1b[13t",
    b"\x1b[13;2t",
    b"\x1b[14t",
    b"\x1b[14;2t",
    b"\x1b[15t",
    b"\x1b[16t",
    b"\x1b[18t",
    b"\x1b[19t",
    b"\x1b[20t",
    b"\x1b[21t",
    b"\x1b[?4m",  # XTQMODKEYS
    b"\x1b[?1;1S",  # XTSMGRAPHICS
    b"\x1b[1;1;1;1;1;1*y",  # DECRQCRA
    b"\x1b[x",  # DECREQTPARM
    b"\x1b[1x",
    b"\x1bZ",  # DECID
    b"\x05",  # ENQ
    b"\x1b_Ga=q,i=31;AAAA\x1b\\",  # kitty graphics query
    b"\x1b_Gi=7,a=T,f=100;AAAA\x1b\\",  # kitty graphics, acknowledged
    b"\x1b[\x08c",  # DA1 with a C0 inside: the terminal executes BS, then answers
    b"\x1b[6\x0bn",  # CPR with a VT inside
    b"\x1b\x08[c",  # a C0 after the ESC: still a CSI
    b"\x1b[6\x05n",  # ENQ inside: two answers
    b"\x1b[?1;2$p",  # DECRQM, two parameters
    b"\x1b[0$u\x1b[1$w\x1b[&u",  # DECRQTSR, DECRQPSR, DECRQUPSS
    b'\x1b["v',  # DECRQDE
    b"\x1b[1'|",  # DECRQLP
    b"\x1b[#|",  # XTREPORTSGR
    b"\x1bP+Q666f6f\x1b\\",  # XTGETXRES
    b"\x1b]5;0;?\x07",  # special colour
    b"\x1b]1337;ReportCellSize\x07",  # iTerm2
    b"\x1bPtmux;\x1b\x1b[c\x1b\\",  # DA1 through tmux's passthrough
    # The same questions in C1 controls, both encodings (issue 34).
    *(intro + q for intro in CSI_C1 for q in (b"6n", b"c", b">c", b"?2004$p")),
    *(intro + b"11;?" + st for intro in OSC_C1 for st in [b"\x07", *ST_C1]),
    *(intro + b"+q544e" + st for intro in DCS_C1 for st in [b"\x1b\\", *ST_C1]),
]

# What draws, each kept byte for byte (the table's own form).
DRAWS = [
    b"\x1b[1;31m",
    b"\x1b[m",
    b"\x1b[38:2::255:0:0m\x1b[4:3m",  # sub-parameters: colour, undercurl
    b"\x1b[2J\x1b[H",
    b"\x1b[10;20H",
    b"\x1b[?1049h\x1b[?1049l",
    b"\x1b[?25l",
    b"\x1b[1;24r",
    b"\x1b[>4;2m",  # modifyOtherKeys on
    b"\x1b[>1u",  # kitty keyboard push
    b"\x1b[<u",  # and pop
    b"\x1b[=5;1u",  # and set
    b"\x1b[2 q",  # cursor shape
    b"\x1b[6 q",
    b"\x1b7\x1b8\x1b(B\x1b=\x1b>",
    b"\x1b(0lqqk\x1b(B",  # line drawing
    b"\x1b)0\x0eq\x0f",
    b"\x1b[?1049h\x1b[?1000;1006h\x1b[?25l",
    b"\x1b[4h\x1b[4l",  # insert mode
    b"\x1b[2l\x1b[12l\x1b[20l",  # trap modes, put back
    b"\x1b[3@\x1b[2P\x1b[5X\x1b[3L\x1b[3M\x1b[2S\x1b[2T\x1b[3b\x1b[4d\x1b[5`",
    b"\x1bM\x1bD\x1bE\x1bH\x1b[3g",
    "héllo wörld ✓ 日本\r\n\t\x08".encode(),
]

# Commands, not questions, that draw nothing on the screen: dropped whole.
DROPPED = [
    b"\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07",  # clipboard write
    b"\x1b]52;p;aGk=\x1b\\",
    b"\x1b]52;c;!\x07",  # clipboard cleared
    b"\x1b]5522;type=write\x1b\\",  # kitty's clipboard
    b"\x1b]1337;Copy=:aGk=\x07",  # iTerm2's
    b"\x1b]9;build done\x07",  # notifications: iTerm2
    b"\x1b]99;i=1:d=0;Hello\x1b\\",  # kitty
    b"\x1b]777;notify;title;body\x07",  # rxvt, foot
    b'\x1bP@kitty-cmd{"cmd":"launch","args":["sh","-c","id > /tmp/x"]}\x1b\\',  # kitty remote
    b"\x1b]8;;https://example.org/\x1b\\",  # a link (its text stays)
    b"\x1b]7;file:///tmp\x07\x1b]133;A\x07",  # cwd, shell marks
    b"\x1b]4;1;rgb:ff/00/00\x07\x1b]11;#000\x07",  # colours set
    b"\x1b]1337;SetUserVar=a=Pw==\x07",
    b"\x1b_Ga=T,f=100;AAAA\x1b\\",  # kitty graphics
    b"\x1bPq#0;2;0;0;0#0~~@@\x1b\\",  # sixel
    b"\x1b^privacy message\x1b\\\x1bXstart of string\x1b\\",  # PM, SOS
    b"\x1bPtmux;\x1b\x1b[1m\x1b\\",  # tmux passthrough
    b"\x1b[2h",  # KAM: the keyboard locked
    b"\x1b[12h\x1b[20h",  # local echo on (xterm), Enter sends CR LF
    b"\x1b[?5h\x1b[?8l\x1b[?2l",  # reverse video, no autorepeat, VT52 mode
    b"\x1b[3J",  # the terminal's own history erased
    b"\x1b[2;3J",
    b"\x1b[22;0;0t\x1b[23;0;0t\x1b[8;24;80t",  # title stack, resize
    b"\x1b[!p\x1bc\x1b#8",  # soft reset, RIS, screen alignment
    b"\x1b[0%m\x1b[?8c",  # vim's probe, the Linux console's cursor
    b"\x1b[>4n",  # XTMODKEYS off
    b"\x1b[99999b\x1b[10000A",  # counts past PARAM_MAX
    b"\x1b[1" + b";1" * 32 + b"m",  # 33 parameters
    b"\x1b%G\x1b N",  # UTF-8 select, 7-bit controls
    # C1 controls (issue 34): every one, both encodings, with what it starts.
    *(intro + b"1;31m" for intro in CSI_C1),
    *(intro + b"?1049h" for intro in CSI_C1),
    *(intro + b">1u" for intro in CSI_C1),
    *(intro + b"52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==" + st for intro in OSC_C1 for st in ST_C1),
    *(intro + b"0;title" + st for intro in OSC_C1 for st in [b"\x07", *ST_C1]),
    *(intro + b"@kitty-cmd{}" + st for intro in DCS_C1 for st in [b"\x1b\\", *ST_C1]),
    *c1(0x84, 0x85, 0x88, 0x8D, 0x8E, 0x8F, 0x9A, 0x9C),
    *(intro + b"body" + st for intro in c1(0x9F, 0x9E, 0x98) for st in [b"\x1b\\", *ST_C1]),
    b"\x07\x00\x7f\x05\x1a",  # BEL, NUL, DEL, ENQ, SUB
]


@pytest.mark.parametrize("query", QUERIES)
def test_each_query_is_removed_and_the_text_around_it_kept(query: bytes) -> None:
    got = strip(b"before" + query + b"after")
    # The C0 controls a query executed on its way draw: they stay.
    executed = bytes(b for b in query if b < 0x20 and chr(b) in CONTROLS)
    assert got == b"before" + executed + b"after"
    assert strip(query * 3) == executed * 3


@pytest.mark.parametrize("sequence", DRAWS)
def test_what_draws_is_kept_byte_for_byte(sequence: bytes) -> None:
    data = b"a" + sequence + b"b"
    assert for_terminal(data) == (data, b"")


@pytest.mark.parametrize("sequence", DROPPED)
def test_what_draws_nothing_is_dropped_whole(sequence: bytes) -> None:
    assert strip(b"a" + sequence + b"b") == b"ab"


def test_a_control_inside_a_kept_sequence_is_written_before_it() -> None:
    """A terminal executes a C0 control met inside a sequence at once, and
    the sequence at its end: the table's form writes the two so."""
    assert strip(b"\x1b[1;2\x08H") == b"\x08\x1b[1;2H"
    assert strip(b"\x1b\x0d7") == b"\x0d\x1b7"


def test_modes_not_in_the_table_are_dropped_from_a_list_the_rest_kept() -> None:
    assert strip(b"\x1b[?1049;2;1000;5h") == b"\x1b[?1049;1000h"
    assert strip(b"\x1b[2;4;12;20h") == b"\x1b[4h"  # only insert mode may be set
    assert strip(b"\x1b[?99999h\x1b[?;h") == b""


def test_the_title_is_set_once_to_the_latest_as_text_alone() -> None:
    data = b"\x1b]0;one\x07a\x1b]2;two\x1b\\b\x1b]2;th\x07ree\x07c"
    assert strip(data) == b"ab\x1b]2;th\x1b\\reec"
    # Controls in a title go; it is cut at TITLE_MAX characters.
    assert strip(b"\x1b]2;a\x01b\x7fc\x08\x1b\\") == b"\x1b]2;abc\x1b\\"
    # An ESC in it abandons it (xterm), a C1 control too (kitty).
    assert strip(b"\x1b]2;a\x1b[6nc\x1b\\") == b"c"
    assert strip("\x1b]2;a\u009b6nc\x1b\\".encode()) == b"c"
    assert strip(b"\x1b]2;" + "é".encode() * 600 + b"\x07") == (
        b"\x1b]2;" + "é".encode() * TITLE_MAX + b"\x1b\\"
    )
    # A bidi override would reorder what the title bar shows: not printable.
    assert strip("\x1b]2;abc\u202edef\x07".encode()) == b"\x1b]2;abcdef\x1b\\"
    # A title in C1 controls is no title.
    assert strip("\u009d2;x\u009c".encode()) == b""


def test_bytes_that_are_no_character_show_as_the_replacement_character() -> None:
    assert strip(b"a\xff\xfeb\xc3(") == "a\ufffd\ufffdb\ufffd(".encode()
    assert strip(b"a\xa0b") == "a\ufffdb".encode()


def test_a_sequence_abandoned_draws_nothing_but_its_controls() -> None:
    """A terminal abandons ESC [ 1 ; at the next ESC, and an OSC at ESC
    (xterm) or not (kitty, which would then swallow what follows): the
    abandoned part goes, what comes after is read as a sequence of its own."""
    assert strip(b"\x1b[1;\x1b[6nx") == b"x"
    assert strip(b"\x1b[6\x18n") == b"n"  # CAN aborts: no query then
    assert strip(b"\x1b]0;title\x1b[?1049hx") == b"\x1b[?1049hx"
    assert strip(b"\x1b[1\x08;\x1b[m") == b"\x08\x1b[m"
    assert strip(b"\x1b[1;" + "é".encode() + b"m") == b""  # malformed: dropped
    assert strip(b"\x1b[" + b"1;" * 600 + b"mX") == (b"1;" * 600)[510:] + b"mX"


@pytest.mark.parametrize(
    ("replay", "tail"),
    [
        (b"abc\x1b", b"\x1b"),
        (b"abc\x1b[6", b"\x1b[6"),
        (b"abc\x1b(", b"\x1b("),
        (b"abc\x1b]52;c;aGVsb", b"\x1b]52;c;aGVsb"),
        (b"abc\x1bP$qm\x1b", b"\x1bP$qm\x1b"),
        (b"abc\x1bPtmux;\x1b\x1b", b"\x1bPtmux;\x1b\x1b"),
        (b"abc\xe2\x82", b"\xe2\x82"),  # a character cut
        (b"abc\xc2", b"\xc2"),  # perhaps a C1 CSI
        (b"abc\x9b6", b"\x9b6"),
        ("abc\u009d52;c;".encode(), "\u009d52;c;".encode()),
    ],
)
def test_an_unfinished_sequence_is_the_tail(replay: bytes, tail: bytes) -> None:
    assert for_terminal(replay) == (b"abc", tail)


@pytest.mark.parametrize(
    ("tail", "live", "written"),
    [
        (b"\x1b[3", b"8;5;1mX\x1b[6n", b"\x1b[38;5;1mX\x1b[6n"),  # live goes on as it comes
        (b"\x1b[6", b"nY", b"Y"),  # a question the end and the live output make
        (b"\x1b]52;c;AAA", b"BBB\x07rest", b"rest"),
        (b"\x1b]2;ti", b"tle\x07Z", b"\x1b]2;title\x1b\\Z"),
        (b"\xe2\x82", b"\xacok", "€ok".encode()),
        (b"\xc2", b"\x9b6nQ", b"Q"),
        (b"\x1bP@kitty-cmd{", b'"cmd":"launch"}\x1b\\\x1b[6n', b"\x1b[6n"),
    ],
)
def test_a_cut_end_is_finished_by_the_live_output_as_a_replay(
    tail: bytes, live: bytes, written: bytes
) -> None:
    for cut in range(len(live) + 1):
        end = ReplayEnd(tail)
        got = end.feed(live[:cut]) + end.feed(live[cut:])
        assert got == written and not end.pending, cut


def test_a_cut_end_is_held_at_most_tail_max_then_dropped() -> None:
    from multiserver.terminal._replay import TAIL_MAX

    end = ReplayEnd(b"\x1b]52;c;")
    assert end.feed(b"A" * (TAIL_MAX // 2)) == b""
    assert end.pending
    assert end.feed(b"A" * TAIL_MAX) == b""  # past the bound: dropped, never written open
    assert not end.pending
    assert end.feed(b"B\x07") == b"B\x07"  # live output from there on, as it comes


# --- what a replay writes, read by a strict tokenizer of its own ----------------------

_DRAWN_CHAR = re.compile("[^\x00-\x1f\x7f-\x9f]")
_CSI = re.compile(r"\x1b\[([<=>?]?)([0-9;:]*)([ -/]*)([@-~])")
_TITLE = re.compile("\x1b\\](0|1|2);([^\x00-\x1f\x7f-\x9f]*)\x1b\\\\")
_ESC = re.compile(r"\x1b([ -/]*)([0-~])")


def _csi_in_table(marker: str, params: str, inter: str, final: str) -> bool:
    if final in "hl" and not inter and marker in ("", "?"):
        modes = [MODE_BY_NUMBER.get((marker == "?", int(p))) for p in params.split(";")]
        return all(m is not None and (m.kept or m.safe == final) for m in modes)
    rule = SEQUENCES.get((marker, inter, final))
    if rule is None:
        return False
    fields = params.split(";") if params else []
    numbers = [int(n or "0") for f in fields for n in f.split(":")]
    return (
        len(fields) <= rule.most
        and (rule.sub or ":" not in params)
        and all(n <= PARAM_MAX for n in numbers)
        and (rule.first is None or int((fields or ["0"])[0].split(":")[0] or "0") in rule.first)
    )


def drawn_tokens(written: bytes) -> list[str]:
    """``written`` as a strict reader splits it, failing on anything that
    is not text, a control of the table or a sequence the table names."""
    text = written.decode("utf-8")  # strict: no byte that is no character
    out: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch in CONTROLS or _DRAWN_CHAR.match(ch):
            out.append(ch)
            pos += 1
            continue
        assert ch == "\x1b", f"{ch!r} at {pos} of {text!r}"
        csi, title, esc = (r.match(text, pos) for r in (_CSI, _TITLE, _ESC))
        if csi is not None:
            assert _csi_in_table(*csi.groups()), csi[0]
            m = csi
        elif title is not None:
            assert len(title[2]) <= TITLE_MAX and title[1] in TITLES
            m = title
        else:
            assert esc is not None and (esc[1], esc[2]) in ESCAPES, text[pos : pos + 8]
            m = esc
        out.append(m[0])
        pos = m.end()
    return out


# --- a terminal, as a model: what it answers ---------------------------------------

_REPORTS = {b"11", b"13", b"14", b"15", b"16", b"18", b"19", b"20", b"21"}
_C1 = {0x9B: "csi", 0x9D: 0x5D, 0x90: 0x50, 0x9F: 0x5F, 0x9E: 0x5E, 0x98: 0x58}


def _csi_answer(params: bytes, inter: bytes, final: str) -> bool:
    marker = params[:1] if params[:1] and params[:1] in b"<=>?" else b""
    first = params[len(marker) :].split(b";")[0]
    table = {
        ("", "", "n"), ("?", "", "n"), ("", "", "c"), (">", "", "c"), ("=", "", "c"),
        ("", "$", "p"), ("?", "$", "p"), (">", "", "q"), ("?", "", "u"), ("", "$", "u"),
        ("", "$", "w"), ("", "&", "u"), ("?", "", "m"), ("?", "", "S"), ("", "*", "y"),
        ("", "#", "|"), ("", '"', "v"), ("", "'", "|"),
    }  # fmt: skip
    if (marker.decode(), inter.decode("latin-1"), final) in table:
        return True
    if final in "nc" and marker in (b"", b"?" if final == "n" else b">"):
        return True  # lenient: intermediates ignored
    return (marker, inter) == (b"", b"") and (
        (final == "t" and first in _REPORTS) or (final == "x" and first in (b"", b"0", b"1"))
    )


def _string_answer(kind: int, body: bytes, kitty: bool) -> list[bytes]:
    if kind == 0x5D:
        number, _, args = body.partition(b";")
        if number == b"1337":
            return [body] if args.startswith(b"Report") else []
        if number in (b"0", b"1", b"2", b"7", b"8", b"133"):
            return []
        return (
            [body] if any(f.startswith(b"?") or f.endswith(b"=?") for f in args.split(b";")) else []
        )
    if kind == 0x50:
        if body.startswith((b"$q", b"+q", b"+Q")):
            return [body]
        if body.startswith(b"tmux;"):
            return answers(body[5:].replace(b"\x1b\x1b", b"\x1b"), kitty)
    if kind == 0x5F and body.startswith(b"G"):
        keys = dict(p.partition(b"=")[::2] for p in body[1:].split(b";")[0].split(b","))
        if keys.get(b"a") == b"q" or ((b"i" in keys or b"I" in keys) and keys.get(b"q") != b"2"):
            return [body]
    return []


def _units(data: bytes) -> list[int]:
    """The data as a UTF-8 terminal acts on it: ASCII as bytes, a C1
    control as its code, in either encoding (the character, or a raw byte
    that is no part of one), as kitty takes it; any other character 0x100."""
    out: list[int] = []
    for ch in data.decode("utf-8", "surrogateescape"):
        o = ord(ch)
        if o < 0x80 or 0x80 <= o <= 0x9F:
            out.append(o)
        elif 0xDC80 <= o <= 0xDC9F:
            out.append(o - 0xDC00)
        else:
            out.append(0x100)
    return out


def answers(data: bytes, kitty: bool = False) -> list[bytes]:
    """What a terminal answers to ``data``: a VT500 parser, unit by unit,
    lenient (a malformed CSI is judged as if it were not), C1 controls
    acted on in both encodings. ``kitty``: strings end only at ST or BEL."""
    said: list[bytes] = []
    state, params, inter, body, kind = "ground", b"", b"", b"", 0
    units = _units(data)
    i = 0
    while i < len(units):
        b = units[i]
        i += 1
        if state == "string":
            if (b == 0x1B and i < len(units) and units[i] == 0x5C) or b == 0x9C:
                i += b == 0x1B
                said += _string_answer(kind, body, kitty)
                state = "ground"
            elif b == 0x07 and (kind == 0x5D or kitty):
                said += _string_answer(kind, body, kitty)
                state = "ground"
            elif b in (0x18, 0x1A):
                state = "ground"
            elif b == 0x1B and kind == 0x50 and i < len(units) and units[i] == 0x1B:
                body += b"\x1b\x1b"
                i += 1
            elif b == 0x1B and not kitty:
                state, inter = "esc", b""
            else:
                body += bytes([b & 0xFF])
            continue
        if b == 0x05:
            said.append(b"ENQ")
            continue
        if b == 0x1B:
            state, inter, params = "esc", b"", b""
            continue
        if b in _C1:
            intro = _C1[b]
            if intro == "csi":
                state, inter, params = "csi", b"", b""
            else:
                state, kind, body = "string", int(intro), b""
            continue
        if b in (0x18, 0x1A):
            state = "ground"
            continue
        if state == "ground" or b < 0x20 or b == 0x7F:
            continue  # text, or a C0 executed (in a sequence too)
        if b >= 0x80:
            if state == "esc":
                state = "ground"
            continue
        if state == "esc":
            if b < 0x30:
                inter += bytes([b])
            elif b == 0x5B and not inter:
                state = "csi"
            elif b in b"]P_^X" and not inter:
                state, kind, body = "string", b, b""
            else:
                if b == 0x5A and not inter:
                    said.append(b"DECID")
                state = "ground"
        elif state == "csi":
            if b < 0x30:
                inter += bytes([b])
            elif b < 0x40:
                params += bytes([b])
            else:
                if _csi_answer(params, inter, chr(b)):
                    said.append(b"CSI " + params + inter + bytes([b]))
                state = "ground"
    return said


def pyte_answers(data: bytes) -> list[str]:
    screen = pyte.Screen(80, 24)
    said: list[str] = []
    screen.write_process_input = said.append  # type: ignore[method-assign]
    pyte.ByteStream(screen).feed(data)
    return said


@pytest.mark.parametrize("query", QUERIES)
def test_the_model_answers_every_query(query: bytes) -> None:
    """The model is a check only if it answers what the filter drops."""
    assert answers(query) and answers(query, kitty=True)


@pytest.mark.parametrize("sequence", DRAWS)
def test_the_model_answers_nothing_that_draws_and_the_reader_takes_it(sequence: bytes) -> None:
    assert answers(sequence) == [] and answers(sequence, kitty=True) == []
    assert "".join(drawn_tokens(sequence)) == sequence.decode()


@pytest.mark.parametrize("sequence", QUERIES + DROPPED)
def test_the_reader_refuses_what_is_dropped(sequence: bytes) -> None:
    """The strict reader is a check only if it fails on what the filter
    drops (a C0 executed inside a query is text to it, and is kept)."""
    with pytest.raises((AssertionError, UnicodeDecodeError)):
        drawn_tokens(sequence)


# Pieces that make sequences when put together: introducers (7-bit, and C1
# in both encodings), parameters, finals, terminators (either, or none),
# C0 controls, 8-bit bytes, whole queries and commands, text.
_PIECES = st.one_of(
    st.sampled_from(QUERIES + DRAWS + DROPPED),
    st.sampled_from(
        [
            b"\x1b",
            b"\x1b[",
            b"\x1b]",
            b"\x1bP",
            b"\x1b_",
            b"\x1b^",
            b"\x1bX",
            b"\x1b\\",
            *CSI_C1,
            *OSC_C1,
            *DCS_C1,
            *ST_C1,
            *c1(0x9F, 0x9E, 0x98, 0x85),
            b"\xc2",
            b"[",
            b"]",
            b"?",
            b">",
            b"=",
            b"$",
            b";",
            b":",
            b" ",
            b"1",
            b"2",
            b"3",
            b"6",
            b"11",
            b"1049",
            b"52;c;",
            b"0;",
            b"@kitty-cmd{}",
            b"c",
            b"h",
            b"l",
            b"J",
            b"m",
            b"n",
            b"p",
            b"q",
            b"u",
            b"t",
            b"Z",
            b"G",
            b"a=q",
            b"tmux;",
            b"\x07",
            b"\x08",
            b"\x0a",
            b"\x0d",
            b"\x05",
            b"\x18",
            b"\x1a",
            b"\x7f",
            b"\xc3\xa9",
            b"\xe2\x82\xac",
            b"\xff",
            b"text",
        ]
    ),
    st.binary(max_size=6),
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_PIECES, max_size=24))
def test_a_replay_writes_only_text_and_the_tables_tokens(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    body, tail = for_terminal(data)
    drawn_tokens(body)
    assert answers(body) == [], (data, body)
    assert answers(body, kitty=True) == [], (data, body)
    assert pyte_answers(body) == [], (data, body)
    assert for_terminal(body) == (body, b"")  # what it writes, it would write again as it is
    assert data.endswith(tail)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=12), st.data())
def test_every_cut_writes_only_the_tables_tokens_and_the_end_is_finished_so_too(
    pieces: list[bytes], choose: st.DataObject
) -> None:
    """A replay cut at any offset: what it writes is clean, and so is what
    its cut end becomes once the rest arrives (``ReplayEnd``): the first
    token, as a replay writes it."""
    data = b"".join(pieces)
    for cut in range(len(data) + 1):
        body, tail = for_terminal(data[:cut])
        drawn_tokens(body)
        if not tail:
            continue
        end = ReplayEnd(tail)
        split = choose.draw(st.integers(0, len(data) - cut))
        finished = end.feed(data[cut : cut + split]) + end.feed(data[cut + split :])
        if end.pending:
            continue  # the data ends inside the sequence still
        whole = tail + data[cut:]
        text = decode(whole)
        first = next_token(text, 0)
        assert first.kind != OPEN
        head = text[: first.end].encode("utf-8", "surrogateescape")
        assert finished == strip(head) + whole[len(head) :]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*DRAWS, b"plain", b"\r\n", b"\x08\x0e\x0f"]), max_size=20))
def test_everything_that_draws_passes_byte_exact(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    assert for_terminal(data) == (data, b"")


@settings(max_examples=500, deadline=None)
@given(st.lists(_PIECES, max_size=16))
def test_the_fast_path_writes_what_the_tokens_one_by_one_would(pieces: list[bytes]) -> None:
    """``_DRAWS_ONLY`` takes runs whole at regex speed: what it takes must
    be what the token-by-token path writes."""
    from multiserver.terminal import _replay

    data = b"".join(pieces)
    fast = for_terminal(data)
    never = re.compile("(?!)")
    saved = _replay._DRAWS_ONLY
    _replay._DRAWS_ONLY = never
    try:
        slow = for_terminal(data)
    finally:
        _replay._DRAWS_ONLY = saved
    assert fast == slow


def test_the_parser_covers_its_input_in_order() -> None:
    text = decode(b"a\x1b[1;2\x08mb\x1b]0;t\x07\x05\x1b[6n\x1bP$qm\x1b\\c\x9b1m\x1b[1")
    tokens, cut = parse(text)
    assert tokens[0].start == 0 and cut == len(text) - 3
    assert all(a.end == b.start for a, b in itertools.pairwise(tokens))
    assert tokens[-1].end == cut
    assert next_token(text, cut).kind == OPEN and next_token(text, 0).kind == TEXT
