"""abduco's own test suite (``testsuite.sh`` of martanne/abduco), ported:
each of its cases run through the real ``multiserver`` command, on a
terminal of its own, as abduco's runs through ``abduco``.

abduco's suite compares what a program prints run directly with what the
client shows for it, inside abduco's framing (the alternate screen on, the
output, the alternate screen off, ``abduco: NAME: session terminated with
exit status N``), and after each case ``check_environment`` checks that no
session is listed and no abduco process runs. The mapping:

- ``abduco -c NAME CMD`` is ``multiserver new -n NAME -- CMD``; ``-n`` is
  ``new -d``; ``-a`` is ``attach``; ``-e ^\\`` is ``-e ^\\`` (multiserver's
  default key too).
- The framing is multiserver's: nothing before the output; after it the
  reset that gives the terminal back (``screen_reset`` of what was shown)
  and ``[NAME exited with code N]`` on a line of its own; the command exits
  with N. abduco's suite reads the status only from its line; both are
  checked here.
- The program run directly runs on a terminal too: the bytes compared are
  the same, CRs included (abduco's suite sends it to a file and cuts the
  last character, the terminal's CR, of each line abduco showed).
- ``check_environment``: ``ls`` lists nothing; the daemon, one for every
  session where abduco has a server per session, goes by its idle exit
  (0.5 s here) once it has none; a second later no process names the
  test's dirs: no daemon, no client, no program.
- Readiness is a condition waited on, never abduco's ``sleep 1``.
"""

from __future__ import annotations

import os
import shutil

import pytest
import trio

from multiserver.internal import screen_reset
from tests.cli.conftest import (
    MULTISERVER,
    SCREEN_TIMEOUT,
    Terminal,
    ms,
    person_env,
    run_on_a_terminal,
    running_for,
    sessions,
    wait_buffered,
    wait_session,
    write_fifo,
)
from tests.conftest import POLL_INTERVAL, MsDirs, child_pids, daemon_pids_for, wait_until

DETACH = "\x1c"  # Ctrl-\, abduco's ABDUCO_OPTS="-e ^\"
# The programs of abduco's run_test_attached and run_test_detached, by the
# case's name. abduco's suite hands them to the shell's word splitting
# (``$ABDUCO -c "$name" $cmd``), which cuts the awk program at its spaces:
# awk gets ``'BEGIN``, ``{for(i=1;i<=1000;i++)``, ``print``, ``i}'`` and
# both of its runs print the same syntax error. Here awk gets the program
# the case names, as one argument, and prints 1 to 1000.
PROGRAMS = {
    "awk": ["awk", "BEGIN {for(i=1;i<=1000;i++) print i}"],
    "false": ["false"],
    "true": ["true"],
    "exit-status": ["./exit-status.sh"],
}
# Their exit statuses, run directly: what each case is about.
STATUSES = {"awk": 0, "false": 1, "true": 0, "exit-status": 42}
SCRIPTS = {
    "exit-status.sh": "#!/bin/sh\nexit 42\n",
    # abduco's long-running.sh waits with ``sleep 3`` twice, and its test
    # bets that the detach comes within the first and the attach within
    # the second; here the test lets the script go on when it is ready.
    "long-running.sh": (
        "#!/bin/sh\necho Start\ndate\nread go < go-on-1\necho Hello World\n"
        "read go < go-on-2\necho End\ndate\nexit 1\n"
    ),
}


