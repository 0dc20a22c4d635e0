"""WAITING in ``ls``: what a session wrote since its last detach, not the
screen its last client handed back for the next replay (``_shown``)."""

from __future__ import annotations

import json
import os
import re

from multiserver_cli._shown import unseen
from tests.cli.attach.test_attach_terminal import DETACH, start_in_window
from tests.cli.conftest import INNER_PROMPT, INNER_SH, ms, wait_buffered, wait_session, write_fifo
from tests.conftest import MsDirs


def test_unseen_subtracts_the_handed_back_screen_from_what_the_daemon_keeps() -> None:
    assert unseen(100, 0, 0) == (100, 0)  # never detached: all of it waits
    assert unseen(100, 0, 100) == (0, 0)  # right after a detach
    assert unseen(130, 0, 100) == (30, 0)
    # Past the bound the oldest go first: the screen's 100, then 20 new.
    assert unseen(1000, 120, 100) == (1000, 20)
    assert unseen(1000, 60, 100) == (960, 0)
    # A record that cannot be this buffer's (another client emptied it).
    assert unseen(30, 0, 100) == (30, 0)


async def ls(ms_dirs: MsDirs) -> tuple[dict[str, object], str]:
    (one,) = json.loads((await ms(ms_dirs, "ls", "--json")).stdout)
    table = (await ms(ms_dirs, "ls")).stdout.decode().splitlines()
    return one, table[1][table[0].index("WAITING") :]


async def test_waiting_counts_only_what_came_after_the_detach(
    ms_dirs: MsDirs, open_terminal
) -> None:
    go = ms_dirs.root / "go"
    os.mkfifo(go)
    t = open_terminal()
    await start_in_window(t, f"multiserver new -n w -- {INNER_SH}")
    t.line("seq 1 300")
    await t.wait_screen(re.compile(r"^300$", re.M))
    waiting = f'read x < {go}; echo "late-$x"'
    t.line(waiting)
    await t.wait_screen(waiting)
    held, shown = await ls(ms_dirs)
    assert held["held"] is True and held["waiting_bytes"] == 0 and shown == "-"

    t.type(DETACH)
    await t.wait_screen("[detached from w]")
    await wait_session(ms_dirs, "w", lambda s: s and not s.held, "released")
    after, shown = await ls(ms_dirs)
    screen = after["buffered_bytes"]
    assert isinstance(screen, int) and screen > 1000  # the screen, kept for the replay
    assert (after["waiting_bytes"], after["waiting_dropped_bytes"], shown) == (0, 0, "0B")

    await write_fifo(go, b"1\n")
    kept = await wait_buffered(ms_dirs, "w", b"late-1\r\n" + INNER_PROMPT.encode())
    new = kept[screen:]
    assert new.startswith(b"late-1\r\n")
    later, shown = await ls(ms_dirs)
    assert later["waiting_bytes"] == len(new) and shown == f"{len(new)}B"
    assert later["buffered_bytes"] == screen + len(new)
    records = ms_dirs.runtime / "multiserver-shown"
    assert [p.name for p in records.iterdir()] == [f"{later['daemon_instance']}-{later['id']}"]
    await ms(ms_dirs, "kill", "w")
    await ms(ms_dirs, "ls")
    assert list(records.iterdir()) == []  # ls removes the records of the gone
