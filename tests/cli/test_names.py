"""One name, one session, across every daemon: default names, names in
use, saved sessions that are not running, and names old data gave twice.
Real daemons, the real command (``_names`` decides; these drive it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from multiserver import DaemonPaths, open_client
from restore import ArrangementStore, RestorationRef, SessionLeaf
from restore.remote._listing import read_listing
from tests.cli.conftest import listed, ms, ms_many, run_ms, wait_session
from tests.conftest import (
    MsDirs,
    daemon_pids_for,
    is_alive,
    is_dead,
    stop_daemon_sync,
    wait_until,
)


def err(result: subprocess.CompletedProcess[bytes]) -> str:
    """The one error line, without the command's prefix."""
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result
    assert lines[0].startswith("multiserver: ")
    return lines[0].removeprefix("multiserver: ")


def save_not_running(ms_dirs: MsDirs, name: str, argv: list[str], cwd: Path) -> None:
    """A saved session whose daemon (number 7) is not running."""
    gone = str(DaemonPaths.for_number(7).socket)
    with ArrangementStore.open() as store:
        leaf = SessionLeaf(name, argv, str(cwd), ref=RestorationRef(gone, "gone", 1, 1))
        store.add_session(leaf, window="main")


async def new(ms_dirs: MsDirs, *args: str) -> str:
    return (await ms(ms_dirs, *args, "--", "sleep", "100")).stdout.decode().strip()


async def test_a_default_name_is_the_smallest_free_one_over_every_daemon(
    ms_dirs: MsDirs,
) -> None:
    assert await new(ms_dirs, "new", "-d", "-n", "2") == "2"
    assert await new(ms_dirs, "new", "-d") == "1"
    assert await new(ms_dirs, "--daemon", "2", "new", "-d") == "3"
    # A saved session owns its name while its daemon is gone.
    save_not_running(ms_dirs, "4", ["sh"], ms_dirs.root)
    assert await new(ms_dirs, "--daemon", "3", "new", "-d") == "5"
    assert await new(ms_dirs, "new", "-d") == "6"
    out = await ms(ms_dirs, "ls")
    # Every taken name is listed: "4" as saved, not running.
    lines = out.stdout.decode().splitlines()[1:]
    rows = {line.split()[0]: line for line in lines if not line.startswith(" ")}
    assert sorted(rows) == ["1", "2", "3", "4", "5", "6"]
    # A short state in the table, why under it (issue 36: a long one wrapped every row).
    assert " not running " in rows["4"]
    assert "  4: saved, not running: daemon 7 is not running; restore starts it again" in lines


async def test_new_sessions_at_once_get_names_of_their_own(ms_dirs: MsDirs) -> None:
    """Two at a time pick the same default; the daemon refuses the second
    (EEXIST), which takes the next free name."""
    runs = await ms_many(ms_dirs, *[["new", "-d", "--", "sleep", "100"]] * 6)
    names = sorted(r.stdout.decode().strip() for r in runs)
    assert names == ["1", "2", "3", "4", "5", "6"]
    assert sorted(await listed(ms_dirs)) == names


async def test_a_name_in_use_anywhere_is_refused_with_where_it_is(ms_dirs: MsDirs) -> None:
    await ms_many(
        ms_dirs,
        ["--daemon", "2", "new", "-d", "-n", "web", "--", "sleep", "100"],
        ["new", "-d", "-n", "done", "--", "sh", "-c", "kill -HUP $$"],
    )
    save_not_running(ms_dirs, "old", ["sh"], ms_dirs.root)
    await wait_session(ms_dirs, "done", lambda s: s and s.state == "exited", "exited")
    web, done, old = await ms_many(
        ms_dirs,
        ["--daemon", "3", "new", "-d", "-n", "web", "--", "true"],
        ["--daemon", "2", "new", "-d", "-n", "done", "--", "true"],
        ["new", "-d", "-n", "old", "--", "true"],
        check=False,
    )
    assert err(web) == (
        "a session named 'web' exists already (on daemon 2, running);"
        " choose another name, or attach to it"
    )
    assert err(done) == (
        "a session named 'done' exists already (on daemon 1, killed by SIGHUP);"
        " choose another name, or attach to it"
    )
    assert err(old) == (
        "a session named 'old' is saved, not running: daemon 7 is not running;"
        " `multiserver restore` brings it back, `multiserver kill old` forgets it;"
        " or choose another name"
    )
    assert sorted(await listed(ms_dirs)) == ["done"]  # daemon 1's: nothing started


async def test_a_name_on_two_daemons_is_refused_until_one_is_chosen(ms_dirs: MsDirs) -> None:
    """Daemons 1 and 2 both have a "web", saved on neither (started by a
    client that does not save). attach, peek and kill refuse, name both
    and say how to choose; `--daemon N` chooses."""
    pids = []
    for n, said in ((1, "one"), (2, "two")):
        async with open_client(DaemonPaths.for_number(n), start=True) as client:
            launched = await client.launch(
                ["sh", "-c", f"echo {said}; sleep 100"],
                env=dict(os.environ),
                name="web",
                hold=False,
            )
        pids.append(launched.child.pid)
    one, two = pids
    peek, kill = await ms_many(ms_dirs, ["peek", "web"], ["kill", "web"], check=False)
    candidates = "on daemon 1 (running), daemon 2 (running); choose one with --daemon N"
    assert err(peek) == (
        f"several sessions are named 'web': {candidates}, e.g. multiserver --daemon 2 peek web"
    )
    assert err(kill) == (
        f"several sessions are named 'web': {candidates}, e.g. multiserver --daemon 2 kill web"
    )
    assert is_alive(one) and is_alive(two)  # nothing ended without a word

    await wait_until(
        lambda: run_ms(ms_dirs, "--daemon", "2", "peek", "web").stdout == b"two\r\n",
        5.0,
        "daemon 2's web to have said two",
    )
    killed = await ms(ms_dirs, "--daemon", "2", "kill", "web")
    assert killed.stderr == b"web: killed by SIGHUP\n"
    await wait_until(lambda: is_dead(two), 5.0, "daemon 2's web gone")
    assert is_alive(one)
    assert (await ms(ms_dirs, "peek", "web")).stdout == b"one\r\n"


