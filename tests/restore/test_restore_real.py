"""`multiserver restore` end to end: real daemons, real PTYs, the real command
as a subprocess (in the test's own runtime and state dirs, from ``ms_dirs``).

Every process a test starts is stopped by pid in a ``finally``: daemons are
found by the socket path on their command line (unique to the test), their
children through the daemon's /proc entries (``stop_daemon_sync``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from multiserver import DaemonPaths, open_client
from tests.conftest import (
    POLL_INTERVAL,
    MsDirs,
    daemon_pids_for,
    is_alive,
    proc_state,
    stop_daemon_sync,
    wait_until,
)
from tests.timing import STOPPED_DAEMON_TIMEOUT, TIMER_SLACK, restore_command_bound

MULTISERVER = str(Path(sys.executable).with_name("multiserver"))
# A bound on one command's run, not a delay.
COMMAND_TIMEOUT = 30.0

# `multiserver restore` whose stderr stops the process (SIGSTOP to itself)
# right after the first per-session progress line ("  s0: ..."; the lines
# before it are per daemon): the restore is then
# exactly mid-way, its claims held, when the test SIGKILLs it.
STOP_AFTER_FIRST_PROGRESS = r"""
import os, re, signal, sys

class StopAfterFirstProgress:
    def __init__(self, stream):
        self._stream = stream
        self._stopped = False

    def write(self, text):
        n = self._stream.write(text)
        self._stream.flush()
        if not self._stopped and re.match(r"  s[0-9]+: ", text):
            self._stopped = True
            os.kill(os.getpid(), signal.SIGSTOP)
        return n

    def flush(self):
        self._stream.flush()

