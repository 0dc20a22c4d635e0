"""``multiserver`` driven as a person drives it, in a terminal.

Each test opens one or more windows (``open_terminal``: a PTY rendered by
pyte, running the person's ``sh`` with the prompt ``outer$ ``), types into
them, and reads the screen. Sessions usually run ``sh -i`` with the prompt
``in$ ``. What the person does between two checks is what the test's name
says; every wait is on something the screen (or ``ls --json``) shows, bounded.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest
import trio

from multiserver_cli.attach._terminal import SENTINEL
from tests.cli.conftest import (
    INNER_PROMPT,
    INNER_SH,
    MULTISERVER,
    Terminal,
    listed,
    ms,
    person_env,
    sessions,
    wait_buffered,
    wait_session,
    write_fifo,
)
from tests.conftest import MsDirs, daemon_pids_for, is_dead, wait_until

DETACH = "\x1c"  # Ctrl-\
CTRL_A = "\x01"


def status_line(code: int) -> re.Pattern[str]:
    """The line ``st=N`` that ``...; echo "st=$?"`` prints after a command."""
    return re.compile(rf"^st={code}$", re.M)


def after_last(screen: str, marker: str) -> str:
    """The part of the screen after the last line containing ``marker``
    ("" while ``marker`` is not on the screen)."""
    at = screen.rfind(marker)
    return "" if at < 0 else screen[at:].partition("\n")[2]


def modes_check() -> str:
    """Typed at the outer prompt: prints modes-restored if the terminal's
    modes equal those saved in $saved (``saved=$(stty -g)``)."""
    return '[ "$(stty -g)" = "$saved" ] && echo modes-restored || echo modes-CHANGED'


async def start_in_window(term: Terminal, command: str, prompt: str = INNER_PROMPT) -> None:
    """Type ``command`` at the outer prompt (saving the terminal's modes
    first), wait for ``prompt`` to appear after it."""
    await term.wait_prompt()
    term.line(f'saved=$(stty -g); {command}; echo "st=$?"')
    await term.wait_prompt(prompt)


async def test_bare_multiserver_is_a_persistent_shell_named_main(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """`multiserver` with no arguments starts the user's shell in the session
    main; typing works; ^\\ detaches with the terminal as it was; `multiserver`
    again comes back to the same shell."""
    env = person_env(ms_dirs)
    env["SHELL"] = "/bin/bash"
    (Path(env["HOME"]) / ".bashrc").write_text("PS1='main> '\n")
    t = open_terminal(env=env)
    await t.wait_prompt()
    t.line("saved=$(stty -g); tty; multiserver")
    await t.wait_prompt("main> ")
    outer_tty = t.screen_lines()[1]
    t.line("echo hello-$((6*7)); tty; echo $$ > shell.pid")
    screen = await t.wait_screen(lambda s: s.count("main>") == 2)
    assert "hello-42" in screen
    inner_tty = after_last(screen, "hello-42").split("\n")[0]
    assert inner_tty.startswith("/dev/pts/") and inner_tty != outer_tty
    shell_pid = int((ms_dirs.root / "shell.pid").read_text())

    t.type(DETACH)
    screen = await t.wait_screen("[detached from main]")
    await t.wait_prompt()
    assert not t.is_raw()
    t.line(modes_check())
    await t.wait_screen("modes-restored")
    t.line("stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo")
    await t.wait_screen(lambda s: after_last(s, "grep -x").split("\n")[:2] == ["icanon", "echo"])

    found = await sessions(ms_dirs)
    assert list(found) == ["main"]
    assert found["main"]["pid"] == shell_pid and found["main"]["held"] is False
    assert found["main"]["argv"] == ["/bin/bash"] and found["main"]["state"] == "running"

    t.line("clear; multiserver")
    await t.wait_raw_mode()
    t.line("echo again-$$")
    await t.wait_screen(f"again-{shell_pid}")


async def test_detach_leaves_the_program_running_and_reattach_shows_its_output(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """Output a session writes while detached (1..50) is shown, in order and
    all of it, on attach, and nothing else; after detaching, it runs on."""
    t = open_terminal()
    await t.wait_prompt()
    t.line("multiserver new -d -n w -- sh -c 'sleep 0.3; seq 1 50; sleep 100'")
    await t.wait_screen(re.compile(r"^w$", re.M))
    await t.wait_prompt(count=2)
    await wait_session(ms_dirs, "w", lambda s: s and s.buffered_bytes == 191, "done writing")
    t.line("clear; multiserver attach w")
    await t.wait_screen(re.compile(r"^50$", re.M))
    replayed = t.raw[t.raw.rindex(b"attach w\r\n") :]
    numbers = [int(n) for n in re.findall(rb"(\d+)\r\n", replayed)]
    assert numbers == list(range(1, 51))
    # A full screen of it (the cursor on the row after 50), nothing stray.
    assert t.screen_text().split("\n") == [str(k) for k in range(22, 51)]

    t.type(DETACH)
    await t.wait_screen("[detached from w]")
    await t.wait_prompt()
    assert (await listed(ms_dirs))["w"].state == "running"


async def test_closing_the_terminal_gives_the_session_back_and_another_terminal_gets_it(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """The window is closed while attached: the client goes away, the session
    runs on unheld. Another window (of another size) attaches and sees the
    earlier screen, then what the session wrote meanwhile, once each."""
    go = ms_dirs.root / "go"
    os.mkfifo(go)
    t1 = open_terminal(name="first window")
    await start_in_window(t1, f"multiserver new -n main -- {INNER_SH}")
    t1.line("echo before-close")
    await t1.wait_screen(re.compile(r"^before-close$", re.M))
    waiting = f'read x < {go}; echo "meanwhile-$x"'
    t1.line(waiting)
    await t1.wait_screen(waiting)
    (client,) = t1.client_pids()

    t1.close()
    await wait_until(lambda: is_dead(client), 10.0, "the client to go with its window")
    await wait_until(lambda: not t1.processes(), 10.0, "every process of the closed window")
    await wait_session(ms_dirs, "main", lambda s: s and s.held is False, "released")
    await write_fifo(go, b"ok\n")
    await wait_buffered(ms_dirs, "main", b"meanwhile-ok")
    assert (await listed(ms_dirs))["main"].state == "running"

    t2 = open_terminal(name="second window", rows=24, cols=80)
    await t2.wait_prompt()
    t2.line("multiserver attach main")
    screen = await t2.wait_screen(lambda s: after_last(s, "meanwhile-ok") == INNER_PROMPT.rstrip())
    assert after_last(screen, "outer$ multiserver attach main").split("\n") == [
        f"{INNER_PROMPT}echo before-close",
        "before-close",
        f"{INNER_PROMPT}{waiting}",
        "meanwhile-ok",
        INNER_PROMPT.rstrip(),
    ]
    t2.line("stty size")
    await t2.wait_screen(re.compile(r"^24 80$", re.M))


async def test_resizing_the_terminal_resizes_the_session(ms_dirs: MsDirs, open_terminal) -> None:
    """The session's PTY follows the window's size. The client passes the
    size on through the daemon, so the test waits for the daemon to report
    it before typing (keys typed at once can overtake it)."""
    t = open_terminal()
    await start_in_window(t, f"multiserver new -n main -- {INNER_SH}")
    t.line("stty size")
    await t.wait_screen(re.compile(r"^30 100$", re.M))
    for rows, cols in [(20, 70), (40, 132)]:
        t.resize(rows, cols)
        await wait_session(
            ms_dirs, "main", lambda s, size=(rows, cols): s and (s.rows, s.cols) == size, "resized"
        )
        t.line("clear; stty size")
        await t.wait_screen(re.compile(rf"^{rows} {cols}$", re.M))


FULL_SCREEN = r"""
import os, signal, sys
draws = 0
def draw(*_):
    global draws
    draws += 1
    cols, rows = os.get_terminal_size(1)
    os.write(1, (f"\x1b[H\x1b[2JTOP {rows}x{cols} draw {draws}"
                 f"\x1b[{rows};1HBOTTOM {rows}x{cols}").encode())
