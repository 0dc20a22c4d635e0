"""Scrollback that survives a reboot, and ended sessions kept until a person
has seen them: the real command, real daemons, pyte-rendered terminals.

A reboot is simulated as in test_daemon_death and test_restore_real: every
daemon, every child and every client (attach clients, the saver) is
SIGKILLed by pid; nothing gets to say goodbye. What a restore brings back
can then only come from the store: from the attach clients for what they
showed while attached, from ``multiserver save --scrollback`` for the rest.
When an attach client saves (``_scrollback.ScreenSaver``) is checked alone.
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
from multiserver._buffer import OutputBuffer
from multiserver_cli import _saver
from multiserver_cli._scrollback import ScreenSaver, screen_saver
from multiserver_cli.attach._proxy import Screen
from restore import ArrangementStore, RestorationRef, SessionLeaf
from restore._plan import RELAUNCH_MARKER
from tests.cli.conftest import (
    INNER_PROMPT,
    INNER_SH,
    MULTISERVER,
    SCREEN_TIMEOUT,
    Terminal,
    ms,
    person_env,
    sessions,
    wait_session,
)
from tests.conftest import (
    POLL_INTERVAL,
    MsDirs,
    daemon_pids_for,
    is_alive,
    is_dead,
    kill_group_and_pid,
    saver_pid,
    wait_until,
)

DETACH = "\x1c"  # Ctrl-\


def saved_leaf(name: str) -> SessionLeaf | None:
    with ArrangementStore.open() as store:
        return store.load().find(name)


async def wait_saved(name: str, needle: bytes, timeout: float = SCREEN_TIMEOUT) -> SessionLeaf:
    """Poll the store until the saved scrollback of ``name`` holds ``needle``."""
    leaf = None
    with trio.move_on_after(timeout):
        while True:
            leaf = saved_leaf(name)
            if leaf is not None and needle in (leaf.scrollback or b""):
                return leaf
            await trio.sleep(POLL_INTERVAL * 20)
    raise AssertionError(f"{name}: {needle!r} not saved within {timeout} s: {leaf}")


def _has_scrollback(name: str) -> bool:
    leaf = saved_leaf(name)
    return leaf is not None and leaf.scrollback is not None


def _wal_size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def start_saver(ms_dirs: MsDirs, every: float = 1.0) -> subprocess.Popen[bytes]:
    """``multiserver save --scrollback --every S``, as the login service runs it."""
    return subprocess.Popen(
        [MULTISERVER, "save", "--scrollback", "--every", str(every)],
        env=person_env(ms_dirs),
        cwd=ms_dirs.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)  # by its pid: not reaped yet
    proc.wait(timeout=10)


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
    saver = start_saver(ms_dirs)
    windows: dict[str, Terminal] = {}
    try:
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
        # Saved within a few seconds, by the attach clients and the saver.
        for name, line in said.items():
            await wait_saved(name, line.encode())
        assert all(s["held"] for n, s in (await sessions(ms_dirs)).items() if n.startswith("held"))
        await reboot(ms_dirs, *windows.values())
    finally:
        stop_process(saver)

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


async def test_without_the_service_new_starts_one_saver_and_a_reboot_keeps_what_nobody_saw(
    ms_dirs: MsDirs, open_terminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's flow with no service installed: ``new -d`` a session,
    never attach it, reboot, ``restore``: its first attach shows what it
    printed, then the marker. ``new`` started the saver that kept it (one,
    however many sessions), and that saver stops by itself once no saved
    session runs."""
    monkeypatch.delenv("MULTISERVER_SAVER")
    await ms(ms_dirs, "new", "-d", "-n", "build", "--", "sh", "-c", "echo built $$; exec sleep 600")
    await wait_until(lambda: saver_pid(ms_dirs.runtime) is not None, 30, "a saver")
    saver = saver_pid(ms_dirs.runtime)
    assert saver is not None
    line = f"built {(await sessions(ms_dirs))['build']['pid']}"
    await wait_saved("build", line.encode(), timeout=30)
    await ms(ms_dirs, "new", "-d", "-n", "other", "--", "sleep", "600")
    assert saver_pid(ms_dirs.runtime) == saver and is_alive(saver)
    os.kill(saver, signal.SIGKILL)  # the reboot takes the saver too
    await reboot(ms_dirs)
    report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
    assert {s["name"]: s["outcome"] for s in report["sessions"]} == {
        "build": "relaunched",
        "other": "relaunched",
    }
    # The restore started a saver again for the relaunched sessions.
    await wait_until(lambda: saver_pid(ms_dirs.runtime) is not None, 30, "a saver again")
    again = saver_pid(ms_dirs.runtime)
    assert again is not None and again != saver
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
    # No saved session runs any more: the saver stops by itself.
    await ms(ms_dirs, "stop", "--force")
    await wait_until(lambda: is_dead(again), 30, "the saver to stop once idle")