async def test_a_saved_name_is_one_session_the_other_child_is_its_late_original(
    ms_dirs: MsDirs,
) -> None:
    """A saved "web" on daemon 1, and a child daemon 2 also calls "web":
    the name is the saved session's; the other is "web-late", listed and
    addressed so, and nothing is refused or ended."""
    await ms(ms_dirs, "new", "-d", "-n", "web", "--", "sh", "-c", "echo one; sleep 100")
    async with open_client(DaemonPaths.for_number(2), start=True) as client:
        launched = await client.launch(
            ["sh", "-c", "echo two; sleep 100"], env=dict(os.environ), name="web", hold=False
        )
    two = launched.child.pid
    listing = (await ms(ms_dirs, "ls", "--json")).stdout
    rows = {r["name"]: r for r in json.loads(listing)}
    assert sorted(rows) == ["web", "web-late"]
    assert rows["web-late"]["pid"] == two and rows["web-late"]["late_of"] == "web"
    # As the one schema of what a host answers has it, read back.
    late = {r.name: r for r in read_listing(listing)}["web-late"]
    assert (late.pid, late.late_of, late.saved) == (two, "web", False)
    await wait_until(
        lambda: run_ms(ms_dirs, "peek", "web-late").stdout == b"two\r\n", 5.0, "web-late's output"
    )
    assert (await ms(ms_dirs, "peek", "web")).stdout == b"one\r\n"
    killed = await ms(ms_dirs, "kill", "web-late")
    assert killed.stderr == b"web-late: killed by SIGHUP\n"
    await wait_until(lambda: is_dead(two), 5.0, "web-late gone")
    assert [r["name"] for r in json.loads((await ms(ms_dirs, "ls", "--json")).stdout)] == ["web"]


async def test_a_saved_session_not_running_is_forgotten_by_kill(ms_dirs: MsDirs) -> None:
    save_not_running(ms_dirs, "old", ["sh"], ms_dirs.root)
    peek = await ms(ms_dirs, "peek", "old", check=False)
    assert err(peek) == (
        "session 'old' is saved, not running: daemon 7 is not running;"
        " `multiserver restore` brings it back, `multiserver kill old` forgets it"
    )
    signalled = await ms(ms_dirs, "kill", "-s", "TERM", "old", check=False)
    assert err(signalled).startswith("session 'old' is saved, not running")
    killed = await ms(ms_dirs, "kill", "old")
    assert killed.stderr == b"old: forgot the saved session (daemon 7 is not running)\n"
    with ArrangementStore.open() as store:
        assert store.load().find("old") is None and store.pending_closes() == []
    assert await new(ms_dirs, "new", "-d", "-n", "old") == "old"  # the name is free


async def test_new_A_starts_a_saved_session_again_under_its_name(ms_dirs: MsDirs) -> None:
    work = ms_dirs.root / "work"
    work.mkdir()
    save_not_running(ms_dirs, "main", ["sh", "-c", "echo again; sleep 100"], work)
    started = await ms(ms_dirs, "new", "-A", "-d", "-n", "main")
    assert started.stdout == b"main\n"
    child = (await listed(ms_dirs))["main"]
    assert child.argv == ["sh", "-c", "echo again; sleep 100"] and child.cwd == str(work)
    with ArrangementStore.open() as store:
        leaf = store.load().find("main")
    assert leaf is not None and leaf.ref is not None
    assert (leaf.ref.socket, leaf.ref.child_id) == (str(ms_dirs.paths.socket), child.id)
    # Now it runs: -A -d on it again needs a terminal to attach.
    again = await ms(ms_dirs, "new", "-A", "-d", "-n", "main", check=False)
    assert "attach needs a terminal" in err(again)


async def test_a_shared_state_dir_with_another_runtime_dir_sees_its_daemons(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two logins sharing the state dir, not the runtime dir (one with
    $XDG_RUNTIME_DIR, an ssh login without): each lists the other's saved
    sessions as running, their daemon by its whole path (both are daemon
    1), never as "not running"; restore goes back to them."""
    await new(ms_dirs, "new", "-d", "-n", "here")
    other = ms_dirs.root / "run2"
    other.mkdir(mode=0o700)
    monkeypatch.setenv("MULTISERVER_RUNTIME_DIR", str(other))
    try:
        rows = {r["name"]: r for r in json.loads((await ms(ms_dirs, "ls", "--json")).stdout)}
        assert rows["here"]["state"] == "running"
        await new(ms_dirs, "new", "-d", "-n", "there")
        table = (await ms(ms_dirs, "ls")).stdout.decode().splitlines()
        [here] = [line for line in table if line.startswith("here ")]
        assert f" {ms_dirs.paths.socket} " in here and "running" in here
        [there] = [line for line in table if line.startswith("there ")]
        assert there.split()[1] == "1"
        report = json.loads((await ms(ms_dirs, "restore", "--json")).stdout)
        outcomes = {s["name"]: (s["outcome"], s["daemon"]) for s in report["sessions"]}
        assert outcomes == {
            "here": ("attached", str(ms_dirs.paths.socket)),
            "there": ("attached", str(other / ms_dirs.paths.socket.name)),
        }
    finally:
        for pid in daemon_pids_for(other / ms_dirs.paths.socket.name):
            stop_daemon_sync(pid)