@pytest.fixture(autouse=True)
def _idle_exit(ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon goes when it has no session left, as abduco's server does
    with its one session (after ``ms_dirs`` said never)."""
    monkeypatch.setenv("MULTISERVER_IDLE_EXIT", "0.5")


def write_scripts(ms_dirs: MsDirs) -> None:
    """abduco's scripts, in the dir where the commands run (``./NAME``)."""
    for name, text in SCRIPTS.items():
        path = ms_dirs.root / name
        path.write_text(text)
        path.chmod(0o755)


async def run_directly(ms_dirs: MsDirs, argv: list[str]) -> tuple[int, bytes]:
    """abduco's expected output: the program run without it (here on a
    terminal, where the session's program runs too); its status and bytes."""
    env = person_env(ms_dirs)
    return await trio.to_thread.run_sync(lambda: run_on_a_terminal(argv, env, cwd=ms_dirs.root))


def shown_for(name: str, output: bytes, code: int) -> bytes:
    """What multiserver shows of a session ``name`` whose program wrote
    ``output`` and exited with ``code`` (abduco's expected_abduco_*_output):
    the output, the reset, the status on a line of its own (its ``\\r\\n``
    is the window's ``\\r\\r\\n``: the terminal is cooked again by then)."""
    lead = b"\r" if not output or output.endswith(b"\n") else b"\r\n"
    status = f"[{name} exited with code {code}]".encode()
    return output + screen_reset(output) + lead + status + b"\r\r\n"


async def wait_closed(t: Terminal) -> int:
    """Until the window's command exited and every byte it wrote was read;
    its exit status."""
    with trio.fail_after(SCREEN_TIMEOUT):
        await t.hung_up.wait()
        while (code := t.proc.poll()) is None:
            await trio.sleep(POLL_INTERVAL)
    return code


async def check_environment(ms_dirs: MsDirs) -> None:
    """abduco's check_environment: no session listed (``abduco | wc -l``),
    no process left (``pgrep abduco``): the daemon gone by its idle exit,
    and a second later nothing that names the test's dirs."""
    assert await sessions(ms_dirs) == {}
    await wait_until(
        lambda: daemon_pids_for(ms_dirs.paths.socket) == [], 10, "the daemon's idle exit"
    )
    with trio.move_on_after(1.0):
        while running_for(ms_dirs):
            await trio.sleep(POLL_INTERVAL)
    assert running_for(ms_dirs) == {}, "left running a second after the daemon's idle exit"


async def test_non_existing_command(ms_dirs: MsDirs, open_terminal) -> None:
    """abduco's test_non_existing_command (``abduco -c test
    ./non-existing-command``, then check_environment): ``new`` refuses it
    in one line, exit 1, and leaves no session and nothing running."""
    t = open_terminal([MULTISERVER, "new", "-n", "test", "--", "./non-existing-command"])
    assert await wait_closed(t) == 1
    assert bytes(t.raw) == b"multiserver: command not found: ./non-existing-command\r\n"
    await check_environment(ms_dirs)


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_attached(ms_dirs: MsDirs, open_terminal, name: str) -> None:
    """abduco's run_test_attached NAME (``abduco -c NAME CMD``): the program
    runs in a session this terminal is attached to, to its end. The
    terminal gets its output byte for byte as run directly, then the
    reset and its exit status; ``new`` exits with that status."""
    write_scripts(ms_dirs)
    code, output = await run_directly(ms_dirs, PROGRAMS[name])
    assert code == STATUSES[name], output
    t = open_terminal([MULTISERVER, "new", "-n", name, "--", *PROGRAMS[name]])
    assert await wait_closed(t) == code
    assert bytes(t.raw) == shown_for(name, output, code)
    await check_environment(ms_dirs)


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_detached(ms_dirs: MsDirs, open_terminal, name: str) -> None:
    """abduco's run_test_detached NAME (``abduco -n NAME CMD``, the program
    ends, ``abduco -a NAME``): started detached, it ends with nobody
    attached; ``attach`` shows its exit status and ``check_environment``
    holds. The one difference: abduco keeps nothing of what a program wrote
    while nobody was attached (its expected output is the framing alone),
    multiserver keeps it and shows it at attach: byte for byte the output
    of the program run directly. "detached awk" is the case issue 35 saw
    fail: something of ours (a saver polling every 5 s) outlived the last
    session and its daemon."""
    write_scripts(ms_dirs)
    code, output = await run_directly(ms_dirs, PROGRAMS[name])
    assert code == STATUSES[name], output
    new = await ms(ms_dirs, "new", "-d", "-n", name, "--", *PROGRAMS[name])
    assert new.stdout == f"{name}\n".encode()
    await wait_session(ms_dirs, name, lambda c: c is not None and c.state == "exited", "ended")
    t = open_terminal([MULTISERVER, "attach", name])
    assert await wait_closed(t) == code
    assert bytes(t.raw) == shown_for(name, output, code)
    await check_environment(ms_dirs)


async def test_attach_detach(ms_dirs: MsDirs, open_terminal) -> None:
    """abduco's run_test_attached_detached "attach-detach" (``detach |
    abduco -e ^\\ -c NAME ./long-running.sh``, then ``abduco -a NAME``,
    whose last line must be the exit status 1): the detach key takes this
    terminal back (``new`` exits 0) while the program runs on; it writes
    while detached; ``attach`` comes back to it before it ends and sees it
    end; its last line is the status and ``attach`` exits 1. (abduco's
    script sleeps where this one waits on a FIFO, released by the test.)"""
    name = "attach-detach"
    write_scripts(ms_dirs)
    for fifo in ("go-on-1", "go-on-2"):
        os.mkfifo(ms_dirs.root / fifo)
    first = open_terminal([MULTISERVER, "new", "-e", "^\\", "-n", name, "--", "./long-running.sh"])
    await first.wait_screen("Start")
    first.type(DETACH)
    assert await wait_closed(first) == 0
    assert first.screen_text().endswith(f"[detached from {name}]")
    await write_fifo(ms_dirs.root / "go-on-1")
    await wait_buffered(ms_dirs, name, b"Hello World")
    assert b"Hello World" not in first.raw
    [child] = [s for s in (await sessions(ms_dirs)).values()]
    assert (child["name"], child["state"]) == (name, "running")

    second = open_terminal([MULTISERVER, "attach", name])
    await second.wait_screen("Hello World")  # kept while nobody was attached
    await write_fifo(ms_dirs.root / "go-on-2")
    assert await wait_closed(second) == 1
    assert bytes(second.raw).endswith(f"\r[{name} exited with code 1]\r\r\n".encode())
    screen = second.screen_text()
    order = ["Start", "Hello World", "End", f"[{name} exited with code 1]"]
    assert [screen.index(line) for line in order] == sorted(screen.index(line) for line in order), (
        screen
    )
    await check_environment(ms_dirs)


DVTM = shutil.which("dvtm")
MOD = b"\x07"  # dvtm's modifier key, ^G, as abduco's dvtm_cmd types it


@pytest.mark.skipif(DVTM is None, reason="dvtm is not installed (as abduco's suite, skipped)")
async def test_dvtm(ms_dirs: MsDirs, open_terminal) -> None:
    """abduco's run_test_dvtm (``dvtm_session | abduco -c dvtm``: dvtm,
    abduco's default program, given keys that open three windows, change
    the layout three times and quit; no output expected, and
    check_environment). abduco reads those keys from a pipe (its
    passthrough mode, which shows nothing); multiserver attaches only a
    terminal, so they are typed in this one, each once the last has taken
    effect, and its output is dvtm's screen. dvtm is named: multiserver's
    default program is the person's shell. dvtm must end by its own quit
    key, ``new`` with its status 0, and nothing be left, its windows'
    shells included."""
    t = open_terminal([MULTISERVER, "new", "-n", "dvtm", "--", "dvtm"])
    await t.wait_raw_mode()
    child = await wait_session(ms_dirs, "dvtm", lambda c: c is not None, "running")
    assert child is not None

    def windows() -> int:  # dvtm runs a shell in each
        return len(child_pids(child.pid))

    await wait_until(lambda: windows() == 1, SCREEN_TIMEOUT, "dvtm's first window")
    for count in (2, 3, 4):
        t.type(MOD + b"c\n")
        await wait_until(lambda count=count: windows() == count, SCREEN_TIMEOUT, "a window")
    for layout in ("+++", "TTT", "[ ]"):  # after tile ([]=): grid, bottom stack, full screen
        t.type(MOD + b" \n")
        await t.wait_screen(lambda s, layout=layout: layout in s.split("\n", 1)[0])
    t.type(MOD + b"qq\n")
    assert await wait_closed(t) == 0
    assert bytes(t.raw).endswith(b"[dvtm exited with code 0]\r\r\n")
    await check_environment(ms_dirs)