async def test_detach_saves_the_screen_and_attached_output_is_saved_while_it_flows(
    ms_dirs: MsDirs, open_terminal
) -> None:
    t = open_terminal()
    await t.wait_prompt()
    t.line(f"multiserver new -n w -- {INNER_SH}")
    await t.wait_prompt(INNER_PROMPT)
    # While attached: saved within a few seconds of the output, by the client.
    t.line("echo first-$((40+2))")
    await t.wait_screen("first-42")
    leaf = await wait_saved("w", b"first-42")
    assert leaf.ref is not None and leaf.exit_code is None
    # At detach: at once, before the command says it detached.
    t.line("echo second-$((40+2))")
    await t.wait_screen("second-42")
    t.type(DETACH)
    await t.wait_screen("[detached from w]")
    leaf = saved_leaf("w")
    assert leaf is not None and b"second-42" in (leaf.scrollback or b"")


async def test_save_scrollback_keeps_unheld_sessions_in_one_go_and_leaves_held_ones(
    ms_dirs: MsDirs, open_terminal
) -> None:
    for name in ("a", "b"):
        await ms(
            ms_dirs, "new", "-d", "-n", name, "--", "sh", "-c", f"echo {name}-out; exec sleep 100"
        )
    await wait_session(ms_dirs, "b", lambda c: c is not None and c.buffered_bytes > 0, "written")
    await wait_session(ms_dirs, "a", lambda c: c is not None and c.buffered_bytes > 0, "written")
    t = open_terminal()
    await t.wait_prompt()
    t.line("multiserver attach b")
    await t.wait_screen("b-out")
    await wait_session(ms_dirs, "b", lambda c: c is not None and c.held, "held")

    # b is its attach client's to save, as it shows it: the saver leaves it.
    result = await ms(ms_dirs, "save", "--scrollback")
    assert re.fullmatch(rb"saved 2 sessions \(\d updated, scrollback of 1 kept\)\n", result.stderr)
    a = saved_leaf("a")
    assert a is not None and a.scrollback == b"a-out\r\n"
    # Nothing changed since: nothing more is written.
    with ArrangementStore.open() as store:
        before = store.path.stat().st_mtime_ns, _wal_size(store.path)
    result = await ms(ms_dirs, "save", "--scrollback")
    with ArrangementStore.open() as store:
        assert (store.path.stat().st_mtime_ns, _wal_size(store.path)) == before


async def test_one_saver_at_a_time_and_a_last_save_when_told_to_stop(ms_dirs: MsDirs) -> None:
    await ms(
        ms_dirs, "new", "-d", "-n", "s", "--", "sh", "-c", "read x; echo got-$x; exec sleep 100"
    )
    first = start_saver(ms_dirs, every=600)
    try:
        await wait_until(lambda: _has_scrollback("s"), 15, "the saver's first pass")
        second = start_saver(ms_dirs)
        _, err = second.communicate(timeout=30)
        assert second.returncode == 0 and b"a saver runs already" in err
        # Output while the saver sleeps its 600 s: saved by the last pass at SIGTERM.
        (sid,) = [s["id"] for s in (await sessions(ms_dirs)).values()]
        async with open_client(ms_dirs.paths) as client:
            [claimed] = await client.claim([sid])
            assert claimed.master is not None
            os.write(claimed.master, b"late\n")
            os.close(claimed.master)
            await client.release([sid])
        await wait_session(ms_dirs, "s", lambda c: c is not None and not c.held, "released")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        await wait_saved("s", b"got-late", timeout=1)
    finally:
        stop_process(first)


