"""attach HOST:NAME relays the person's terminal over ``ssh -T`` (_relay):
no PTY of sshd's between the session and the link, and still what a
terminal attach does: its size and size changes, every key (NUL and ssh's
``~.`` too), status lines at a line start, the terminal reset at the end.
The detach key in every encoding a terminal sends, seen on this side too:
a remote that does not read is left all the same."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Callable

import pytest

from multiserver.internal import screen_reset
from tests.cli.conftest import Terminal, cmdline, session_pids
from tests.conftest import MsDirs, daemon_pids_under, frozen, wait_until
from tests.procs import is_dead
from tests.remote.conftest import Remote
from tests.remote.sshd import process_tree
from tests.remote.test_hosts import person_ssh_env, run
from tests.remote.test_remote_commands import attached_over_ssh, ssh_clients_in

# Ctrl-\ as a terminal sends it once a program there asked for the kitty
# keyboard protocol (flags 1; 31: then its release follows) or for xterm's
# modifyOtherKeys.
KITTY_1 = b"\x1b[92;5u"
KITTY_31 = b"\x1b[92;5u\x1b[92;5:3u"
MODIFY_OTHER_KEYS = b"\x1b[27;5;92~"


async def attached(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal], script: str
) -> Terminal:
    return await attached_over_ssh(ms_dirs, sshd, open_terminal, ["sh", "-c", script])


async def test_the_terminal_is_relayed_with_its_size_and_every_key(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    term = await attached(ms_dirs, sshd, open_terminal, "echo ready; exec sh")
    await term.wait_screen("ready")
    (ssh,) = ssh_clients_in(term)
    argv = cmdline(ssh)
    assert "-T" in argv and "-tt" not in argv and "attach --relay" in argv[-1], argv

    term.line("stty size")
    await term.wait_screen("30 100")
    # The window is made bigger, and a line typed at once: the session's
    # PTY has the new size when the program reads it. The daemon there is
    # frozen meanwhile, so that its own resize cannot come first by luck:
    # the relay sizes the PTY before it passes on what was typed after.
    (daemon,) = daemon_pids_under(sshd.root)
    async with frozen(daemon):
        term.resize(40, 120)
        term.line("stty size; echo size-''said")
        shown = await term.wait_screen("\nsize-said")
    assert "\n40 120\nsize-said" in shown, shown

    # Every byte typed reaches the program as typed: NUL (the relay's own
    # escape byte) and ssh's escape sequence, which -T leaves alone.
    term.line("od -An -c | tr -s ' '; echo od-done")
    term.type(b"a\x00b\r~.\r")
    term.type(b"\x04")
    await term.wait_screen("od-done")
    shown = term.screen_text()
    assert re.search(r"a \\0 b \\n ~ \. \\n", shown), shown
    assert ssh_clients_in(term) == [ssh]  # ~. did not end ssh

    term.type(b"\x1c")
    await term.wait_screen("detached from web")
    # The status line starts a line (CR LF over the relay, raw as it is).
    assert any(line.startswith("[detached from web]") for line in term.screen_lines())
    await term.wait_prompt(count=2)
    term.line("stty -a | grep -o -- '-icanon\\|icanon' | head -1")
    await term.wait_screen("\nicanon")  # the terminal's own modes are back


async def test_a_full_screen_program_is_left_and_the_terminal_reset(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    # A program on the alternate screen, with the cursor hidden and the
    # mouse on: what a detach must undo on the person's terminal.
    script = r"printf '\033[?1049h\033[?25l\033[?1000hfull-screen'; exec sleep 1000"
    term = await attached(ms_dirs, sshd, open_terminal, script)
    await term.wait_screen("full-screen")
    seen = len(term.raw)
    term.type(b"\x1c")
    await term.wait_screen("detached from web")
    after = bytes(term.raw[seen:])
    for undo in (b"\x1b[?1049l", b"\x1b[?25h", b"\x1b[?1000l"):
        assert undo in after, after
    # ... before the status line, so that it is shown on the main screen.
    assert after.index(b"\x1b[?1049l") < after.index(b"[detached from web]")


@pytest.mark.parametrize(
    "sent", [KITTY_31, MODIFY_OTHER_KEYS], ids=["kitty-31", "modify-other-keys"]
)
async def test_the_detach_key_in_another_encoding_detaches_over_the_relay(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal], sent: bytes
) -> None:
    # The program there turns the protocol on (a terminal would then send
    # Ctrl-\\ as ``sent``) and shows each byte it reads, as it reads it.
    script = r"stty raw -echo; printf '\033[>1uready\n'; exec od -An -tx1 -w1 -v"
    term = await attached(ms_dirs, sshd, open_terminal, script)
    await term.wait_screen("ready")
    term.type(b"ab" + sent)
    await term.wait_screen("[detached from web]")
    await term.wait_prompt(count=2)
    assert ssh_clients_in(term) == []
    peeked = run(ms_dirs, sshd, "peek", "db1:web").stdout
    assert re.findall(r"^ ([0-9a-f]{2})$", peeked, re.M) == ["61", "62"], peeked
    term.line("echo after")
    await term.wait_screen("\nafter")
    assert "92" not in term.screen_text()  # nothing of the key reached the shell


async def test_a_remote_that_never_reads_is_left_with_the_detach_key(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    term = await attached(ms_dirs, sshd, open_terminal, "echo ready; exec sleep 1000")
    await term.wait_screen("ready")
    (remote,) = [
        p for p in process_tree(sshd.proc.pid) if "--relay" in cmdline(p) and "web" in cmdline(p)
    ]
    os.kill(remote, signal.SIGSTOP)  # the remote attach reads nothing more
    try:
        term.type(KITTY_1)
        await term.wait_screen("[detached: db1 did not answer; the session runs on there]")
        await term.wait_prompt(count=2)
        await wait_until(lambda: not ssh_clients_in(term), 10, "ssh ended")
        term.line("stty -a | grep -o -- '-icanon\\|icanon' | head -1")
        await term.wait_screen("\nicanon")  # the terminal's own modes are back
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(remote, signal.SIGCONT)


FULL_SCREEN = r"printf '\033[?1049h\033[?25l\033[?1000h\033[?2004hfull-screen'; exec sleep 1000"


async def test_a_link_lost_in_a_full_screen_program_resets_before_the_reconnect_lines(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    """Before: the relay put back termios only, the "[reconnecting...]"
    lines were drawn on the alternate screen, and after giving up the modes
    stayed. The remote attach could not reset (its link was gone): this
    side does, every mode, before saying anything."""
    term = await attached(ms_dirs, sshd, open_terminal, FULL_SCREEN)
    await term.wait_screen("full-screen")
    seen = len(term.raw)
    for pid in ssh_clients_in(term):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # the link drops
    await term.wait_screen("[reconnecting to db1...")
    after = bytes(term.raw[seen:])
    reset = screen_reset(None)
    assert reset in after and after.index(reset) < after.index(b"[reconnecting"), after
    term.type(b"\x1c")
    await term.wait_screen("[stopped reconnecting to db1")


async def test_sigterm_to_the_client_leaves_no_ssh_and_resets_the_terminal(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    """Before: SIGTERM ended the client and left its ``ssh -T`` running,
    and the terminal in the program's modes."""
    term = await attached(ms_dirs, sshd, open_terminal, FULL_SCREEN)
    await term.wait_screen("full-screen")
    ssh = ssh_clients_in(term)
    [client] = [
        p for p in session_pids(term.pid) if "db1:web" in cmdline(p) and cmdline(p)[:1] != ["ssh"]
    ]
    seen = len(term.raw)
    os.kill(client, signal.SIGTERM)
    await wait_until(lambda: all(is_dead(p) for p in [client, *ssh]), 15, "client and ssh gone")
    await term.wait_prompt(count=2)
    assert screen_reset(None) in bytes(term.raw[seen:])


