"""What a replay writes to a person's terminal (``multiserver_cli._replay``
on the one parser, ``multiserver_cli._ecma48``): nothing a terminal
answers, nothing that acts outside the screen, every other byte as it was.

The property tests hold the stripper to a terminal model written here,
apart from the parser (``answers``: what a terminal answers, read the way
xterm reads strings and the way kitty does, which does not end a string on
a bare ESC, both lenient about malformed sequences), and to pyte, which
answers DA1 and DSR as a terminal does.
"""

from __future__ import annotations

import itertools

import pyte
import pytest
from hypothesis import given, settings, strategies as st

from multiserver_cli._ecma48 import OPEN, TEXT, next_token, parse
from multiserver_cli._replay import for_terminal


def strip(data: bytes) -> bytes:
    """A whole replay as written, the unfinished end left out (not yet
    sent to the terminal: live output finishes it)."""
    return for_terminal(data)[0]


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
]

NOT_QUERIES = [
    b"\x1b[1;31m",
    b"\x1b[m",
    b"\x1b[2J\x1b[H",
    b"\x1b[10;20H",
    b"\x1b[?1049h\x1b[?1049l",
    b"\x1b[?25l",
    b"\x1b[1;24r",
    b"\x1b[22;0;0t",  # title stack push: a command, not a report
    b"\x1b[23;0;0t",
    b"\x1b[8;24;80t",  # resize: a command
    b"\x1b[?8c",  # the Linux console's cursor shape
    b"\x1b[>4;2m",  # modifyOtherKeys on
    b"\x1b[>1u",  # kitty keyboard push
    b"\x1b[<u",  # and pop
    b"\x1b[2 q",  # cursor shape
    b"\x1b[6 q",
    b"\x1b[0%m",  # vim's probe, ignored by terminals
    b"\x1bPzz\x1b\\",
    b"\x1b]8;;https://example.org/?q=?\x1b\\see\x1b]8;;\x1b\\",  # a link
    b"\x1b]7;file://host/tmp?x\x07",
    b"\x1b]4;1;rgb:ff/00/00\x07",  # setting a colour
    b"\x1b]1337;SetUserVar=a=Pw==\x07",
    b"\x1b_Ga=T,f=100;AAAA\x1b\\",  # kitty graphics, shown
    b"\x1bPq#0;2;0;0;0#0~~@@\x1b\\",  # sixel
    b"\x1b7\x1b8\x1b(B\x1b=\x1b>",
    b"\x1b[!p",  # DECSTR, soft reset: a command
    b"\x1b[>4n",  # XTMODKEYS off: a command
    b"\x1b[?1049h\x1b[?1000;1006h\x1b[?25l",
    b"\x1bPtmux;\x1b\x1b[1m\x1b\\",  # bold, through tmux's passthrough
    b"\x1b]133;A\x07\x1b]7;file:///tmp\x1b\\",  # shell marks, cwd
    b"\x1b[1;2\x08H",  # a C0 inside a command: it executes, the command too
    "héllo wörld ✓\r\n".encode(),
]


DROPPED_OUTSIDE = [
    b"\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07",  # clipboard write
    b"\x1b]52;p;aGk=\x1b\\",
    b"\x1b]52;c;?\x07",  # clipboard read
    b"\x1b]52;c;!\x07",  # clipboard cleared
    b"\x1b]5522;type=write\x1b\\",  # kitty's clipboard
    b"\x1b]1337;Copy=:aGk=\x07",  # iTerm2's
    b"\x1b]9;build done\x07",  # notifications: iTerm2
    b"\x1b]99;i=1:d=0;Hello\x1b\\",  # kitty
    b"\x1b]777;notify;title;body\x07",  # rxvt, foot
]


@pytest.mark.parametrize("query", QUERIES)
def test_each_query_is_removed_and_the_text_around_it_kept(query: bytes) -> None:
    got = strip(b"before" + query + b"after")
    # The C0 controls a query executed on its way draw: they stay.
    executed = bytes(b for b in query if b < 0x20 and b not in (0x1B, 0x05, 0x07))
    assert got == b"before" + executed + b"after"
    assert strip(query * 3) == executed * 3


@pytest.mark.parametrize("sequence", NOT_QUERIES)
def test_other_sequences_are_left_byte_for_byte(sequence: bytes) -> None:
    data = b"a" + sequence + b"b"
    assert for_terminal(data) == (data, b"")


@pytest.mark.parametrize("sequence", DROPPED_OUTSIDE)
def test_clipboard_and_notifications_are_dropped(sequence: bytes) -> None:
    assert strip(b"a" + sequence + b"b") == b"ab"


def test_the_title_is_set_once_to_the_latest() -> None:
    data = b"\x1b]0;one\x07a\x1b]2;two\x1b\\b\x1b]2;three\x07c"
    assert strip(data) == b"ab\x1b]2;three\x07c"


def test_a_kitty_image_that_would_be_acknowledged_is_kept_quiet() -> None:
    image = b"\x1b_Gi=7,q=1,a=T,f=100;AAAA\x1b\\"
    assert strip(image) == b"\x1b_Gi=7,a=T,f=100,q=2;AAAA\x1b\\"
    quiet = b"\x1b_Ga=T,f=100;AAAA\x1b\\"  # no id: kitty answers nothing
    assert strip(quiet) == quiet


