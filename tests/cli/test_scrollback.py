"""Scrollback that survives a reboot, and ended sessions kept until a person
has seen them: the real command, real daemons, pyte-rendered terminals.

A reboot is simulated as in test_daemon_death and test_restore_real: every
daemon, every child and every attach client is SIGKILLed by pid; nothing
gets to say goodbye. What a restore brings back can then only come from
what was on disk: each session's output file, written by its daemon while
nobody held it and by the attach client while it did (``multiserver``'s
``DurableOutput``), and the saved arrangement. When an attach client writes
(``_scrollback.ScreenKeeper``) is checked alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from multiserver import open_client
from multiserver.internal import DurableOutput, output_path, read_output, read_state, state_dir
from multiserver_cli._scrollback import ScreenKeeper
from restore import ArrangementStore, SessionLeaf
from restore._plan import RELAUNCH_MARKER
from tests.cli.conftest import (
    INNER_PROMPT,
    INNER_SH,
    MULTISERVER,
    SCREEN_TIMEOUT,
    Terminal,
    ms,
    ours,
    person_env,
    sessions,
    wait_session,
)
from tests.conftest import (
    POLL_INTERVAL,
    MsDirs,
    daemon_pids_for,
    is_dead,
    kill_group_and_pid,
    wait_until,
)

DETACH = "\x1c"  # Ctrl-\


def saved_leaf(name: str) -> SessionLeaf | None:
    with ArrangementStore.open() as store:
        return store.load().find(name)


def kept_path(name: str) -> Path | None:
    """The output file of the saved session ``name``'s child."""
    leaf = saved_leaf(name)
    if leaf is None or leaf.ref is None:
        return None
    return output_path(state_dir(), leaf.ref.instance_id, leaf.ref.child_id)


def kept(name: str) -> bytes:
    path = kept_path(name)
    return b"" if path is None else (read_output(path, 1 << 20) or b"")


async def wait_saved(name: str, needle: bytes, timeout: float = SCREEN_TIMEOUT) -> bytes:
    """Until what was kept on disk of ``name`` (its output file) holds ``needle``."""
    with trio.move_on_after(timeout):
        while needle not in kept(name):
            await trio.sleep(POLL_INTERVAL * 20)
        return kept(name)
    raise AssertionError(f"{name}: {needle!r} not kept within {timeout} s: {kept(name)[-300:]!r}")


async def reboot(ms_dirs: MsDirs, *terminals: Terminal) -> None:
    """SIGKILL, by pid, the daemon, every child it has, and the multiserver
    clients in the windows (their windows stay open, at their shells).
    The clients and the daemon go first: were a client alive when its
    program died, it would see an exit and forget the session (a durable
    close, as it should for a real exit), which no reboot lets it do."""
    [daemon] = daemon_pids_for(ms_dirs.paths.socket)
    children = [s["pid"] for s in (await sessions(ms_dirs)).values()]
    clients = [pid for t in terminals for pid in t.client_pids()]
    for pid in [*clients, daemon]:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        kill_group_and_pid(pid)
    gone = [daemon, *children, *clients]
    await wait_until(lambda: all(is_dead(p) for p in gone), 10, "the reboot")


def before_marker(screen: str, needle: str) -> bool:
    """``needle`` is on screen, and the relaunch marker after it."""
    at = screen.find(needle)
    return at >= 0 and screen.find(RELAUNCH_MARKER, at) > at