signal.signal(signal.SIGWINCH, draw)
draw()
while True:
    signal.pause()
"""


def full_screen_ok(rows: int, cols: int, min_draw: int = 1) -> object:
    """A predicate: the full-screen program's picture for rows x cols, drawn
    at least ``min_draw`` times, with its bottom line on the last row."""

    def ok(screen: str) -> bool:
        lines = screen.split("\n")
        m = re.fullmatch(rf"TOP {rows}x{cols} draw (\d+)", lines[0])
        return bool(m) and int(m[1]) >= min_draw and lines[rows - 1 :] == [f"BOTTOM {rows}x{cols}"]

    return ok


async def test_full_screen_program_is_redrawn_on_attach_and_resize(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """A full-screen program is made to redraw when a terminal attaches (also
    one of another size, after the first was closed) and when it is resized."""
    script = ms_dirs.root / "full_screen.py"
    script.write_text(FULL_SCREEN)
    await ms(ms_dirs, "new", "-d", "-n", "fs", "--", sys.executable, str(script))
    await wait_session(ms_dirs, "fs", lambda s: s and s.buffered_bytes > 0, "drawn")

    t1 = open_terminal(name="first window")
    await t1.wait_prompt()
    t1.line("multiserver attach fs")
    # Its first picture is replayed; the redraw on attach is the second one.
    await t1.wait_screen(full_screen_ok(30, 100, min_draw=2))
    t1.resize(20, 70)
    await t1.wait_screen(full_screen_ok(20, 70))
    t1.close()
    await wait_session(ms_dirs, "fs", lambda s: s and s.held is False, "released")

    t2 = open_terminal(name="second window", rows=24, cols=80)
    await t2.wait_prompt()
    t2.line("multiserver attach fs")
    await t2.wait_screen(full_screen_ok(24, 80))
    t2.type(DETACH)
    await t2.wait_screen("[detached from fs]")


REGION = r"""
import os, signal
os.write(1, b"\x1b[1;5r")  # a scroll region of five rows, at the session's size
def draw(*_):
    os.write(1, b"\x1b[5;1H" + b"".join(b"L%d\r\n" % i for i in range(1, 41)))