def test_a_sequence_abandoned_draws_nothing_but_its_controls() -> None:
    """A terminal abandons ESC [ 1 ; at the next ESC, and an OSC at ESC
    (xterm) or not (kitty, which would then swallow what follows): the
    abandoned part goes, what comes after is read as a sequence of its own."""
    assert strip(b"\x1b[1;\x1b[6nx") == b"x"
    assert strip(b"\x1b[6\x18n") == b"\x18n"  # CAN aborts: no query then
    assert strip(b"\x1b]0;title\x1b[?1049hx") == b"\x1b[?1049hx"
    assert strip(b"\x1b[1\x08;\x1b[m") == b"\x08\x1b[m"


@pytest.mark.parametrize(
    ("replay", "tail"),
    [
        (b"abc\x1b", b"\x1b"),
        (b"abc\x1b[6", b"\x1b[6"),
        (b"abc\x1b(", b"\x1b("),
        (b"abc\x1b]52;c;aGVsb", b"\x1b]52;c;aGVsb"),
        (b"abc\x1bP$qm\x1b", b"\x1bP$qm\x1b"),
        (b"abc\x1bPtmux;\x1b\x1b", b"\x1bPtmux;\x1b\x1b"),
    ],
)
def test_an_unfinished_sequence_is_the_tail(replay: bytes, tail: bytes) -> None:
    assert for_terminal(replay) == (b"abc", tail)
    assert parse(replay)[1] == 3


# --- a terminal, as a model: what it answers ---------------------------------------

_REPORTS = {b"11", b"13", b"14", b"15", b"16", b"18", b"19", b"20", b"21"}


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


def answers(data: bytes, kitty: bool = False) -> list[bytes]:
    """What a terminal answers to ``data``: a VT500 parser, byte by byte,
    lenient (a malformed CSI is judged as if it were not). ``kitty``:
    strings end only at ST or BEL."""
    said: list[bytes] = []
    state, params, inter, body, kind = "ground", b"", b"", b"", 0
    i = 0
    while i < len(data):
        b = data[i]
        i += 1
        if state == "string":
            if b == 0x1B and i < len(data) and data[i] == 0x5C:
                i += 1
                said += _string_answer(kind, body, kitty)
                state = "ground"
            elif b == 0x07 and (kind == 0x5D or kitty):
                said += _string_answer(kind, body, kitty)
                state = "ground"
            elif b in (0x18, 0x1A):
                state = "ground"
            elif b == 0x1B and kind == 0x50 and i < len(data) and data[i] == 0x1B:
                body += b"\x1b\x1b"
                i += 1
            elif b == 0x1B and not kitty:
                state, inter = "esc", b""
            else:
                body += bytes([b])
            continue
        if b == 0x05:
            said.append(b"ENQ")
            continue
        if b == 0x1B:
            state, inter, params = "esc", b"", b""
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
    """The model is a check only if it answers what the stripper drops."""
    assert answers(query) and answers(query, kitty=True)


@pytest.mark.parametrize("sequence", [*NOT_QUERIES, *DROPPED_OUTSIDE[:2], *DROPPED_OUTSIDE[3:]])
def test_the_model_answers_nothing_else(sequence: bytes) -> None:
    assert answers(sequence) == [] and answers(sequence, kitty=True) == []


# Pieces that make sequences when put together: introducers, parameters,
# finals, terminators, C0 controls, whole queries and commands, text.
_PIECES = st.one_of(
    st.sampled_from(QUERIES + NOT_QUERIES + DROPPED_OUTSIDE),
    st.sampled_from(
        [
            b"\x1b",
            b"\x1b[",
            b"\x1b]",
            b"\x1bP",
            b"\x1b_",
            b"\x1b\\",
            b"[",
            b"]",
            b"?",
            b">",
            b"=",
            b"$",
            b";",
            b"1",
            b"6",
            b"11",
            b"52;c;",
            b"c",
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
            b"\x9b",
            b"text",
        ]
    ),
    st.binary(max_size=6),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_PIECES, max_size=24))
def test_nothing_a_terminal_answers_survives(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    body = strip(data)
    assert answers(body) == [], (data, body)
    assert answers(body, kitty=True) == [], (data, body)
    assert pyte_answers(body) == [], (data, body)
    assert strip(body) == body  # what it writes, it would write again as it is


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*NOT_QUERIES, b"plain", b"\r\n", b"\x08\x07\x0e"]), max_size=20))
def test_everything_else_passes_byte_exact(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    assert for_terminal(data) == (data, b"")


def test_the_parser_covers_its_input_in_order() -> None:
    data = b"a\x1b[1;2\x08mb\x1b]0;t\x07\x05\x1b[6n\x1bP$qm\x1b\\c\x1b[1"
    tokens, cut = parse(data)
    assert tokens[0].start == 0 and cut == len(data) - 3
    assert all(a.end == b.start for a, b in itertools.pairwise(tokens))
    assert tokens[-1].end == cut
    assert next_token(data, cut).kind == OPEN and next_token(data, 0).kind == TEXT