async def test_a_host_session_is_joined_and_watched_through_ssh(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    """attach HOST:NAME joins the terminal attached there already, and
    attach -r HOST:NAME watches it: all three show what is typed in the
    first two; what the watcher types goes nowhere (docs/sharing.md)."""
    first = await attached(ms_dirs, sshd, open_terminal, "echo ready; exec sh")
    await first.wait_screen("ready")
    second = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await second.wait_prompt()
    second.line("multiserver attach db1:web")
    watcher = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await watcher.wait_prompt()
    watcher.line("multiserver attach -r db1:web")
    await wait_until(lambda: ssh_clients_in(second) and ssh_clients_in(watcher), 15, "connected")
    first.line("echo one-$((40+2))")
    for term in (first, second, watcher):
        await term.wait_screen("one-42")
    watcher.line("echo ro-$((40+2))")
    second.line("echo two-$((40+2))")
    for term in (first, second, watcher):
        await term.wait_screen("two-42")
    first.line("echo three-$((40+2))")
    for term in (first, second, watcher):
        await term.wait_screen("three-42")
        assert "ro-42" not in term.screen_text()
    listed = run(ms_dirs, sshd, "ls")
    assert re.search(r"^db1:web\s+running\s+3 \(1 ro\)", listed.stdout, re.M), listed.stdout
    for term in (watcher, second, first):
        term.type(b"\x1c")
        await term.wait_screen("detached from web")
