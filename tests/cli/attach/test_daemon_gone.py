"""The daemon of an attached session dies (SIGKILL), as a person sees it.

The client holds the session's PTY master, so the program runs on in the
terminal: the person is told at once, typing and resizing still reach the
program, and ``multiserver restore`` meanwhile reports the session as held
instead of starting a second copy of it (``restore/_held.py``). Detaching
closes the last master: the kernel hangs the terminal up, the program gets
SIGHUP and ends, as the line said; the next restore starts it again.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import signal
import struct
import termios

import trio

from tests.cli.conftest import Terminal, cmdline, ms
from tests.conftest import MsDirs, daemon_pids_for, is_alive, is_dead, wait_until

DETACH = "\x1c"  # Ctrl-\
# The session's program: echoes what it reads, says its terminal's size on
# "size". Its argv is unique to this test: a second copy would be found.
PROGRAM = [
    "sh",
    "-c",
    # This pytest's pid in the line: programs() finds this run's, not those
    # of another run of the suite on the same machine.
    f'while read l; do echo "got:$l"; [ "$l" = size ] && stty size; done # {os.getpid()}',
    "held-program-marker",
]


def programs() -> list[int]:
    """Every live process running PROGRAM."""
    return sorted(
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and cmdline(int(p)) == PROGRAM and is_alive(int(p))
    )


def pty_size(pid: int) -> tuple[int, int]:
    """The size of the terminal ``pid`` reads (rows, cols)."""
    fd = os.open(os.readlink(f"/proc/{pid}/fd/0"), os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    finally:
        os.close(fd)
    return rows, cols


def flat(text: str) -> str:
    """Without white space: a long line wraps on screen, where it may."""
    return re.sub(r"\s+", "", text)


async def wait_flat(term: Terminal, text: str, timeout: float = 15.0) -> str:
    def shown(screen: str) -> bool:
        return flat(text) in flat(screen)

    shown.__qualname__ = repr(text)
    return await term.wait_screen(shown, timeout)


async def restore_report(ms_dirs: MsDirs) -> list[tuple[str, str, str]]:
    done = await ms(ms_dirs, "restore", "--json")
    return [(s["name"], s["outcome"], s["detail"]) for s in json.loads(done.stdout)["sessions"]]


async def test_a_daemon_killed_under_an_attached_session(ms_dirs: MsDirs, open_terminal) -> None:
    term = open_terminal()
    await term.wait_prompt()
    term.line(f"multiserver new -n held -- {shlex.join(PROGRAM)}; echo st=$?")
    await term.wait_raw_mode()
    term.line("before")
    await term.wait_screen("got:before")
    (daemon,) = daemon_pids_for(ms_dirs.paths.socket)
    (program,) = programs()
    (client,) = term.client_pids()

    os.kill(daemon, signal.SIGKILL)
    # At once: the client wakes on its socket's end, not at detach.
    await wait_flat(
        term,
        f"[multiserver: the daemon of held (pid {daemon}) is gone; held goes on in this"
        " terminal until you detach, then it ends: its terminal is hung up and its program"
        " gets SIGHUP]",
        timeout=3.0,
    )
    assert is_dead(daemon)
    # The session goes on: keys reach the program, and so does a new size.
    term.line("after-death")
    await term.wait_screen("got:after-death")
    term.resize(20, 70)
    # Keys typed at once can overtake the size: wait for the PTY to have it.
    await wait_until(lambda: pty_size(program) == (20, 70), message="the PTY resized")
    term.line("size")
    await term.wait_screen(re.compile(r"^20 70$", re.M))

    # A restore meanwhile leaves it alone: no second copy; ls says the same.
    assert await restore_report(ms_dirs) == [
        ("held", "held", f"held by a client whose daemon died (pid {client}); not relaunched")
    ]
    listed = json.loads((await ms(ms_dirs, "ls", "--json")).stdout)
    assert [(r["name"], r["detail"]) for r in listed] == [
        ("held", f"held by a client whose daemon died (pid {client}); restore leaves it alone")
    ]
    assert programs() == [program]
    assert term.is_raw()

    # Detach: the last master closes, the program is hung up, as was said.
    term.type(DETACH)
    await wait_flat(
        term,
        "[held ended: its daemon was gone, so detaching hung up its terminal (SIGHUP);"
        " `multiserver restore` starts it again]",
    )
    await term.wait_screen(re.compile(r"^st=1$", re.M))
    await wait_until(lambda: is_dead(program), message="the program to be hung up")
    assert os.listdir(ms_dirs.runtime / "multiserver-held") == []

    # Nobody holds it now: the next restore starts it again.
    [(name, outcome, _)] = await restore_report(ms_dirs)
    assert (name, outcome) == ("held", "relaunched")
    await wait_until(lambda: len(programs()) == 1, message="the relaunched program")
    assert programs() != [program]


async def test_new_A_does_not_start_a_second_copy_of_a_held_session(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """`multiserver new -A -n NAME` (bare `multiserver` for main) in another
    terminal refuses, saying where the session is, rather than starting it
    again beside the one the first terminal shows."""
    first = open_terminal(name="first")
    await first.wait_prompt()
    first.line(f"multiserver new -n held -- {shlex.join(PROGRAM)}")
    await first.wait_raw_mode()
    (daemon,) = daemon_pids_for(ms_dirs.paths.socket)
    (program,) = programs()
    (client,) = first.client_pids()
    os.kill(daemon, signal.SIGKILL)
    await wait_flat(first, "[multiserver: the daemon of held")

    again = await ms(ms_dirs, "new", "-A", "-n", "held", "-d", check=False)
    assert (again.returncode, again.stderr.decode()) == (
        1,
        f"multiserver: held is held by a client whose daemon died (pid {client}), in another"
        " terminal: detach there (it then ends), then start it again\n",
    )
    assert programs() == [program]
    first.type(DETACH)
    await wait_until(lambda: is_dead(program), message="the program to be hung up")
    with trio.fail_after(15):
        await ms(ms_dirs, "new", "-A", "-n", "held", "-d")
    await wait_until(lambda: len(programs()) == 1, message="the program started again")


async def test_a_hold_that_cannot_be_recorded_is_said(ms_dirs: MsDirs, open_terminal) -> None:
    """The records' dir cannot be made (a file has its name): the person is
    told that a restore meanwhile would start a second copy, and the
    session goes on all the same. The daemon is killed as soon as the
    terminal is raw, maybe while the client still sizes the PTY through it
    (a run that failed so showed "connection closed by peer")."""
    term = open_terminal()
    await term.wait_prompt()
    term.line(f"multiserver new -n held -- {shlex.join(PROGRAM)}")
    await term.wait_raw_mode()
    (daemon,) = daemon_pids_for(ms_dirs.paths.socket)
    (program,) = programs()
    (ms_dirs.runtime / "multiserver-held").write_bytes(b"")

    os.kill(daemon, signal.SIGKILL)
    await wait_flat(
        term,
        f"[multiserver: the daemon of held (pid {daemon}) is gone; held goes on in this"
        " terminal until you detach, then it ends: its terminal is hung up and its program"
        " gets SIGHUP]\n[multiserver: cannot record in the runtime dir that this terminal holds"
        " held: a `multiserver restore` meanwhile would start a second copy]",
        timeout=3.0,
    )
    term.line("after-death")
    await term.wait_screen("got:after-death")
    term.type(DETACH)
    await wait_until(lambda: is_dead(program), message="the program to be hung up")
