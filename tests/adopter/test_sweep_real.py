"""The sweep and ``multiserver restore`` / ``multiserver orphans`` against real
daemons: a killed one, a stopped one, sockets planted in the runtime dir and a
runtime dir others may write to.

Each test runs in ``ms_dirs`` (private runtime and state dirs) with a private
short-path fallback dir: ``multiserver.system._paths.fallback_dir`` is replaced in
this process and TMPDIR points into the test's dir for the commands it runs,
so no sweep here ever sees the machine's real sockets. Every process is
stopped by pid; a stopped one gets SIGCONT before anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import multiserver.client._client
from adopter import ORPHAN_WINDOW, MemorySink, SweepReport, late_notice, sweep
from multiserver import DaemonPaths, open_client
from multiserver.system._paths import lock_is_held
from restore import ATTACH_SHARE, ArrangementStore, SessionLeaf
from tests.conftest import (
    MsDirs,
    RunningDaemon,
    daemon_pids_for,
    is_alive,
    is_dead,
    stop_daemon_sync,
    wait_until,
)
from tests.timing import STOPPED_DAEMON_TIMEOUT, TIMER_SLACK, restore_command_bound

CLI = "import sys; from multiserver_cli.main import main; sys.exit(main())"
TIMEOUT = STOPPED_DAEMON_TIMEOUT  # restore's, waiting out the stopped daemon
# Bound on one command of the CLI: the restore's, with room to spare.
CLI_TIMEOUT = restore_command_bound(TIMEOUT) + 10
NOBODY = 65534


# --- helpers -------------------------------------------------------------------------


@pytest.fixture
def fallback(ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private fallback dir, here and in the commands the test runs."""
    tmp = ms_dirs.root / "tmp"
    tmp.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(tmp))
    path = tmp / f"ms-{os.getuid()}"
    monkeypatch.setattr("multiserver.system._paths.fallback_dir", lambda: path)
    return path