sys.stderr = StopAfterFirstProgress(sys.stderr)
from multiserver_cli.main import main
main(sys.argv[1:])
"""


# --- helpers -----------------------------------------------------------------------


async def ms(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the `multiserver` command with the test's environment."""
    with trio.fail_after(COMMAND_TIMEOUT):
        return await trio.run_process(
            [MULTISERVER, *args],
            cwd=cwd,
            env=dict(os.environ),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def ms_ok(*args: str, cwd: Path | None = None) -> bytes:
    result = await ms(*args, cwd=cwd)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


async def ms_json(*args: str) -> Any:
    return json.loads(await ms_ok(*args, "--json"))


def stop_daemons(*numbers: int) -> None:
    """Stop (by pid) every daemon of the test's runtime dir with these numbers,
    and its children."""
    for n in numbers:
        for pid in daemon_pids_for(DaemonPaths.for_number(n).socket):
            with_cont(pid)
            stop_daemon_sync(pid)


def with_cont(pid: int) -> None:
    """A stopped process cannot act on SIGTERM: let it run first."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


async def new_sessions(root: Path) -> dict[str, Path]:
    """Three detached sessions, each in its own saved cwd: one by --cwd, the
    others by where `multiserver new` ran. Returns name -> cwd."""
    cwds = {name: root / f"cwd-{name}" for name in ("one", "two", "three")}
    for d in cwds.values():
        d.mkdir()
    await ms_ok("new", "-d", "-n", "one", "--cwd", str(cwds["one"]), "--", "sh")
    await ms_ok("new", "-d", "-n", "two", "--", "sh", cwd=cwds["two"])
    await ms_ok("new", "-d", "-n", "three", "--", "sh", cwd=cwds["three"])
    return cwds


def proc_cwd(pid: int) -> str:
    return os.path.realpath(os.readlink(f"/proc/{pid}/cwd"))


# --- kill the client mid-restore --------------------------------------------------------


async def test_killing_the_client_mid_restore_loses_nothing(ms_dirs: MsDirs) -> None:
    paths = ms_dirs.paths
    proc: trio.Process | None = None
    try:
        for i in range(3):
            script = f"printf 'session {i}: \\033[1mbold\\033[0m \\303\\251t\\303\\251\\n'; exec sleep 1000"
            await ms_ok("new", "-d", "-n", f"s{i}", "--", "sh", "-c", script)
        async with open_client(paths.socket) as client:
            ids = {c.name: c.id for c in await client.list()}
            before: dict[str, bytes] = {}

            async def peeked(name: str) -> bytes:
                return (await client.peek(ids[name])).output

            for name in ids:
                with trio.fail_after(5):
                    while not (out := await peeked(name)).endswith("été\r\n".encode()):
                        await trio.sleep(POLL_INTERVAL)
                before[name] = out
            assert before["s1"] == "session 1: \x1b[1mbold\x1b[0m été\r\n".encode()

            proc = await trio.lowlevel.open_process(
                [sys.executable, "-c", STOP_AFTER_FIRST_PROGRESS, "restore"],
                env=dict(os.environ),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            pid = proc.pid
            await wait_until(lambda: proc_state(pid) == "T", 15, "restore to stop mid-way")
            # Mid-restore: every child is claimed by the stopped restore.
            assert [c.held for c in await client.list()] == [True, True, True]
            os.kill(pid, signal.SIGKILL)
            with trio.fail_after(5):
                assert await proc.wait() == -signal.SIGKILL
            assert proc.stderr is not None
            said = b""
            while chunk := await proc.stderr.receive_some():
                said += chunk
            assert b"restoring 3 sessions" in said and b"  s0: attached" in said
            assert b"s2:" not in said  # it was stopped after the first one

            # The daemon took the children back when the connection died.
            async def none_held() -> bool:
                return not any(c.held for c in await client.list())

            with trio.fail_after(5):
                while not await none_held():
                    await trio.sleep(POLL_INTERVAL)
            assert {name: await peeked(name) for name in ids} == before

            # Restore again: everything is there, output untouched.
            report = await ms_json("restore")
            assert [(s["name"], s["outcome"]) for s in report["sessions"]] == [
                ("s0", "attached"),
                ("s1", "attached"),
                ("s2", "attached"),
            ]
            assert report["ok"] is True
            assert {name: await peeked(name) for name in ids} == before
            listed = {c.name: c for c in await client.list()}
            assert {n: (c.id, c.state, c.held) for n, c in listed.items()} == {
                n: (ids[n], "running", False) for n in ids
            }
    finally:
        if proc is not None:
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.kill()  # by its pid, which is not reaped yet
                with trio.move_on_after(5):
                    await proc.wait()
                if proc.stderr is not None:
                    await proc.stderr.aclose()
        stop_daemons(1)


# --- the daemon is gone ------------------------------------------------------------------


async def test_after_stop_force_every_session_is_relaunched_in_its_saved_cwd(
    ms_dirs: MsDirs,
) -> None:
    paths = ms_dirs.paths
    try:
        cwds = await new_sessions(ms_dirs.root)
        [old_daemon] = daemon_pids_for(paths.socket)
        await ms_ok("stop", "--force")
        await wait_until(lambda: not is_alive(old_daemon), 10, "the daemon to stop")

        report = await ms_json("restore")
        assert report["ok"] is True
        assert [s["name"] for s in report["sessions"]] == ["one", "two", "three"]
        for s in report["sessions"]:
            assert s["outcome"] == "relaunched", s
            assert s["daemon"] == str(paths.socket)
            assert "its daemon is not running" in s["detail"]

        listed = {c["name"]: c for c in await ms_json("ls")}
        assert sorted(listed) == ["one", "three", "two"]
        for name, cwd in cwds.items():
            c = listed[name]
            assert c["state"] == "running" and c["argv"] == ["sh"]
            assert c["cwd"] == str(cwd)
            assert proc_cwd(c["pid"]) == os.path.realpath(cwd)
    finally:
        stop_daemons(1)


# --- a wedged daemon ---------------------------------------------------------------------


async def test_a_stopped_daemon_times_out_and_restore_returns_in_time(ms_dirs: MsDirs) -> None:
    timeout = STOPPED_DAEMON_TIMEOUT
    wedged_pid: int | None = None
    try:
        await new_sessions(ms_dirs.root)
        [wedged_pid] = daemon_pids_for(ms_dirs.paths.socket)
        # Daemon 2 runs already: what is timed is the restore, not a Python
        # daemon's start (a few hundred ms on a busy machine), which a restore
        # that must start one adds on top.
        await ms_ok("--daemon", "2", "daemon")

        os.kill(wedged_pid, signal.SIGSTOP)
        await wait_until(lambda: proc_state(wedged_pid) == "T", 5, "the daemon to stop")
        t0 = time.monotonic()
        result = await ms("restore", "--timeout", str(timeout), "--json")
        took = time.monotonic() - t0
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        # The restore returned by its deadline; the command exited after its
        # sweep, which skipped the stopped daemon (never waited for it).
        assert report["seconds"] < timeout + TIMER_SLACK, report
        assert took < restore_command_bound(timeout), (took, report)
        [skipped] = report["sweep"]
        assert (skipped["socket"], skipped["action"]) == (str(ms_dirs.paths.socket), "retry")
        assert "did not answer the restore in time" in skipped["detail"], skipped

        second = str(DaemonPaths.for_number(2).socket)
        for s in report["sessions"]:
            assert s["outcome"] == "timed-out", s
            assert s["daemon"] == second  # never the stopped one
        relaunched = {c["name"]: c for c in await ms_json("--daemon", "2", "ls")}
        assert sorted(relaunched) == ["one", "three", "two"]
        assert all(c["state"] == "running" for c in relaunched.values())
        assert proc_state(wedged_pid) == "T"  # nothing woke it
    finally:
        if wedged_pid is not None:
            with_cont(wedged_pid)
        stop_daemons(1, 2)
