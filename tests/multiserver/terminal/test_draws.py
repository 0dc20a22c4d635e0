"""The one table of what draws (``multiserver.terminal._draws``): nothing in it is a
question a terminal answers, and the filter and the reset read it as it
says."""

from __future__ import annotations

import pytest

from multiserver import for_terminal
from multiserver.internal import screen_reset
from multiserver.terminal._draws import ESCAPES, MODES, PARAM_MAX, SEQUENCES, Mode
from multiserver.terminal._ecma48 import CSI, ESCAPE, decode, next_token
from tests.multiserver.terminal.test_replay import QUERIES, answers, pyte_answers


def _samples(key: tuple[str, str, str]) -> list[bytes]:
    """Forms of a table sequence with the parameters it may take."""
    marker, inter, final = key
    rule = SEQUENCES[key]
    firsts = sorted(rule.first) if rule.first is not None else [0, 1, PARAM_MAX]
    empty = rule.first is None or 0 in rule.first  # an empty parameter is 0
    params = [""] if rule.most == 0 else [*([""] if empty else []), *(str(n) for n in firsts)]
    if rule.most >= 2:
        params += [f"{firsts[-1]};{PARAM_MAX}"]
    return [f"\x1b[{marker}{p}{inter}{final}".encode() for p in params]


@pytest.mark.parametrize("key", sorted(SEQUENCES), ids=lambda k: repr("".join(k)))
def test_no_sequence_of_the_table_is_answered(key: tuple[str, str, str]) -> None:
    for sample in _samples(key):
        assert for_terminal(sample) == (sample, b""), sample
        assert answers(sample) == [] and answers(sample, kitty=True) == [], sample
        assert pyte_answers(sample) == [], sample


def test_no_question_has_a_place_in_the_table() -> None:
    """Every question of the list, read by the parser, names a form the
    table does not keep (or a string, which it never keeps)."""
    for query in QUERIES:
        token = next_token(decode(query), 0)
        if token.kind == CSI:
            marker = token.params[:1] if token.params[:1] in ("<", "=", ">", "?") else ""
            key = (marker, token.inter, token.final)
            assert key not in SEQUENCES or token.malformed or token.c1, query
        elif token.kind == ESCAPE:
            assert (token.inter, token.final) not in ESCAPES, query


@pytest.mark.parametrize("mode", MODES, ids=repr)
def test_a_replay_writes_a_mode_as_the_table_says_and_the_reset_gives_it_back(
    mode: Mode,
) -> None:
    unsafe = "h" if mode.safe == "l" else "l"
    assert for_terminal(mode.sequence(mode.safe))[0] == mode.sequence(mode.safe)
    kept = for_terminal(mode.sequence(unsafe))[0]
    assert kept == (mode.sequence(unsafe) if mode.kept else b""), mode
    assert mode.sequence(mode.safe) in screen_reset(mode.sequence(unsafe))
    assert answers(mode.sequence(unsafe)) == []


def test_escapes_of_the_table_are_not_answered() -> None:
    for inter, final in ESCAPES:
        sample = f"\x1b{inter}{final}".encode()
        assert for_terminal(sample) == (sample, b"")
        assert answers(sample) == [] and pyte_answers(sample) == []
