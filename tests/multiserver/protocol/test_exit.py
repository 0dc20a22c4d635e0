"""How a child's end reads (``ChildInfo.exit_code``: negative for a signal)."""

from __future__ import annotations

import pytest

from multiserver import describe_exit, exit_status


@pytest.mark.parametrize(
    ("code", "words", "status"),
    [
        (0, "exited with code 0", 0),
        (3, "exited with code 3", 3),
        (-1, "killed by SIGHUP", 129),
        (-9, "killed by SIGKILL", 137),
        (-15, "killed by SIGTERM", 143),
        (-99, "killed by signal 99", 227),
    ],
)
def test_a_signal_death_says_which_signal_and_exits_128_plus_n(
    code: int, words: str, status: int
) -> None:
    assert describe_exit(code) == words
    assert exit_status(code) == status