async def test_the_saver_leaves_alone_a_daemon_no_saved_session_lives_on(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saved session of an earlier run of daemon 1 (before a reboot, say)
    makes the first pass ask the daemon now there; finding nothing of
    ours, the saver does not ask it again until the arrangement changes: a
    saver that runs for ever must not keep an idle daemon from exiting."""
    await ms(ms_dirs, "daemon")
    with ArrangementStore.open() as store:
        stale = RestorationRef(str(ms_dirs.paths.socket), "an-earlier-run", 1, 1)
        store.add_session(SessionLeaf("old", ["sh"], "/", ref=stale))
    asked: list[str] = []
    ask = _saver._ask
    monkeypatch.setattr(
        _saver, "_ask", lambda socket, *args: (asked.append(socket), ask(socket, *args))[1]
    )
    saver = _saver.Saver(scrollback=True)
    with ArrangementStore.open() as store:
        for _ in range(3):
            report = saver.run_pass(store)
            assert (report.total, report.live, report.outputs, report.problems) == (1, 0, 0, [])
        assert asked == [str(ms_dirs.paths.socket)]
    await ms(ms_dirs, "new", "-d", "-n", "fresh", "--", "sleep", "100")
    with ArrangementStore.open() as store:
        report = saver.run_pass(store)
    assert (report.total, report.live, report.outputs) == (2, 1, 1)
    assert asked == [str(ms_dirs.paths.socket)] * 2


async def test_a_period_that_is_no_period_is_refused_in_one_line(ms_dirs: MsDirs) -> None:
    for every in ("0.5", "nan", "inf", "-5"):
        result = await ms(ms_dirs, "save", "--scrollback", "--every", every, check=False)
        assert (result.returncode, result.stderr) == (
            2,
            b"multiserver: --every must be from 1 to 86400 seconds\n",
        ), every


async def test_an_ended_session_whose_daemon_is_gone_is_shown_once_from_the_store(
    ms_dirs: MsDirs, open_terminal
) -> None:
    """A program that ended while nobody watched, then a reboot: restore says
    it ended and keeps it; ``peek`` prints its saved output; ``attach`` shows
    it with the exit code, then forgets it: the next restore does not know it."""
    script = "echo ender-said-$((6*7)); exit 4"
    await ms(ms_dirs, "new", "-d", "-n", "ender", "--", "sh", "-c", script)
    await wait_session(ms_dirs, "ender", lambda c: c is not None and c.state == "exited", "ended")
    await ms(ms_dirs, "save", "--scrollback")
    leaf = saved_leaf("ender")
    assert leaf is not None and leaf.exit_code == 4, leaf
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
    assert re.search(r"^ender +exited with code 4 \(saved: its daemon is gone\) ", table, re.M)
    peeked = await ms(ms_dirs, "peek", "ender")
    assert peeked.stdout == b"ender-said-42\r\n"
    for n, tail in (("0", b""), ("3", b"2\r\n"), ("999", b"ender-said-42\r\n")):
        assert (await ms(ms_dirs, "peek", "--bytes", n, "ender")).stdout == tail

    t = open_terminal()
    await t.wait_prompt()
    t.line("multiserver attach ender; echo status=$?")
    screen = await t.wait_screen("status=4")
    assert screen.index("ender-said-42") < screen.index("[ender exited with code 4]"), screen
    assert saved_leaf("ender") is None
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


def test_the_screen_is_saved_only_when_due_and_only_if_output_flowed() -> None:
    screen = Screen(-1, OutputBuffer(99))
    saved: list[tuple[bytes, bool]] = []
    saver = ScreenSaver(screen, lambda data, last: saved.append((data, last)), every=0.0)
    saver.tick()
    assert saved == []  # nothing shown yet
    screen.record(b"replay\r\n")
    saver.tick()
    assert saved == [(b"replay\r\n", False)]
    saver.tick()
    assert len(saved) == 1  # nothing new since
    screen.record(b"more")
    saver.tick()
    assert saved[-1] == (b"replay\r\nmore", False)

    slow = ScreenSaver(screen, lambda data, last: saved.append((data, last)), every=60.0)
    screen.record(b"!")
    slow.tick()
    assert len(saved) == 2 and 59 < slow.wait() <= 60


def test_a_screen_save_while_the_code_is_being_replaced_does_not_end_the_attach(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pip install -U`` replaces the store's modules file by file; an
    attached client that loads them then (its first save) gets an
    ImportError. While attached that save is skipped, and the next one
    loads them; at detach it is said in one line."""
    calls: list[str] = []

    def store_mid_upgrade() -> ArrangementStore | None:
        calls.append("open")
        if len(calls) == 1:
            raise ImportError("cannot import name 'ArrangementStore' (a half-installed file)")
        return ArrangementStore.open(tmp_path / "state.db")

    save = screen_saver(store_mid_upgrade, Path("/run/x.socket"), "ab" * 16, 3)
    save(b"first\r\n", False)  # skipped, silently
    save(b"second\r\n", False)  # the modules load this time
    assert calls == ["open", "open"]
    assert capsys.readouterr().err == ""
    calls.clear()
    save(b"last\r\n", True)  # at detach: one line
    err = capsys.readouterr().err
    assert "could not save what the session showed: cannot import" in err
    assert err.count("\n") == 1
