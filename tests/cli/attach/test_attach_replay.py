"""What a person's terminal receives when ``attach`` replays what a session
wrote while detached, on a plain PTY (no tmux): the screen drawn, and
nothing that would make the terminal answer or act again.

The window answers as a terminal does (``open_terminal(answering=True)``:
pyte answers DA1, DSR and the cursor's position as it receives them). So
the attach's own question after the replay (``SENTINEL``) is answered,
and any query the replay let through would be too. ``test_attach_tmux``'s
``test_replayed_queries_are_not_answered_into_the_program`` is the same
check with tmux as the terminal.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from multiserver_cli.attach._terminal import SENTINEL
from tests.cli.conftest import MULTISERVER, Terminal, ms, wait_buffered
from tests.conftest import MsDirs

# Each of these, asked while nobody was attached, is what a replay must not
# write: a terminal would answer the questions (DA1, the cursor's position,
# its status, its colours: the answers typed into the program) and write
# the clipboard again (OSC 52).
QUERIES = (
    b"\x1b[c",
    b"\x1b[6n",
    b"\x1b[5n",
    b"\x1b]10;?\x07",
    b"\x1b]11;?\x1b\\",
    b"\x1b]52;c;Y2xpcGJvYXJk\x07",
)
# The program asks, then says whether the line it reads is what was typed.
THEN = (
    r" echo asked-while-away;"
    r' read x; case "$x" in typed) echo clean;; *) printf "dirty: %s\n" "$x" | od -c;; esac;'
    r" exec sleep 1000"
)
ASKS = (
    r"printf '\033[c\033[6n\033[5n\033]10;?\007\033]11;?\033\\\033]52;c;Y2xpcGJvYXJk\007';" + THEN
)


# The same questions in C1 controls (issue 34), the character (C2 9B) and
# the raw byte (9B): pyte and kitty act on both. Before, the CPR and DA1
# they leaked were answered, and the pair looked like the sentinel's.
C1_QUERIES = (
    "\u009bc".encode(),
    "\u009b6n".encode(),
    b"\x9b5n",
    "\u009d11;?\u009c".encode(),
    "\u009d52;c;Y2xpcGJvYXJk\u009c".encode(),
)
C1_ASKS = (
    r"printf '\302\233c\302\2336n\2335n\302\23511;?\302\234\302\23552;c;Y2xpcGJvYXJk\302\234';"
    + THEN
)


@pytest.mark.parametrize(
    ("asks", "queries"), [(ASKS, QUERIES), (C1_ASKS, C1_QUERIES)], ids=["7-bit", "c1"]
)
async def test_the_replay_reaches_the_terminal_without_its_queries(
    ms_dirs: MsDirs,
    open_terminal: Callable[..., Terminal],
    asks: str,
    queries: tuple[bytes, ...],
) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "q", "--", "sh", "-c", asks)
    kept = await wait_buffered(ms_dirs, "q", b"asked-while-away")
    assert kept.startswith(b"".join(queries)), kept  # the program asked them all
    window = open_terminal([MULTISERVER, "attach", "q"], answering=True)
    await window.wait_screen(re.compile(r"^asked-while-away$", re.M))  # the text is shown
    window.line("typed")
    screen = await window.wait_screen(re.compile(r"^(clean|0000000 .*)$", re.M))
    assert re.search(r"^clean$", screen, re.M), screen  # no answer was typed into it
    received = bytes(window.raw)
    replayed = received.replace(SENTINEL, b"", 1)
    assert [q for q in queries if q in replayed] == [], received
    # Asked one question, the attach's own (the cursor's position and DA1).
    assert received.count(SENTINEL) == 1, received
    assert [re.sub(r"\d+", "N", a) for a in window.answered] == ["\x1b[N;NR", "\x1b[?Nc"]
