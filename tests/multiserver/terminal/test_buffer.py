"""The bounded output buffer: exact accounting, newest bytes kept, cuts at
safe boundaries, lazy trimming within its bound, and peek."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from multiserver.terminal._buffer import ESC, OutputBuffer, escape_end, safe_start

# --- escape_end -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "end"),
    [
        (b"\x1b[1;31mX", 7),  # CSI: ends at its final byte
        (b"\x1b[?25hX", 6),
        (b"\x1b[ qX", 4),  # CSI with an intermediate byte
        (b"\x1b]0;title\x07X", 10),  # OSC ended by BEL
        (b"\x1b]8;;http://x\x1b\\X", 15),  # OSC ended by ST
        (b"\x1bP1$r0m\x1b\\X", 9),  # DCS ended by ST
        (b"\x1b(BX", 3),  # designate charset: one intermediate, one final
        (b"\x1b7X", 2),  # save cursor
        (b"\x1b", 1),  # a lone ESC at the end
        (b"\x1b[1;3", 5),  # unterminated CSI: to the end
        (b"\x1b]0;ti", 6),  # unterminated OSC: to the end
    ],
)
def test_escape_end(data: bytes, end: int) -> None:
    assert escape_end(data, 0) == end


# --- safe_start ----------------------------------------------------------------------


def test_safe_start_at_the_edges() -> None:
    assert safe_start(b"abc", 0) == 0
    assert safe_start(b"abc", -5) == 0
    assert safe_start(b"abc", 3) == 3
    assert safe_start(b"abc", 10) == 3
    assert safe_start(b"", 1) == 0


def test_safe_start_prefers_just_after_a_newline() -> None:
    data = b"0123456789\nabc\x1b[1mdef\nxyz"
    assert safe_start(data, 4) == 11
    assert safe_start(data, 11) == 11  # the cut is already just after one
    assert safe_start(data, 12) == 22  # the next newline, past an escape sequence
    assert safe_start(b"a\n" + b"x" * 5000 + b"\nb", 3) == 3  # none within 4096 bytes


def test_safe_start_without_a_newline_is_exact_on_plain_text() -> None:
    data = b"a" * 100
    for cut in range(101):
        assert safe_start(data, cut) == cut


@pytest.mark.parametrize(
    "seq",
    [b"\x1b[38;5;196m", b"\x1b]0;a title\x07", b"\x1b]8;;http://x/\x1b\\", b"\x1b(B", b"\x1b7"],
)
def test_safe_start_never_inside_an_escape_sequence(seq: bytes) -> None:
    data = b"abc" + seq + b"def"
    for cut in range(1, len(data)):
        start = safe_start(data, cut)
        if cut <= 3:
            assert start == cut
        elif cut < 3 + len(seq):
            assert start == 3 + len(seq), cut
        else:
            assert start == cut


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_safe_start_never_inside_a_utf8_sequence(char: str) -> None:
    encoded = char.encode()
    data = b"ab" + encoded + b"cd"
    for cut in range(1, len(data)):
        start = safe_start(data, cut)
        inside = 2 < cut < 2 + len(encoded)
        assert start == (2 + len(encoded) if inside else cut)
        data[start:].decode()  # replay starts on a whole character


def test_safe_start_escape_then_utf8() -> None:
    data = b"\x1b[1m" + "é".encode() + b"x"
    assert safe_start(data, 2) == 4  # after the CSI, on the first byte of é
    assert safe_start(data, 5) == 6  # inside é: after it


# --- accounting and what is kept ------------------------------------------------------


def test_empty_buffer() -> None:
    buf = OutputBuffer(10)
    assert len(buf) == 0 and buf.dropped == 0 and buf.limit == 10
    assert buf.take() == (b"", 0)
    assert buf.peek() == (b"", 0)


def test_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError):
        OutputBuffer(-1)


def test_zero_limit_drops_everything_but_counts_it() -> None:
    buf = OutputBuffer(0)
    buf.append(b"abc")
    buf.append(b"de")
    assert len(buf) == 0
    assert buf.take() == (b"", 5)


def test_under_the_limit_nothing_is_dropped() -> None:
    buf = OutputBuffer(100)
    buf.append(b"hello ")
    buf.append(b"world\n")
    assert buf.peek() == (b"hello world\n", 0)
    assert buf.take() == (b"hello world\n", 0)
    assert buf.take() == (b"", 0)


def test_newest_bytes_are_kept() -> None:
    buf = OutputBuffer(100)
    stream = bytes(range(32, 127)) * 20  # no newline, no escape, ASCII
    for i in range(0, len(stream), 7):
        buf.append(stream[i : i + 7])
    data, dropped = buf.take()
    assert data == stream[-100:]
    assert dropped == len(stream) - 100


def test_cut_lands_after_a_newline() -> None:
    buf = OutputBuffer(20)
    buf.append(b"line one\nline two\nline three\n")  # 29 bytes
    data, dropped = buf.take()
    assert data == b"line two\nline three\n"  # the cut at 9 is just after a newline
    assert dropped == 9
    buf.append(b"aaaa bbbb\ncccc dddd eeee\nf")  # 27 bytes, cut at 7
    assert buf.take() == (b"cccc dddd eeee\nf", 10)  # after the first newline past it


def test_cut_skips_an_escape_sequence() -> None:
    buf = OutputBuffer(10)
    buf.append(b"abcdef\x1b[38;5;1mXYZ")
    data, dropped = buf.take()
    assert data == b"XYZ"
    assert dropped == 15


def test_cut_skips_a_partial_utf8_character() -> None:
    buf = OutputBuffer(5)
    buf.append("aaaa€€".encode())  # € is 3 bytes; the cut lands inside the first
    data, dropped = buf.take()
    assert data == "€".encode()
    assert dropped == 7


def test_take_resets_dropped_peek_does_not() -> None:
    buf = OutputBuffer(4)
    buf.append(b"abcdefgh")
    assert buf.peek() == (b"efgh", 4)
    assert buf.peek() == (b"efgh", 4)
    assert buf.dropped == 4
    assert buf.take() == (b"efgh", 4)
    assert buf.dropped == 0
    buf.append(b"ij")
    assert buf.take() == (b"ij", 0)


# --- lazy trimming --------------------------------------------------------------------


def stored(buf: OutputBuffer) -> int:
    """Bytes the buffer holds in memory, trimmed or not. Private on purpose:
    every public accessor trims first, so the lazy bound is invisible."""
    return len(buf._data)


def test_trimming_is_lazy_but_bounded() -> None:
    limit = 1000
    buf = OutputBuffer(limit)
    buf.append(b"x" * 1200)
    assert stored(buf) == 1200  # within the slack: not cut yet
    buf.append(b"x" * 50)
    assert stored(buf) == 1250
    buf.append(b"x")
    assert stored(buf) == limit  # past limit + limit // 4: cut back to the limit
    for _ in range(2000):
        buf.append(b"y" * 13)
        assert stored(buf) <= limit + limit // 4
    assert len(buf) == limit and stored(buf) == limit  # len() trims to the limit


@pytest.mark.parametrize("op", ["take", "peek", "len", "dropped"])
def test_reading_trims_to_the_limit(op: str) -> None:
    buf = OutputBuffer(100)
    buf.append(b"z" * 120)
    assert stored(buf) == 120
    if op == "take":
        assert buf.take() == (b"z" * 100, 20)
    elif op == "peek":
        assert buf.peek() == (b"z" * 100, 20)
    elif op == "len":
        assert len(buf) == 100
    else:
        assert buf.dropped == 20
    assert stored(buf) == (0 if op == "take" else 100)


def test_a_single_huge_append_is_cut_at_once() -> None:
    buf = OutputBuffer(10)
    buf.append(b"q" * 100_000)
    assert stored(buf) == 10
    assert buf.take() == (b"q" * 10, 99_990)


# --- peek(max_bytes) -----------------------------------------------------------------


def test_peek_max_bytes() -> None:
    buf = OutputBuffer(1000)
    buf.append(b"abcdefghij")
    assert buf.peek(3) == (b"hij", 0)
    assert buf.peek(0) == (b"", 0)
    assert buf.peek(10) == (b"abcdefghij", 0)
    assert buf.peek(11) == (b"abcdefghij", 0)
    assert buf.peek(None) == (b"abcdefghij", 0)
    assert buf.take() == (b"abcdefghij", 0)  # peeking changed nothing


def test_peek_max_bytes_cuts_at_a_safe_boundary() -> None:
    buf = OutputBuffer(1000)
    buf.append(b"one\ntwo\x1b[1mthree")
    assert buf.peek(9) == (b"\x1b[1mthree", 0)  # the cut fell on the ESC
    assert buf.peek(8) == (b"three", 0)  # the cut fell inside the CSI
    assert buf.peek(14) == (b"two\x1b[1mthree", 0)  # the cut fell before the newline
    buf.append("é".encode())
    assert buf.peek(1) == (b"", 0)  # half a character is no character


def test_peek_reports_dropped_without_resetting_it() -> None:
    buf = OutputBuffer(4)
    buf.append(b"0123456789")
    assert buf.peek(2) == (b"89", 6)
    assert buf.take() == (b"6789", 6)


# --- properties -----------------------------------------------------------------------

_chunks = st.lists(st.binary(max_size=300), max_size=40)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(max_size=300)),
        st.tuples(st.just("append"), st.sampled_from([b"\n", b"\x1b[1m", "é€".encode()])),
        st.tuples(st.just("take"), st.none()),
        st.tuples(st.just("peek"), st.one_of(st.none(), st.integers(0, 400))),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 600), ops=_ops)
def test_accounting_is_exact_and_the_newest_bytes_are_kept(
    limit: int, ops: list[tuple[str, Any]]
) -> None:
    """appended == taken + dropped + len, and what each take returns is the
    stream right after what it dropped: no byte lost unaccounted, none twice."""
    buf = OutputBuffer(limit)
    stream = bytearray()
    pos = 0  # stream offset of the first byte not yet taken or dropped
    for op, arg in ops:
        if op == "append":
            buf.append(arg)
            stream += arg
            assert stored(buf) <= limit + limit // 4
        elif op == "take":
            data, dropped = buf.take()
            pos += dropped
            assert bytes(stream[pos : pos + len(data)]) == data
            pos += len(data)
            assert pos == len(stream)  # everything before the end is accounted
            assert len(data) <= limit
        else:
            max_bytes = arg
            data, dropped = buf.peek(max_bytes)
            assert stream.endswith(data)
            assert len(data) <= (limit if max_bytes is None else min(limit, max_bytes))
            assert stored(buf) <= limit
        assert len(stream) == pos + buf.dropped + len(buf)
        assert len(buf) <= limit


# Well-formed terminal output, as tokens: the places between tokens are the
# only places a replay may start after a cut.
_TEXT = st.binary(min_size=1, max_size=12).map(
    lambda b: bytes(c for c in b if 0x20 <= c < 0x7F) or b"t"
)
_CSI = st.builds(
    lambda params, final: b"\x1b[" + params.encode() + bytes([final]),
    st.from_regex(r"\??[0-9;]{0,12}", fullmatch=True),
    st.sampled_from(b"mHJKABCDhlr"),
)
_OSC = st.builds(
    lambda body, end: b"\x1b]" + body.encode() + end,
    st.from_regex(r"[0-9];[ -~]{0,40}", fullmatch=True),
    st.sampled_from([b"\x07", b"\x1b\\"]),
)
_ESC2 = st.sampled_from([b"\x1b7", b"\x1b8", b"\x1b(B", b"\x1b)0", b"\x1bM"])
_UTF8 = st.characters(min_codepoint=0x80, exclude_categories=["Cs"]).map(str.encode)
_TOKENS = st.lists(
    st.one_of(_TEXT, st.just(b"\n"), _CSI, _OSC, _ESC2, _UTF8), min_size=1, max_size=200
)
_LONGEST_TOKEN = 2 + 2 + 40 + 2


def _boundaries(tokens: list[bytes]) -> set[int]:
    """Offsets where replay may start: between tokens, and inside plain text."""
    out = {0}
    offset = 0
    for token in tokens:
        if token[0] != ESC and token[0] < 0x80:
            out.update(range(offset, offset + len(token)))
        offset += len(token)
        out.add(offset)
    return out


@settings(max_examples=300, deadline=None)
@given(
    tokens=_TOKENS,
    limit=st.integers(_LONGEST_TOKEN, 400),
    data=st.data(),
)
def test_replay_never_starts_inside_an_escape_or_utf8_sequence(
    tokens: list[bytes], limit: int, data: st.DataObject
) -> None:
    """Output arrives in arbitrary reads; takes happen between tokens (a take
    empties the buffer, so a later replay starts where the reads resumed).
    Whenever bytes were dropped, the replay starts on a boundary; so does
    every non-empty peek. Holds while no sequence is longer than the limit
    (or than the 256-byte look-back)."""
    stream = b"".join(tokens)
    boundaries = _boundaries(tokens)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=20))))
    take_at = set(data.draw(st.lists(st.sampled_from(sorted(boundaries)), max_size=5)))
    buf = OutputBuffer(limit)
    pos = 0
    edges = sorted({0, len(stream), *cuts, *take_at})
    for a, b in itertools.pairwise(edges):
        buf.append(stream[a:b])
        if b in take_at or b == len(stream):
            taken, dropped = buf.take()
            start = pos + dropped
            assert stream[start:b] == taken
            if dropped:
                assert start in boundaries, (start, stream[max(0, start - 10) : start + 10])
            pos = b
        peeked, _ = buf.peek(data.draw(st.integers(0, limit)))
        if peeked:
            assert b - len(peeked) in boundaries


def test_a_cut_in_the_last_line_keeps_its_tail_rather_than_nothing() -> None:
    """Issue 36: ``peek --bytes 48`` of one 62-byte line printed nothing,
    the next line start being the end. A cut that would keep nothing keeps
    the line's tail, from a character's start."""
    line = "é".encode() * 30 + b"\r\n"  # 62 bytes
    start = safe_start(line, len(line) - 48)
    assert 0 < start < len(line) and line[start:].decode()  # whole characters
    assert len(line) - start <= 48
    buf = OutputBuffer(1 << 20)
    buf.append(line)
    assert buf.peek(48)[0] == line[start:]
    # Another line after the cut: it is where the tail starts, as before.
    two = b"first line\r\n" + b"second\r\n"
    assert safe_start(two, 3) == len(b"first line\r\n")