signal.signal(signal.SIGWINCH, draw)
while True:
    signal.pause()
"""


async def test_a_replay_drawn_at_another_size_leaves_no_scroll_region_behind(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """The program set a scroll region at its 24 rows; a 30-row window
    attaches. A terminal resets its region when resized, and the program,
    told of the new size, prints 40 lines without setting one: they scroll
    the whole window, as they would on a terminal that had been resized,
    not the replayed region's five rows (vim redraws so: issue 38's
    capture found it)."""
    script = ms_dirs.root / "region.py"
    script.write_text(REGION)
    await ms(ms_dirs, "new", "-d", "-n", "region", "--", sys.executable, str(script))
    await wait_session(ms_dirs, "region", lambda s: s and s.buffered_bytes > 0, "region set")
    t = open_terminal(rows=30, cols=100)
    await t.wait_prompt()
    t.line("multiserver attach region")
    # L40 on the 29th row: only a whole window scrolls it there (a region
    # of five rows would keep it on the fifth).
    await t.wait_screen(lambda s: s.split("\n")[27:29] == ["L39", "L40"])
    t.type(DETACH)
    await t.wait_screen("[detached from region]")


async def test_program_exit_while_attached_reports_its_code(ms_dirs: MsDirs, open_terminal) -> None:
    """`exit 3` in the session: `[e exited with code 3]`, status 3, terminal
    modes back, session collected; killed by SIGKILL: `[k killed by SIGKILL]`,
    status 137."""
    t = open_terminal()
    await start_in_window(t, f"multiserver new -n e -- {INNER_SH}")
    t.line("exit 3")
    screen = await t.wait_screen(status_line(3))
    assert "[e exited with code 3]" in screen
    await t.wait_prompt(count=2)
    t.line(modes_check())
    await t.wait_screen("modes-restored")
    assert "e" not in await listed(ms_dirs)

    await start_in_window(t, f"clear; multiserver new -n k -- {INNER_SH}")
    t.line("kill -KILL $$")
    screen = await t.wait_screen(status_line(137))
    assert "[k killed by SIGKILL]" in screen
    assert await listed(ms_dirs) == {}


async def test_attaching_to_an_exited_session_shows_its_output_and_collects_it(
    ms_dirs: MsDirs, open_terminal
) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "done", "--", "sh", "-c", "echo bye-bye; exit 7")
    await wait_session(ms_dirs, "done", lambda s: s and s.state == "exited", "exited")
    t = open_terminal()
    await t.wait_prompt()
    t.line('multiserver attach done; echo "st=$?"')
    screen = await t.wait_screen(status_line(7))
    shown = [line for line in after_last(screen, "multiserver attach done").split("\n") if line]
    assert shown[:3] == [
        "bye-bye",
        "[done exited with code 7]",
        "st=7",
    ]
    assert await listed(ms_dirs) == {}


async def test_an_exited_sessions_output_is_shown_as_a_live_replay_is(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """A program that turned ONLCR off writes bare newlines, which move down
    a row and keep the column, as on its own terminal. A live session's
    replay is written in raw mode and shows that; an exited session's was
    written in cooked mode, where the terminal added a CR to each newline."""
    program = 'stty -onlcr; printf "ab\\ncd\\n"; '
    await ms(ms_dirs, "new", "-d", "-n", "live", "--", "sh", "-c", program + "sleep 1000")
    await ms(ms_dirs, "new", "-d", "-n", "done", "--", "sh", "-c", program + "exit 7")
    await wait_session(ms_dirs, "done", lambda s: s and s.state == "exited", "exited")
    await wait_buffered(ms_dirs, "live", b"cd\n")
    t = open_terminal()
    await t.wait_prompt()
    t.line("multiserver attach live")
    await t.wait_screen(re.compile(r"^ *cd$", re.M))
    t.type(DETACH)
    await t.wait_screen("[detached from live]")
    await t.wait_prompt(count=2)
    t.line("multiserver attach done")
    screen = await t.wait_screen("[done exited with code 7]")
    live = after_last(screen, "multiserver attach live").split("\n")[:2]
    done = after_last(screen, "multiserver attach done").split("\n")[:2]
    assert live == ["ab", "  cd"]
    assert done == live


async def test_detach_key_can_be_changed_or_disabled(ms_dirs: MsDirs, open_terminal) -> None:
    """With `-e ^A`, ^\\ reaches the program and ^A detaches; with `-E`
    neither detaches (the program sees both)."""
    t = open_terminal()
    await t.wait_prompt()
    # The program echoes control characters visibly and gets ^\ as a byte.
    t.line("multiserver new -e '^A' -n k -- sh -c 'stty -isig; exec cat -v'; echo \"st=$?\"")
    await t.wait_raw_mode()
    t.type(DETACH + "one\r")
    await t.wait_screen(re.compile(r"^\^\\one$", re.M))
    assert t.is_raw()
    t.type(CTRL_A)
    await t.wait_screen("[detached from k]")
    await t.wait_screen(status_line(0))

    t.line('clear; multiserver attach -E k; echo "st=$?"')
    await t.wait_raw_mode()
    t.type(DETACH + CTRL_A + "two\r")
    await t.wait_screen(re.compile(r"^\^\\\^Atwo$", re.M))
    assert t.is_raw()
    t.type("\x04")  # ^D: cat ends, and with it the session
    screen = await t.wait_screen(status_line(0))
    assert "[k exited with code 0]" in screen


async def test_attach_d_from_a_second_terminal_takes_the_session_over(
    ms_dirs: MsDirs, open_terminal
) -> None:
    t1 = open_terminal(name="first window")
    await start_in_window(t1, f"multiserver new -n main -- {INNER_SH}")
    t2 = open_terminal(name="second window")
    await t2.wait_prompt()
    t2.line('saved=$(stty -g); multiserver attach -d main; echo "st=$?"')
    screen = await t1.wait_screen(status_line(0))
    assert "[main attached elsewhere]" in screen
    await t1.wait_prompt(count=2)
    assert not t1.is_raw()
    t1.line(modes_check())
    await t1.wait_screen("modes-restored")

    await t2.wait_raw_mode()
    t2.line("echo typed-in-two")
    await t2.wait_screen(re.compile(r"^typed-in-two$", re.M))
    assert (await listed(ms_dirs))["main"].held


# --- a client killed mid-stream -----------------------------------------------------

N_HALF = 40_000


def stream(first: int, last: int) -> bytes:
    """What a terminal receives from `seq -f n%g FIRST LAST` (ONLCR on)."""
    return b"".join(b"n%d\r\n" % k for k in range(first, last + 1))


def first_difference(got: bytes, want: bytes) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    if at is None:
        at = min(len(got), len(want))
    return f"{len(got)} bytes, want {len(want)}; differ at {at}: {got[at - 20 : at + 20]!r}"


async def test_client_sigkilled_mid_stream_loses_no_byte(ms_dirs: MsDirs, open_terminal) -> None:
    """A window runs `multiserver attach s` itself (like `xterm -e`), so all
    it receives is the session's output. The program writes n1..n40000, and,
    once the client has shown them, the client is SIGKILLed and the program
    writes n40001..n80000 straight away, into the PTY nobody reads until the
    daemon notices. A second window's attach replays the rest: both windows
    together received the stream exactly once, in order."""
    go = ms_dirs.root / "go"
    os.mkfifo(go)
    program = f"read x < {go}; seq -f n%g 1 {N_HALF}; read x < {go}; seq -f n%g {N_HALF + 1} {2 * N_HALF}; sleep 1000"
    await ms(ms_dirs, "new", "-d", "-n", "s", "--", "sh", "-c", program)
    t1 = open_terminal([MULTISERVER, "attach", "s"], name="first window")
    await t1.wait_raw_mode()
    await wait_session(ms_dirs, "s", lambda s: s and s.held, "held")

    await write_fifo(go)
    await t1.wait_bytes(b"n%d\r\n" % N_HALF)
    os.kill(t1.pid, signal.SIGKILL)
    await wait_until(lambda: is_dead(t1.pid), 5.0, "the client to die")
    await write_fifo(go)
    with trio.fail_after(5):
        await t1.hung_up.wait()
    shown_first = bytes(t1.raw)

    t2 = open_terminal([MULTISERVER, "attach", "s"], name="second window")
    await t2.wait_bytes(b"n%d\r\n" % (2 * N_HALF))
    # The replay is followed by the client's own question (the sentinel).
    got = shown_first + bytes(t2.raw).replace(SENTINEL, b"", 1)
    assert got == stream(1, 2 * N_HALF), first_difference(got, stream(1, 2 * N_HALF))
    assert (await listed(ms_dirs))["s"].dropped_bytes == 0


async def test_client_sigkilled_while_replaying_loses_no_byte(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """n1..n40000 is written while detached. A window that reads slowly (here:
    not at all, until the client is killed) attaches; the client is killed
    while it writes the replay. The daemon kept the output it handed over
    (the client claims with keep_output and gives it back only on release),
    so all of it is there for the next attach: nothing lost; what the dead
    window got is a prefix of it."""
    await ms(
        ms_dirs, "new", "-d", "-n", "s", "--", "sh", "-c", f"seq -f n%g 1 {N_HALF}; sleep 1000"
    )
    want = stream(1, N_HALF)
    await wait_session(
        ms_dirs, "s", lambda s: s and s.buffered_bytes == len(want), "holding the output"
    )
    t1 = open_terminal([MULTISERVER, "attach", "s"], name="slow window", reading=False)
    await wait_until(lambda: t1.pending() > 0, 15.0, "the replay to start")
    os.kill(t1.pid, signal.SIGKILL)
    await wait_until(lambda: is_dead(t1.pid), 5.0, "the client to die")
    t1.start_reading()
    with trio.fail_after(5):
        await t1.hung_up.wait()
    await wait_session(ms_dirs, "s", lambda s: s and not s.held, "released")
    kept = (await ms(ms_dirs, "peek", "s")).stdout
    assert kept == want, first_difference(kept, want)
    assert want.startswith(bytes(t1.raw))


async def test_a_stalled_terminal_holds_up_neither_the_program_nor_the_keys(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """The window stops reading (its emulator is busy). The client still
    reads the session's PTY, up to its bound (256 KiB): a program writing
    150,000 bytes finishes (it used to block after about 50 KiB, the client
    blocked in its write to the window); what the person types still reaches
    the program, and the detach key is seen. Once the window reads again it
    gets all of it, once, in order, then the status line; and what the
    client hands back on release is exactly what the window was shown."""
    go, wrote, typed = ms_dirs.root / "go", ms_dirs.root / "wrote", ms_dirs.root / "typed"
    os.mkfifo(go)
    program = (
        f"read x < {go}; head -c 150000 /dev/zero | tr '\\0' x; echo; touch {wrote};"
        f' read line; echo "$line" > {typed}; sleep 1000'
    )
    await ms(ms_dirs, "new", "-d", "-n", "s", "--", "sh", "-c", program)
    t = open_terminal([MULTISERVER, "attach", "s"], name="stalled window", reading=False)
    await t.wait_raw_mode()
    await wait_session(ms_dirs, "s", lambda s: s and s.held, "held")
    await write_fifo(go)
    await wait_until(wrote.exists, 15.0, "the program to write it all to a window reading nothing")
    assert t.pending() > 0
    t.type("hello\r")
    await wait_until(
        lambda: typed.exists() and typed.read_text() == "hello\n", 15.0, "the typed line"
    )
    t.type(DETACH)
    t.start_reading()
    await t.wait_bytes(b"[detached from s]")
    await wait_session(ms_dirs, "s", lambda s: s and not s.held, "released")
    program_output = b"x" * 150000 + b"\r\nhello\r\n"
    assert bytes(t.raw).startswith(program_output + b"\x1b\\\x1b7")  # then the reset
    kept = (await ms(ms_dirs, "peek", "s")).stdout
    assert kept == program_output, first_difference(kept, program_output)


async def test_keys_typed_before_the_session_reads_them_reach_it_as_in_tmux(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """Issue 36 item 10, the doubled prompt after ``make run``: an Enter
    pressed while the command starts, before the session's shell has drawn
    its prompt, reaches that shell once it reads (a second, empty prompt).
    That is typing ahead, kept as tmux and ssh keep it: attach takes the
    terminal raw without flushing what it holds, and passes it on once."""
    t = open_terminal()
    await t.wait_prompt()
    # The command and the keys after it in one write: the outer shell
    # reads its line, the rest waits in the terminal for whoever reads next.
    t.type("multiserver new -n ahead -- sh -c 'read x; echo \"[got $x]\"; read y'\rtyped-ahead\r")
    await t.wait_screen("[got typed-ahead]")
    screen = t.screen_text()
    assert screen.count("[got typed-ahead]") == 1, screen
    t.line("")
    await t.wait_screen("[ahead exited with code 0]")


STRACE = shutil.which("strace")


@pytest.mark.skipif(STRACE is None, reason="strace is not installed (make test installs it)")
async def test_attach_to_a_saved_session_dials_its_daemon_once(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """Issue 37: attach asked the saved session's daemon on one connection
    (a peek) and claimed it on a second. The daemon is dialled once now,
    and the claim goes on that connection: every connect() the command
    makes is counted, by strace."""
    await ms(ms_dirs, "new", "-d", "-n", "one", "--", "sh", "-c", "echo hello-once; sleep 100")
    await wait_buffered(ms_dirs, "one", b"hello-once")
    trace = ms_dirs.root / "connects.txt"
    t = open_terminal(
        [STRACE or "strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace),
         MULTISERVER, "attach", "one"]
    )  # fmt: skip
    await t.wait_screen("hello-once")
    t.type(DETACH)
    await t.wait_screen("[detached from one]")
    with trio.fail_after(10):
        while t.proc.poll() is None:
            await trio.sleep(0.01)
    socket = str(ms_dirs.paths.socket)
    dials = [line for line in trace.read_text().splitlines() if socket in line]
    assert len(dials) == 1, dials


@pytest.mark.skipif(STRACE is None, reason="strace is not installed (make test installs it)")
async def test_attach_to_a_wedged_daemon_asks_it_once_before_the_survey(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """A daemon that does not answer (stopped): attach tries it once on its
    own, then the survey asks every daemon and says which did not answer.
    It used to try it twice before the survey (attach's own dial, then the
    lookup's), waiting out the bound each time."""
    await ms(ms_dirs, "new", "-d", "-n", "stuck", "--", "sleep", "100")
    [daemon] = daemon_pids_for(ms_dirs.paths.socket)
    trace = ms_dirs.root / "connects.txt"
    os.kill(daemon, signal.SIGSTOP)
    try:
        t = open_terminal(
            [STRACE or "strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace),
             MULTISERVER, "attach", "stuck"]
        )  # fmt: skip
        await t.wait_screen("did not answer")
        with trio.fail_after(10):
            while t.proc.poll() is None:
                await trio.sleep(0.01)
        assert t.proc.returncode == 1
    finally:
        os.kill(daemon, signal.SIGCONT)
    socket = str(ms_dirs.paths.socket)
    dials = [line for line in trace.read_text().splitlines() if socket in line]
    assert len(dials) == 2, dials
