"""The library's capture against a real daemon: a detached session's screen
from the daemon's buffer, at the child's size; a held one's from what its
holder keeps on disk; the trio client and the blocking one alike."""

from __future__ import annotations

import os
import time

import trio

from multiserver import PeekResult, capture, dial_blocking, held_output, open_client
from multiserver.internal import DurableOutput, output_path, replaced, state_dir
from tests.conftest import RunningDaemon

SHOWS = "printf 'A\\033[2K\\rB\\n\\033]0;the title\\007\\033[31mred\\033[0m'; exec sleep 100"


async def _wait_output(daemon: RunningDaemon, child_id: int, needle: bytes) -> None:
    with trio.fail_after(10):
        while True:
            async with open_client(daemon.paths) as client:
                if needle in (await client.peek(child_id)).output:
                    return
            await trio.sleep(0.02)


async def test_a_detached_session_is_captured_from_the_daemons_buffer(
    daemon: RunningDaemon,
) -> None:
    async with open_client(daemon.paths) as client:
        launched = await client.launch(["sh", "-c", SHOWS], rows=5, cols=30, hold=False)
    kid = launched.child.id
    await _wait_output(daemon, kid, b"red")
    async with open_client(daemon.paths) as client:
        screen = await client.capture(kid, styled=True)
        assert capture(await client.peek(kid), styled=True) == screen
    assert (screen.rows, screen.cols, screen.title) == (5, 30, "the title")
    assert screen.lines == ("B", "\x1b[0;31mred\x1b[0m", "", "", "")
    assert (screen.cursor_row, screen.cursor_col) == (1, 3)

    def blocking() -> None:
        with dial_blocking(daemon.paths, deadline=time.monotonic() + 10) as sync:
            assert sync.capture(kid, styled=True) == screen
            assert sync.capture(kid).lines[:2] == ("B", "red")

    await trio.to_thread.run_sync(blocking)


async def test_a_held_session_is_captured_from_what_its_holder_keeps(
    daemon: RunningDaemon,
) -> None:
    async with open_client(daemon.paths) as holder:
        launched = await holder.launch(["sleep", "100"], rows=3, cols=20)
        assert launched.master is not None
        os.close(launched.master)
        kid = launched.child.id
        # What multiserver attach writes while it holds the session.
        kept = DurableOutput(output_path(state_dir(), daemon.instance_id, kid), 4096)
        kept.append(b"shown by the holder\r\n$ ")
        kept.flush()
        async with open_client(daemon.paths) as other:
            peeked = await other.peek(kid)
            assert peeked.child.held and peeked.output == b""
            assert held_output(peeked, daemon.instance_id).output.endswith(b"$ ")
            screen = await other.capture(kid)
    assert screen.lines == ("shown by the holder", "$", "")
    # Not held: the daemon's buffer, whatever a file says.
    unheld = PeekResult(replaced(peeked.child, held=False), b"x", 0)
    assert held_output(unheld, daemon.instance_id) is unheld