async def cli(*args: str, check: bool = True) -> tuple[int, str, str]:
    """Run ``multiserver ARGS`` in a fresh process (its environment is this
    test's: MULTISERVER_RUNTIME_DIR, MULTISERVER_STATE_DIR, TMPDIR)."""
    with trio.fail_after(CLI_TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-c", CLI, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=b"",
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    if check and done.returncode != 0:
        pytest.fail(f"multiserver {' '.join(args)} exited {done.returncode}: {err}{out}")
    return done.returncode, out, err


async def cli_json(*args: str) -> Any:
    _, out, _ = await cli(*args, "--json")
    return json.loads(out)


def kill_by_pid(pid: int) -> None:
    """SIGCONT (a stopped process cannot act on anything else), then SIGKILL
    to it and its process group."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        for send in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(pid, sig)


def stop_everything(pids: list[int]) -> None:
    """Daemons by pid, each after SIGCONT: children first, then the daemon."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    for pid in pids:
        stop_daemon_sync(pid)


def rows_of(report: SweepReport) -> list[tuple[str, str, str]]:
    return [(Path(r.socket).name, r.state, r.action) for r in report.rows]


@contextlib.contextmanager
def dial_spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every path the client library connects to, in order."""
    dialled: list[Path] = []
    real = multiserver.client._client.connect

    async def spy(path: Path) -> trio.socket.SocketType:
        dialled.append(path)
        return await real(path)

    monkeypatch.setattr(multiserver.client._client, "connect", spy)
    yield dialled


def dead_socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


def orphan_leaves(state: Path) -> list[SessionLeaf]:
    with ArrangementStore.open(state / "arrangement.sqlite3") as store:
        window = store.load().window(ORPHAN_WINDOW)
    return (
        [] if window is None else [t.root for t in window.tabs if isinstance(t.root, SessionLeaf)]
    )


# --- a killed daemon ---------------------------------------------------------------------


async def test_a_sigkilled_daemons_socket_is_removed_by_the_next_sweep(
    ms_dirs: MsDirs, fallback: Path, daemon: RunningDaemon
) -> None:
    paths = daemon.paths
    async with open_client(paths) as client:
        launched = await client.launch(["sleep", "300"], cwd="/", hold=False)
    os.kill(daemon.pid, signal.SIGKILL)
    await wait_until(lambda: is_dead(daemon.pid), message="the killed daemon to be gone")
    kill_by_pid(launched.child.pid)  # its child, no longer the daemon's to stop

    # What a killed daemon leaves: its socket, and a lock nobody holds once
    # the last of its threads is gone (a zombie leader may outlive them).
    await wait_until(
        lambda: not lock_is_held(paths.lock), message="the dead daemon's lock to be free"
    )
    assert paths.socket.is_socket() and paths.lock.exists()

    dry = await cli_json("orphans")
    assert [(r["state"], r["action"]) for r in dry] == [("stale", "would-remove")]
    assert paths.socket.is_socket()

    report = await sweep(MemorySink())
    assert rows_of(report) == [(paths.socket.name, "stale", "removed")]
    assert not paths.socket.exists() and not paths.lock.exists()
    assert (await sweep(MemorySink())).rows == []  # nothing left to do


# --- a stopped daemon -----------------------------------------------------------------------


async def test_a_stopped_daemon_times_out_restore_and_the_next_sweep_adopts_its_children(
    ms_dirs: MsDirs, fallback: Path
) -> None:
    one, two = DaemonPaths.for_number(1), DaemonPaths.for_number(2)
    daemons: list[int] = []
    try:
        await cli("new", "-d", "-n", "editor", "--", "sleep", "300")
        await cli("new", "-d", "-n", "build", "--", "sh", "-c", "sleep 300")
        daemons += daemon_pids_for(one.socket)
        [first] = daemons
        # Daemon 2 is where restore will relaunch. Started now, so that the
        # relaunch is not also bound by the deadline on a busy machine.
        _, out, _ = await cli("--daemon", "2", "daemon")
        assert out.strip() == str(two.socket)
        daemons += daemon_pids_for(two.socket)
        async with open_client(one.socket) as client:
            instance = client.instance_id
            children = {c.name: c for c in await client.list()}
        assert sorted(children) == ["build", "editor"]

        os.kill(first, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            restored = await cli_json("restore", "--timeout", str(TIMEOUT))
            took = time.monotonic() - t0
        finally:
            os.kill(first, signal.SIGCONT)

        # Restore gave up on daemon 1 after its phase's part of the
        # deadline and started both sessions again on daemon 2; its sweep
        # found daemon 1 unresponsive.
        assert [(s["name"], s["outcome"], s["daemon"]) for s in restored["sessions"]] == [
            ("editor", "timed-out", str(two.socket)),
            ("build", "timed-out", str(two.socket)),
        ]
        waited = f"did not answer within {ATTACH_SHARE * TIMEOUT:g} s"
        assert all(waited in s["detail"] for s in restored["sessions"])
        assert [(r["socket"], r["state"], r["action"]) for r in restored["sweep"]] == [
            (str(one.socket), "unresponsive", "retry")
        ]
        assert restored["ok"]
        # By its deadline; then the command's sweep, and its exit.
        assert restored["seconds"] < TIMEOUT + TIMER_SLACK, restored
        assert took < restore_command_bound(TIMEOUT)
        assert orphan_leaves(ms_dirs.state) == []

        # Woken, daemon 1 has the originals under the sessions' names: `ls`
        # never shows a name twice; the originals are NAME-late, said so.
        for _ in range(5):
            listed = await cli_json("ls")
            names = [row["name"] for row in listed]
            assert len(names) == len(set(names)), names
        assert sorted(names) == ["build", "build-late", "editor", "editor-late"]
        assert {row["name"]: row.get("late_of") for row in listed} == {
            "build": None,
            "editor": None,
            "build-late": "build",
            "editor-late": "editor",
        }
        _, table, _ = await cli("ls")
        assert "running (late original of editor)" in table

        # Resumed: the next sweep says what it would adopt, then adopts it.
        dry = await cli_json("orphans")
        assert [(r["socket"], r["action"], r["name"]) for r in dry] == [
            (str(one.socket), "would-adopt", "editor"),
            (str(one.socket), "would-adopt", "build"),
            (str(two.socket), "none", ""),
        ]
        assert orphan_leaves(ms_dirs.state) == []
        adopted = await cli_json("orphans", "--adopt")
        assert [(r["socket"], r["state"], r["action"], r["name"]) for r in adopted] == [
            # The originals of the sessions started again on daemon 2: the
            # late originals of those names, never a second "editor".
            (str(one.socket), "live", "adopted", "editor-late"),
            (str(one.socket), "live", "adopted", "build-late"),
            (str(two.socket), "live", "none", ""),
        ]

        leaves = orphan_leaves(ms_dirs.state)
        assert [(x.name, x.argv) for x in leaves] == [
            ("editor-late", ["sleep", "300"]),
            ("build-late", ["sh", "-c", "sleep 300"]),
        ]
        for leaf, was in zip(leaves, ["editor", "build"], strict=True):
            c = children[was]
            assert leaf.ref is not None
            assert (leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id, leaf.ref.pid) == (
                str(one.socket),
                instance,
                c.id,
                c.pid,
            )
            assert leaf.notice == late_notice(was).encode()
            assert is_alive(c.pid)
        again = await cli_json("orphans", "--adopt")
        assert [r["action"] for r in again] == ["none", "none"]
        assert len(orphan_leaves(ms_dirs.state)) == 2
    finally:
        stop_everything(daemons + daemon_pids_for(one.socket) + daemon_pids_for(two.socket))


# --- what the sweep refuses ------------------------------------------------------------------


async def test_a_planted_socket_and_a_symlink_are_reported_and_never_connected_to(
    ms_dirs: MsDirs, fallback: Path, daemon: RunningDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = daemon.paths.dir
    planted = runtime / "multiserver-daemon-7.socket"
    link = runtime / "multiserver-daemon-8.socket"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(planted))
        listener.listen(16)
        listener.setblocking(False)
        os.chown(planted, NOBODY, NOBODY)  # as if another user had put it there
        link.symlink_to(daemon.paths.socket)  # a real, live daemon behind it

        with dial_spy(monkeypatch) as dialled:
            report = await sweep(MemorySink())
        assert rows_of(report) == [
            (daemon.paths.socket.name, "live", "none"),
            (planted.name, "refused", "skipped"),
            (link.name, "refused", "skipped"),
        ]
        assert f"socket owned by uid {NOBODY}" in report.rows[1].detail
        assert "not a socket" in report.rows[2].detail
        assert dialled == [daemon.paths.socket]

        _, table, _ = await cli("orphans", "--adopt")
        lines = table.splitlines()
        assert [line.split()[:3] for line in lines[1:]] == [
            [daemon.paths.socket.name, "live", "none"],
            [planted.name, "refused", "skipped"],
            [link.name, "refused", "skipped"],
        ]
        # Nobody ever connected to the planted listener (a connection waits
        # in its backlog even unaccepted), and both are left where they were.
        with pytest.raises(BlockingIOError):
            listener.accept()
        assert planted.is_socket() and link.is_symlink()
    finally:
        listener.close()


async def test_a_group_writable_runtime_dir_is_refused(
    ms_dirs: MsDirs, fallback: Path, daemon: RunningDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = daemon.paths.dir
    async with open_client(daemon.paths) as client:
        await client.launch(["sleep", "300"], cwd="/", hold=False, name="stray")
    stale = runtime / "multiserver-daemon-5.socket"
    dead_socket(stale)
    os.chmod(runtime, 0o770)
    try:
        with dial_spy(monkeypatch) as dialled:
            report = await sweep(MemorySink())
        assert [(r.socket, r.state, r.action) for r in report.rows] == [
            (str(runtime), "refused", "skipped")
        ]
        assert "dir not swept" in report.rows[0].detail and "0770" in report.rows[0].detail
        assert dialled == []
        cli_rows = await cli_json("orphans", "--adopt")
        assert [(r["socket"], r["state"], r["action"]) for r in cli_rows] == [
            (str(runtime), "refused", "skipped")
        ]
        assert stale.is_socket() and orphan_leaves(ms_dirs.state) == []
    finally:
        os.chmod(runtime, 0o700)
    # Only the mode was wrong: the same sweep now does its work.
    report = await sweep(MemorySink())
    assert [(Path(r.socket).name, r.action, r.name) for r in report.rows] == [
        (daemon.paths.socket.name, "adopted", "stray"),
        (stale.name, "removed", ""),
    ]
