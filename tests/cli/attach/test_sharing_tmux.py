"""Several terminals on one session (issue 38, protocol 9), as a person
sees it: one private tmux server (``tmux -S ROOT/tmux-1.sock -f
/dev/null``, ``test_layout_tmux.TmuxServer``), a window each, ``bash
--norc`` in a session ``s`` started with ``multiserver new -d``.

Two windows attach (``attach s``): both show the program and both type
into it; a third watches (``attach -r s``): it shows everything, and what
it types reaches nobody (not the program, nor its own shell after). One
typing window detaches (Ctrl-\\); the others go on showing new output.
A fourth takes it over (``attach -d s``): the others are told ``[s
attached elsewhere]``. Alone, its client holds the PTY master itself
(/proc/PID/fd links to /dev/ptmx, the session's terminal by its
tty-index). ``ls`` counts the holders at each step, and ``events``
tells created, joined x3, left, taken_over, left x2, in order.

Every wait is on a condition (a screen showing a text, the daemon's
count of holders), bounded; the tmux server and whatever runs in its
windows are killed by pid at teardown, the daemon by its fixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio

from tests.cli.conftest import (
    MULTISERVER,
    SCREEN_TIMEOUT,
    ms,
    person_env,
    session_pids,
    wait_buffered,
    wait_session,
)
from tests.cli.test_events import Follower
from tests.cli.test_layout_tmux import TMUX, TmuxServer
from tests.conftest import POLL_INTERVAL, MsDirs, RunningDaemon, is_alive, wait_until_sync
from tests.procs import child_pids, cmdline_of

pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed"),
    pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed"),
]

INNER_PROMPT = "in$ "  # the session's bash, told apart from the windows' sh (outer$)
DETACH = "C-\\"  # tmux's name of Ctrl-\, the default detach key


@attrs.frozen
class Window:
    """One tmux window of the server, its shell ``sh -i`` (pid ``shell``)."""

    server: TmuxServer
    name: str
    target: str  # tmux's window id, @N
    shell: int

    def line(self, text: str) -> None:
        """Type ``text`` and Enter."""
        self.server.tmux("send-keys", "-t", self.target, "-l", text)
        self.server.tmux("send-keys", "-t", self.target, "Enter")

    def keys(self, *keys: str) -> None:
        self.server.tmux("send-keys", "-t", self.target, *keys)

    def screen(self) -> str:
        """Everything the window shows and scrolled past, blanks trimmed."""
        text = self.server.tmux("capture-pane", "-p", "-S", "-", "-t", self.target)
        return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")

    async def wait_screen(self, text: str) -> str:
        with trio.move_on_after(SCREEN_TIMEOUT):
            while text not in (screen := self.screen()):
                await trio.sleep(POLL_INTERVAL * 4)
            return screen
        pytest.fail(f"{self.name}: {text!r} not shown within {SCREEN_TIMEOUT} s:\n{self.screen()}")

    async def wait_prompt(self) -> None:
        with trio.move_on_after(SCREEN_TIMEOUT):
            while not self.screen().endswith("outer$"):
                await trio.sleep(POLL_INTERVAL * 4)
            return
        pytest.fail(f"{self.name}: no prompt within {SCREEN_TIMEOUT} s:\n{self.screen()}")

    def attach_pid(self) -> int:
        """The ``multiserver attach`` the window's shell runs."""
        found = [
            pid
            for pid in child_pids(self.shell)
            if b"multiserver" in cmdline_of(pid) and b"\0attach\0" in cmdline_of(pid)
        ]
        assert len(found) == 1, (self.name, [cmdline_of(p) for p in child_pids(self.shell)])
        return found[0]


@attrs.define
class Windows:
    """The tmux server and the windows opened in it."""

    server: TmuxServer
    opened: list[Window] = attrs.Factory(list)

    async def open(self, name: str) -> Window:
        """A new window at its shell's prompt (the first makes the server)."""
        first = not self.server.pids
        make = ["new-session", "-d", "-x", "100", "-y", "30"] if first else ["new-window", "-d"]
        out = self.server.tmux(*make, "-P", "-F", "#{window_id} #{pane_pid}", "sh", "-i")
        target, pid = out.split()
        window = Window(self.server, name, target, int(pid))
        self.opened.append(window)
        await window.wait_prompt()
        return window

    def close(self) -> None:
        """The server (by pid) and every process of each window's session."""
        pids = [p for w in self.opened for p in session_pids(w.shell)]
        self.server.kill()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until_sync(lambda: not any(is_alive(p) for p in pids), 5.0)


@pytest.fixture
def windows(ms_dirs: MsDirs) -> Iterator[Windows]:
    opened = Windows(TmuxServer(ms_dirs.root / "tmux-1.sock", person_env(ms_dirs)))
    try:
        yield opened
    finally:
        opened.close()


async def wait_holders(ms_dirs: MsDirs, holders: int, watchers: int) -> None:
    """Until the daemon says ``s`` is held by ``holders`` clients, ``watchers``
    of them read-only."""
    await wait_session(
        ms_dirs,
        "s",
        lambda c: c is not None and (c.holders, c.watchers) == (holders, watchers),
        f"held by {holders} ({watchers} read-only)",
    )


async def ls_held(ms_dirs: MsDirs) -> tuple[str, tuple[object, object, object]]:
    """``ls``'s HELD of ``s`` and ``ls --json``'s held, holders, watchers."""
    table = (await ms(ms_dirs, "ls")).stdout.decode().splitlines()
    start, end = table[0].index("HELD"), table[0].index("COMMAND")
    (row,) = [line for line in table[1:] if line.split()[0] == "s"]
    out = await ms(ms_dirs, "ls", "--json")
    (obj,) = [o for o in json.loads(out.stdout) if o["name"] == "s"]
    return row[start:end].strip(), (obj["held"], obj["holders"], obj["watchers"])


