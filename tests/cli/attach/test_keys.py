"""The detach key in every encoding a terminal sends for it (``_keys``,
pure): found in any pieces, everything else passed on byte for byte."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, strategies as st

from multiserver_cli.attach._keys import HOLD_MAX, HOLD_WAIT, DetachMatcher, parse_key

# Every way a terminal sends each key: its byte; kitty's flags 1 and 8
# (``code;mods u``), 2 (``:event``), 4 (``:shifted:base``), caps lock on;
# xterm's modifyOtherKeys 2.
SENT = {
    "^\\": [
        b"\x1c",
        b"\x1b[92;5u",
        b"\x1b[92;5:1u",
        b"\x1b[92;5:2u",  # held down: a repeat
        b"\x1b[92:124;5u",
        b"\x1b[92:124;5:1u",
        b"\x1b[92;69u",  # caps lock
        b"\x1b[92;6u",  # Ctrl-Shift: the same byte in a legacy terminal
        b"\x1b[27;5;92~",
    ],
    "^A": [
        b"\x01",
        b"\x1b[97;5u",
        b"\x1b[97:65;6:1u",
        b"\x1b[1092::97;5u",  # a Cyrillic layout: the US key is a
        b"\x1b[27;5;97~",
    ],
    "^]": [b"\x1d", b"\x1b[93;5u", b"\x1b[27;5;93~"],
    "^@": [b"\x00", b"\x1b[32;5u", b"\x1b[64;5u", b"\x1b[27;5;32~"],
    "x": [b"x", b"\x1b[120u", b"\x1b[120;;120u", b"\x1b[27;1;120~"],
    "A": [b"A", b"\x1b[97:65;2u", b"\x1b[97;2u", b"\x1b[27;2;65~"],
}
KITTY = re.compile(rb"\x1b\[[0-9:;]*u")
CASES = [(spec, sent) for spec, all_sent in SENT.items() for sent in all_sent]

# Keys that are not ^\ in any of those encodings: each must pass as sent.
OTHERS = [
    b"plain text \xc3\xa9 \t\r",
    b"\x1b",  # Esc, then more
    b"\x1bx",  # Alt-x
    b"\x1b\x1b[A",
    b"\x1b[A",
    b"\x1b[1;5A",
    b"\x1bOP",
    b"\x1b[92u",  # \ alone (flag 8)
    b"\x1b[92;3u",  # Alt-\
    b"\x1b[92;7u",  # Ctrl-Alt-\
    b"\x1b[93;5u",  # Ctrl-]
    b"\x1b[124;5u",
    b"\x1b[27;5;93~",
    b"\x1b[27;3;92~",
    b"\x1b[5~",
    b"\x1b[200~pasted\x1b[201~",
    b"\x1b[57441;2u",  # left shift, flag 8
    b"\x1b[92;5;1;1u",  # not a key sequence: too many fields
    b"\x1b[;;;u",
    b"\x1b[99;5:3u",  # another key's release
    b"\x1b[?1;2c",  # an answer to a query
    b"\x1b[12;40R",
    b"\x1b]11;rgb:0000/0000/0000\x1b\\",
]


def feed_pieces(matcher: DetachMatcher, data: bytes, cuts: list[int]) -> bytes:
    """What ``data`` cut at ``cuts`` gives, the held tail let go at the end
    if it did not detach."""
    out = b""
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        out += matcher.feed(data[a:b])
    if not matcher.detached:
        out += matcher.flush()
    return out


@pytest.mark.parametrize(("spec", "sent"), CASES)
def test_each_encoding_detaches_cut_anywhere(spec: str, sent: bytes) -> None:
    data = b"before" + sent + b"after"
    for cut in range(len(data) + 1):
        m = DetachMatcher(parse_key(spec))
        assert feed_pieces(m, data, [cut]) == b"before", (spec, sent, cut)
        assert m.detached
    m = DetachMatcher(parse_key(spec))  # one byte a read
    assert feed_pieces(m, data, list(range(1, len(data)))) == b"before"
    assert m.detached


@pytest.mark.parametrize("spec", list(SENT))
def test_other_keys_pass_byte_for_byte_cut_anywhere(spec: str) -> None:
    # Those that are not this key (a character key is part of some).
    others = [o for o in OTHERS if not any(s in o for s in SENT[spec])]
    if spec in ("x", "A"):
        others = [o for o in others if parse_key(spec) not in o.replace(b"\x1b[A", b"")]
    assert len(others) >= len(OTHERS) - 3
    data = b"".join(others)
    for cut in range(len(data) + 1):
        m = DetachMatcher(parse_key(spec))
        assert feed_pieces(m, data, [cut]) == data, cut
        assert not m.detached
    m = DetachMatcher(parse_key(spec))
    assert feed_pieces(m, data, list(range(1, len(data)))) == data


def test_a_release_never_detaches_and_never_reaches_the_program() -> None:
    m = DetachMatcher(b"\x1c")  # Ctrl let go of first: the release is still the key's
    assert m.feed(b"a\x1b[92;5:3ub\x1b[92:124;5:3u\x1b[92;1:3u") == b"ab"
    assert not m.detached
    m = DetachMatcher(b"\x1c")  # press and release in one read: one detach
    assert m.feed(b"a\x1b[92;5:1u\x1b[92;5:3u") == b"a"
    assert m.detached
    assert m.feed(b"\x1b[92;5:3u") == b""  # nothing after the key goes on


def test_a_tail_that_may_start_the_key_is_held_and_let_go() -> None:
    m = DetachMatcher(b"\x1c")
    assert m.feed(b"a\x1b") == b"a"  # the Esc key, or the key's start
    assert m.held
    assert m.flush() == b"\x1b"  # nothing came: it was Esc
    assert not m.held
    assert m.feed(b"\x1b[92;") == b""
    assert m.feed(b"3u") == b"\x1b[92;3u"  # Alt-\: not the key
    assert m.feed(b"\x1b[9") == b""
    assert m.feed(b"2;5u") == b""
    assert m.detached


def test_what_is_held_is_bounded() -> None:
    m = DetachMatcher(b"\x1c")
    long = b"\x1b[" + b"1;" * HOLD_MAX
    assert m.feed(long) == long
    assert not m.held
    for n in range(HOLD_MAX * 2):
        m.feed(b"\x1b[" + b"1" * n)
        assert len(m.flush()) <= HOLD_MAX


def test_a_character_key_inside_a_sequence_is_not_the_key() -> None:
    m = DetachMatcher(b"1")
    assert m.feed(b"\x1b[1;5A\x1b[12;40R") == b"\x1b[1;5A\x1b[12;40R"
    assert not m.detached
    m = DetachMatcher(b"A")
    assert m.feed(b"\x1b[A\x1bOA\x1bA\x1b[1;5A") == b"\x1b[A\x1bOA\x1bA\x1b[1;5A"
    assert not m.detached
    m = DetachMatcher(b"1")
    assert not m.detached
    assert m.feed(b"a1b") == b"a"
    assert m.detached


@given(
    pieces=st.lists(
        st.one_of(
            st.sampled_from([*OTHERS, *(s for _, s in CASES), b"\x1b[92;5:3u"]),
            st.binary(max_size=8),
            st.lists(st.sampled_from(b"\x1b[0123456789;:u~\x1c"), max_size=12).map(bytes),
        ),
        max_size=12,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_cutting_the_input_anywhere_changes_nothing(pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    whole = DetachMatcher(b"\x1c")
    expected = feed_pieces(whole, data, [])
    cut = DetachMatcher(b"\x1c")
    assert feed_pieces(cut, data, sorted(c for c in set(cuts) if c <= len(data))) == expected
    assert cut.detached == whole.detached
    if not whole.detached:  # what goes on is the input, but for some kitty sequences
        assert KITTY.sub(b"", expected) == KITTY.sub(b"", data)
        if b"\x1b[92;5:3u" in data:
            assert len(expected) < len(data)


@given(st.binary(max_size=200).filter(lambda b: b"\x1b" not in b and b"\x1c" not in b))
def test_input_without_escapes_or_the_key_goes_on_unchanged(data: bytes) -> None:
    m = DetachMatcher(b"\x1c")
    assert m.feed(data) == data
    assert not m.held and not m.detached


def test_a_held_tail_goes_on_when_its_time_is_up() -> None:
    m = DetachMatcher(b"\x1c")
    assert m.feed(b"\x1b", now=10.0) == b""
    assert m.held_until == 10.0 + HOLD_WAIT
    assert m.feed(b"", now=10.01) == b""  # still held: still since 10.0
    assert m.held_until == 10.0 + HOLD_WAIT
    assert m.expire(10.0 + HOLD_WAIT / 2) == b""
    assert m.expire(10.0 + HOLD_WAIT) == b"\x1b"
    assert m.held_until is None and not m.held
    assert m.feed(b"\x1b[92", now=11.0) == b""
    assert m.feed(b";5u", now=11.0) == b""
    assert m.detached and m.held_until is None