async def test_after_a_reboot_each_session_shows_its_last_output_then_the_marker(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """Two sessions attached in windows at the moment of the reboot, two
    detached; each printed a line no other run prints (its shell's pid).
    Killed without warning, restored: each session is back in its cwd, and
    its first attach shows that line, then the marker."""
    cwds = {name: ms_dirs.root / f"cwd-{name}" for name in ("held1", "held2", "free1", "free2")}
    for d in cwds.values():
        d.mkdir()
    windows: dict[str, Terminal] = {}
    for name in ("free1", "free2"):
        script = f"echo {name} said $$; exec sleep 1000"
        await ms(
            ms_dirs, "new", "-d", "-n", name, "--cwd", str(cwds[name]), "--", "sh", "-c", script
        )
    for name in ("held1", "held2"):
        t = windows[name] = open_terminal(name=name)
        await t.wait_prompt()
        t.line(f"cd {cwds[name]} && multiserver new -n {name} -- {INNER_SH}")
        await t.wait_prompt(INNER_PROMPT)
        t.line(f"echo {name} said $$")
        await t.wait_screen(re.compile(rf"^{name} said \d+$", re.M))
    said = {name: f"{name} said {s['pid']}" for name, s in (await sessions(ms_dirs)).items()}
    assert sorted(said) == ["free1", "free2", "held1", "held2"]
    # Kept within a few seconds, by the attach clients and the daemon.
    for name, line in said.items():
        await wait_saved(name, line.encode())
    assert all(s["held"] for n, s in (await sessions(ms_dirs)).items() if n.startswith("held"))
    await reboot(ms_dirs, *windows.values())

    report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
    assert {s["name"]: s["outcome"] for s in report["sessions"]} == dict.fromkeys(
        said, "relaunched"
    )
    after = await sessions(ms_dirs)
    for name, cwd in cwds.items():
        assert os.path.realpath(os.readlink(f"/proc/{after[name]['pid']}/cwd")) == str(
            cwd.resolve()
        )
    for name, line in said.items():
        t = open_terminal(name=f"{name} again")
        await t.wait_prompt()
        t.line(f"multiserver attach {name}")
        screen = await t.wait_screen(lambda s, line=line: before_marker(s, line))
        # What it showed before the reboot, once; then the marker and why.
        assert screen.count(line) == 1, screen
        assert "its daemon" in screen[screen.index(RELAUNCH_MARKER) :]
        t.type(DETACH)
        await t.wait_screen(f"[detached from {name}]")


async def test_without_the_service_a_reboot_keeps_what_nobody_saw_and_nothing_else_runs(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """The README's flow with no service installed: ``new -d`` a session,
    never attach it, reboot, ``restore``: its first attach shows what it
    printed, then the marker. Nothing but the daemon ran for it (issue 35:
    a saver used to, and outlived the last session)."""
    await ms(ms_dirs, "new", "-d", "-n", "build", "--", "sh", "-c", "echo built $$; exec sleep 600")
    line = f"built {(await sessions(ms_dirs))['build']['pid']}"
    await wait_saved("build", line.encode())
    await ms(ms_dirs, "new", "-d", "-n", "other", "--", "sleep", "600")
    assert ours(ms_dirs) == daemon_pids_for(ms_dirs.paths.socket)
    await reboot(ms_dirs)
    report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
    assert {s["name"]: s["outcome"] for s in report["sessions"]} == {
        "build": "relaunched",
        "other": "relaunched",
    }
    assert ours(ms_dirs) == daemon_pids_for(ms_dirs.paths.socket)
    # peek shows what attach replays: the saved output, then the marker.
    peeked = (await ms(ms_dirs, "peek", "build")).stdout.decode(errors="replace")
    assert before_marker(peeked, line), peeked
    tail = (await ms(ms_dirs, "peek", "--bytes", "200", "build")).stdout
    assert 0 < len(tail) <= 200 and tail in peeked.encode()
    t = open_terminal(name="after the reboot")
    await t.wait_prompt()
    t.line("multiserver attach build")
    screen = await t.wait_screen(lambda s: before_marker(s, line))
    assert screen.count(line) == 1, screen
    t.type(DETACH)
    await t.wait_screen("[detached from build]")
    # Taken by that attach, and in the screen it handed back: once, not twice.
    peeked = (await ms(ms_dirs, "peek", "build")).stdout.decode(errors="replace")
    assert peeked.count(line) == 1 and peeked.count(RELAUNCH_MARKER) == 1, peeked
    # Kept on disk too, with the notice: a second reboot keeps it again.
    await wait_saved("build", RELAUNCH_MARKER.encode())
    assert kept("build").count(line.encode()) == 1


async def test_attached_output_is_kept_while_it_flows_and_at_detach(
    ms_dirs: MsDirs, open_terminal
) -> None:
    t = open_terminal()
    await t.wait_prompt()
    t.line(f"multiserver new -n w -- {INNER_SH}")
    await t.wait_prompt(INNER_PROMPT)
    # While attached: kept within a few seconds of the output, by the client.
    t.line("echo first-$((40+2))")
    await t.wait_screen("first-42")
    await wait_saved("w", b"first-42")
    # At detach: at once, before the command says it detached.
    t.line("cd / && echo second-$((40+2))")
    await t.wait_screen("second-42")
    t.type(DETACH)
    await t.wait_screen("[detached from w]")
    assert b"second-42" in kept("w")
    path = kept_path("w")
    assert path is not None
    state = read_state(path)
    assert state is not None and state["cwd"] == "/", state
    # Given back, the daemon writes what comes next.
    (wid,) = [s["id"] for s in (await sessions(ms_dirs)).values()]
    async with open_client(ms_dirs.paths) as client:
        [claimed] = await client.claim([wid])
        assert claimed.master is not None
        os.write(claimed.master, b"echo third-$((40+2))\n")
        os.close(claimed.master)
        await client.release([wid])
    await wait_saved("w", b"third-42")
    assert kept("w").count(b"second-42") == 1  # once: the replay of it is not kept again


async def test_an_older_service_s_saver_is_told_it_is_not_needed_and_exits_0(
    ms_dirs: MsDirs,
) -> None:
    """What an older login service runs, ``save --scrollback --every 5``: one
    line, exit 0 (a unit that restarts on failure does not loop)."""
    for words in (["--scrollback", "--every", "5"], ["--scrollback"], ["--every", "0.5"]):
        result = await ms(ms_dirs, "save", *words, check=False)
        assert result.returncode == 0, words
        assert result.stderr.count(b"\n") == 1 and b"kept by their daemon" in result.stderr


async def test_save_refreshes_the_cwd_and_title_of_live_sessions(ms_dirs: MsDirs) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "a", "--", "sh", "-c", "cd /var && exec sleep 100")
    await wait_session(ms_dirs, "a", lambda c: c is not None, "running")
    await wait_until(lambda: os.readlink(f"/proc/{_pid(ms_dirs, 'a')}/cwd") == "/var", 10, "cd")
    result = await ms(ms_dirs, "save")
    assert result.stderr == b"saved 1 session (1 updated)\n"
    leaf = saved_leaf("a")
    assert leaf is not None and (leaf.cwd, leaf.title) == ("/var", "sleep 100")


def _pid(ms_dirs: MsDirs, name: str) -> int:
    return int(
        json.loads(
            subprocess.run(
                [MULTISERVER, "ls", "--json"],
                env=person_env(ms_dirs),
                capture_output=True,
                check=True,
            ).stdout
        )[0]["pid"]
    )


async def test_an_ended_session_whose_daemon_is_gone_is_shown_once_from_the_store(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """A program that ended while nobody watched, then a reboot: restore says
    it ended and keeps it; ``peek`` prints its saved output; ``attach`` shows
    it with the exit code, then forgets it: the next restore does not know it."""
    script = "echo ender-said-$((6*7)); exit 4"
    await ms(ms_dirs, "new", "-d", "-n", "ender", "--", "sh", "-c", script)
    await wait_session(ms_dirs, "ender", lambda c: c is not None and c.state == "exited", "ended")
    await wait_saved("ender", b"ender-said-42")
    path = kept_path("ender")
    assert path is not None and (read_state(path) or {}).get("exit_code") == 4
    [daemon] = daemon_pids_for(ms_dirs.paths.socket)
    os.kill(daemon, signal.SIGKILL)
    await wait_until(lambda: is_dead(daemon), 10, "the daemon's death")

    report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
    [ender] = report["sessions"]
    assert (ender["name"], ender["outcome"], ender["exit_code"]) == ("ender", "ended", 4), ender
    # Listed as a live ended session is, with what it left to see.
    listed = await sessions(ms_dirs)
    assert list(listed) == ["ender"]
    assert (listed["ender"]["state"], listed["ender"]["exit_code"]) == ("exited", 4)
    assert (listed["ender"]["pid"], listed["ender"]["saved"]) == (None, True)
    assert listed["ender"]["waiting_bytes"] == len(b"ender-said-42\r\n")
    table = (await ms(ms_dirs, "ls")).stdout.decode()
    assert re.search(r"^ender +exited with code 4 ", table, re.M), table
    assert "  ender: exited with code 4 (saved: its daemon is gone)" in table.splitlines()
    peeked = await ms(ms_dirs, "peek", "ender")
    assert peeked.stdout == b"ender-said-42\r\n"
    for n, tail in (("0", b""), ("3", b"2\r\n"), ("999", b"ender-said-42\r\n")):
        assert (await ms(ms_dirs, "peek", "--bytes", n, "ender")).stdout == tail

    t = open_terminal()
    await t.wait_prompt()
    t.line("multiserver attach ender; echo status=$?")
    screen = await t.wait_screen("status=4")
    assert screen.index("ender-said-42") < screen.index("[ender exited with code 4]"), screen
    assert saved_leaf("ender") is None and not path.exists()  # seen: forgotten, files too
    assert await sessions(ms_dirs) == {}
    report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
    assert report["sessions"] == []


async def test_restore_keeps_an_ended_session_listed_until_attached_or_killed(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """Two programs that ended while nobody watched, their daemon alive:
    restore reports both and keeps both (twice over); ls lists them with
    their codes; attach shows one's output and forgets it; kill forgets the
    other; a restore after that has nothing left to report."""
    for name, code in (("ender1", 4), ("ender2", 5)):
        script = f"echo {name}-said-$((6*7)); exit {code}"
        await ms(ms_dirs, "new", "-d", "-n", name, "--", "sh", "-c", script)
    for name in ("ender1", "ender2"):
        await wait_session(ms_dirs, name, lambda c: c is not None and c.state == "exited", "ended")
    for _ in range(2):
        report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
        outcomes = {s["name"]: (s["outcome"], s["exit_code"]) for s in report["sessions"]}
        assert outcomes == {"ender1": ("ended", 4), "ender2": ("ended", 5)}, report
        listed = {n: (s["state"], s["exit_code"]) for n, s in (await sessions(ms_dirs)).items()}
        assert listed == {"ender1": ("exited", 4), "ender2": ("exited", 5)}

    t = open_terminal()
    await t.wait_prompt()
    t.line("multiserver attach ender1; echo status=$?")
    screen = await t.wait_screen("status=4")
    assert screen.index("ender1-said-42") < screen.index("[ender1 exited with code 4]"), screen
    assert list(await sessions(ms_dirs)) == ["ender2"]
    assert saved_leaf("ender1") is None

    await ms(ms_dirs, "kill", "ender2")
    assert await sessions(ms_dirs) == {}
    assert saved_leaf("ender2") is None
    report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
    assert report["sessions"] == []


def test_the_screen_is_written_only_when_due_and_only_if_output_flowed(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    master, slave = os.openpty()
    try:
        out = DurableOutput(tmp_path / "o" / "1.out", 4096)
        keeper = ScreenKeeper(out, master, every=0.0)
        keeper.tick()
        assert out.written == 0  # nothing shown yet
        keeper.live(b"live\r\n")
        keeper.tick()
        assert out.path.read_bytes() == b"live\r\n"
        written = out.written
        keeper.tick()
        assert out.written == written  # nothing new since
        keeper.shown_notice(b"notice ")
        keeper.live(b"more")
        keeper.last()
        assert out.path.read_bytes() == b"live\r\nnotice more"
        slow = ScreenKeeper(out, master, every=60.0)
        slow.live(b"!")
        slow.tick()
        assert out.path.read_bytes().endswith(b"more") and 59 < slow.wait() <= 60
    finally:
        os.close(master)
        os.close(slave)


def test_a_write_that_fails_while_attached_is_said_once_at_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While attached the terminal is the program's: a write that fails (a
    full disk, a dir gone) says nothing then; at the end, one line."""
    blocked = tmp_path / "o"
    blocked.write_text("a file where the dir should be")
    keeper = ScreenKeeper(DurableOutput(blocked / "1.out", 4096), -1, every=0.0)
    keeper.live(b"x")
    keeper.tick()
    assert capsys.readouterr().err == ""
    keeper.last()
    err = capsys.readouterr().err
    assert err.startswith("multiserver: could not keep what the session showed:")
    assert err.count("\n") == 1


async def test_ls_shows_where_a_program_is_and_restore_brings_it_back_there(
    ms_dirs: MsDirs,
) -> None:
    """Issue 36: after ``cd /var/log`` in a session, ``ls`` showed where it
    started. It shows its foreground process's cwd now, and a restore after
    a reboot starts it again where it last was (its daemon kept that on disk
    when its output came)."""
    starts = ms_dirs.root / "starts"
    script = f"pwd >> {starts} && cd /var/log && echo moved && exec sleep 300"
    await ms(
        ms_dirs, "new", "-d", "-n", "mover", "--cwd", str(ms_dirs.root), "--", "sh", "-c", script
    )
    await wait_saved("mover", b"moved")
    listed = await sessions(ms_dirs)
    assert listed["mover"]["cwd"] == "/var/log"
    table = (await ms(ms_dirs, "ls")).stdout.decode()
    assert re.search(r"^mover .* /var/log ", table, re.M), table
    path = kept_path("mover")
    assert path is not None
    await wait_until(lambda: (read_state(path) or {}).get("cwd") == "/var/log", 10, "kept")
    await reboot(ms_dirs)
    report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
    assert [(s["name"], s["outcome"]) for s in report["sessions"]] == [("mover", "relaunched")]
    # Where each run started: the first where it was made, the relaunch
    # where the first run was when its machine went down.
    await wait_until(lambda: len(starts.read_text().splitlines()) == 2, 10, "the relaunch")
    assert starts.read_text().splitlines() == [str(ms_dirs.root), "/var/log"]