async def start_session(ms_dirs: MsDirs) -> None:
    """``s``: bash, its prompt ``in$``, started detached by ``new -d``."""
    env = {**person_env(ms_dirs), "PS1": INNER_PROMPT}
    argv = [MULTISERVER, "new", "-d", "-n", "s", "--", "bash", "--norc"]

    def run() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(argv, env=env, cwd=ms_dirs.root, capture_output=True, timeout=30)

    done = await trio.to_thread.run_sync(run)
    assert (done.returncode, done.stdout) == (0, b"s\n"), done.stderr
    await wait_buffered(ms_dirs, "s", INNER_PROMPT.encode())


async def shown_in(text: str, *windows: Window) -> None:
    for window in windows:
        await window.wait_screen(text)


def master_of(pid: int) -> list[str]:
    """The PTY masters ``pid`` holds: each /dev/ptmx fd's tty-index (``?``
    where the kernel does not say)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/ptmx":
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    index = re.search(r"^tty-index:\s*(\d+)$", f.read(), re.M)
                found.append(index.group(1) if index else "?")
    return found


async def test_two_type_one_watches_one_leaves_one_takes_over(
    ms_dirs: MsDirs, daemon: RunningDaemon, windows: Windows
) -> None:
    await start_session(ms_dirs)
    one, two, ro, taker = [await windows.open(n) for n in ("one", "two", "ro", "taker")]

    # Two typing terminals: each shows the program, what each types reaches it.
    one.line("multiserver attach s")
    await wait_holders(ms_dirs, 1, 0)
    await one.wait_screen(INNER_PROMPT.strip())
    two.line("multiserver attach s")
    await wait_holders(ms_dirs, 2, 0)
    one.line("echo one$((40+2))")
    await shown_in("one42", one, two)
    two.line("echo two$((40+2))")
    await shown_in("two42", one, two)
    for window in (one, two):  # what the other typed, as bash echoed it
        screen = window.screen()
        assert "in$ echo one$((40+2))" in screen and "in$ echo two$((40+2))" in screen, screen
    assert await ls_held(ms_dirs) == ("2", (True, 2, 0))

    # A watcher: shows it all; what it types goes nowhere.
    ro.line("multiserver attach -r s")
    await wait_holders(ms_dirs, 3, 1)
    await ro.wait_screen("two42")
    assert master_of(ro.attach_pid()) == []  # a watcher gets no master
    ro.line("echo ro$((40+2))")
    one.line("echo three$((40+2))")
    await shown_in("three42", one, two, ro)
    two.line("echo four$((40+2))")  # a second round trip after the watcher's keys
    await shown_in("four42", one, two, ro)
    for window in (one, two, ro):
        assert "ro42" not in window.screen() and "ro$((" not in window.screen()
    assert await ls_held(ms_dirs) == ("3 (1 ro)", (True, 3, 1))

    # One typing terminal detaches; the others go on.
    two.keys(DETACH)
    await two.wait_screen("[detached from s]")
    await wait_holders(ms_dirs, 2, 1)
    one.line("echo after$((40+2))")
    await shown_in("after42", one, ro)
    assert "after42" not in two.screen()
    assert await ls_held(ms_dirs) == ("2 (1 ro)", (True, 2, 1))

    await take_over(ms_dirs, taker, one, ro)
    await events_in_order(ms_dirs)


async def take_over(ms_dirs: MsDirs, taker: Window, one: Window, ro: Window) -> None:
    """``attach -d s`` in ``taker``: the others are detached, told so; its
    client, alone, holds the session's master itself."""
    taker.line("multiserver attach -d s")
    await shown_in("[s attached elsewhere]", one, ro)
    await wait_holders(ms_dirs, 1, 0)
    await taker.wait_screen("after42")  # what the session showed, replayed
    taker.line("echo last$((40+2))")
    await taker.wait_screen("last42")
    assert "last42" not in one.screen() and "last42" not in ro.screen()
    # The watcher's keys were read and dropped, not left for its shell.
    ro.line("echo probe$((1+1))")
    await ro.wait_screen("probe2")
    assert "ro42" not in ro.screen()
    assert await ls_held(ms_dirs) == ("1", (True, 1, 0))

    found = await wait_session(ms_dirs, "s", lambda c: c is not None, "listed")
    assert found is not None
    pid = taker.attach_pid()
    links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    assert "/dev/ptmx" in links, links
    assert master_of(pid) in (["?"], [found.tty.removeprefix("/dev/pts/")]), (found.tty, pid)


async def events_in_order(ms_dirs: MsDirs) -> None:
    """``events --json --since 1``: this test's story, activity left out."""
    follower = Follower(ms_dirs, "events", "--json", "--since", "1")
    try:

        def told(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [e for e in events if e.get("name") == "s" and e["kind"] != "activity"]

        await follower.wait(lambda e: len(told(e)) >= 8, "the 8 events of s")
        events = told(follower.events())
    finally:
        follower.kill()
    assert [e["kind"] for e in events] == [
        "created",
        "joined",  # one
        "joined",  # two
        "joined",  # ro
        "left",  # two detached
        "taken_over",  # taker
        "left",
        "left",  # one and ro, told it was attached elsewhere
    ], events
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == 8
    first, second, watcher = (e["client"] for e in events[1:4])
    assert len({first, second, watcher}) == 3
    assert events[4]["client"] == second
    assert events[5]["client"] not in (first, second, watcher)
    assert {events[6]["client"], events[7]["client"]} == {first, watcher}
