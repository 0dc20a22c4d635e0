"""Bytes that are not UTF-8, end to end: a Latin-1 argument, cwd and
environment go through `multiserver new` to the child byte for byte, `ls`
shows them escaped, and after a save and a simulated reboot (every daemon
and child SIGKILLed by pid) `multiserver restore` relaunches the session
byte for byte. Errors that quote them are one escaped line; a daemon of
protocol version 4 gets a plain refusal, not a traceback.

Every process a test starts is stopped by pid (``ms_dirs`` stops the
daemons of the test's dirs, and their children, at teardown).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

import multiserver_cli.main as main_module
from multiserver_cli._sessions import CliError
from multiserver_cli.commands import ls as ls_command
from tests.cli.conftest import MULTISERVER, older_daemon, person_env
from tests.conftest import (
    MsDirs,
    daemon_pids_for,
    is_dead,
    kill_group_and_pid,
    wait_until,
)

COMMAND_TIMEOUT = 30.0  # a bound on one command's run, not a delay
ARG = os.fsdecode(b"x\xe9y")
LATIN_DIR = os.fsdecode(b"caf\xe9")
# A variable whose value is Latin-1, and one whose name is.
LATIN_ENV = {"LATIN_VALUE": os.fsdecode(b"caf\xe9"), os.fsdecode(b"LATIN_\xe9"): "name"}
SCRIPT = "sleep 1000; :"  # sh waits for sleep: its own argv stays in /proc


async def run(
    ms_dirs: MsDirs, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(COMMAND_TIMEOUT):
        return await trio.run_process(
            [MULTISERVER, *args],
            cwd=cwd or ms_dirs.root,
            env=env or person_env(ms_dirs),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def latin_env(ms_dirs: MsDirs) -> dict[str, str]:
    return {**person_env(ms_dirs), **LATIN_ENV}


def proc_bytes(pid: int) -> tuple[bytes, bytes, set[bytes]]:
    """What the kernel holds for ``pid``: its cmdline, its cwd, and its
    environment's entries, all bytes."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read()
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = set(f.read().split(b"\0"))
    return cmdline, os.readlink(f"/proc/{pid}/cwd".encode()), environ


def assert_byte_exact(pid: int, cwd: Path) -> None:
    cmdline, proc_cwd, environ = proc_bytes(pid)
    assert cmdline == b"sh\0-c\0" + SCRIPT.encode() + b"\0x\xe9y\0"
    assert proc_cwd == os.fsencode(cwd)
    assert {b"LATIN_VALUE=caf\xe9", b"LATIN_\xe9=name"} <= environ


async def ls_json(ms_dirs: MsDirs) -> dict[str, Any]:
    result = await run(ms_dirs, "ls", "--json")
    assert result.returncode == 0, result.stderr
    return {s["name"]: s for s in json.loads(result.stdout)}


async def test_latin1_argv_cwd_and_env_reach_the_child_and_survive_a_reboot(
    ms_dirs: MsDirs,
) -> None:
    latin = ms_dirs.root / LATIN_DIR
    latin.mkdir()
    env = latin_env(ms_dirs)
    new = await run(
        ms_dirs, "new", "-d", "-n", "latin", "--", "sh", "-c", SCRIPT, ARG, cwd=latin, env=env
    )
    assert (new.returncode, new.stdout, new.stderr) == (0, b"latin\n", b"")
    session = (await ls_json(ms_dirs))["latin"]
    assert_byte_exact(session["pid"], latin)
    # `ls`: escaped, the same way in the table and in --json, and exit 0.
    assert session["argv"] == ["sh", "-c", SCRIPT, "x\\xe9y"]
    assert session["cwd"] == os.path.join(ms_dirs.root, "caf\\xe9")
    table = await run(ms_dirs, "ls")
    assert table.returncode == 0, table.stderr
    assert "'x\\xe9y'" in table.stdout.decode("utf-8")
    saved = await run(ms_dirs, "save", env=env)
    assert saved.returncode == 0, saved.stderr

    # A reboot: every daemon and every child SIGKILLed by pid.
    [daemon] = daemon_pids_for(ms_dirs.paths.socket)
    kill_group_and_pid(session["pid"])
    os.kill(daemon, signal.SIGKILL)
    await wait_until(lambda: is_dead(daemon) and is_dead(session["pid"]), 10, "the reboot")

    restore = await run(ms_dirs, "restore", "--json", env=env)
    assert restore.returncode == 0, restore.stderr
    report = json.loads(restore.stdout)
    assert [(s["name"], s["outcome"]) for s in report["sessions"]] == [("latin", "relaunched")]
    again = (await ls_json(ms_dirs))["latin"]
    assert again["pid"] != session["pid"]
    assert_byte_exact(again["pid"], latin)


async def test_errors_that_quote_such_bytes_are_one_escaped_line(ms_dirs: MsDirs) -> None:
    missing = await run(ms_dirs, "new", "-d", "--", os.fsdecode(b"no-such-\xe9"))
    assert (missing.returncode, missing.stderr) == (
        1,
        b"multiserver: command not found: no-such-\\xe9\n",
    )
    nodir = await run(ms_dirs, "new", "-d", "--cwd", os.fsdecode(b"/no/such/caf\xe9"), "--", "sh")
    assert (nodir.returncode, nodir.stderr) == (
        1,
        b"multiserver: no such directory: /no/such/caf\\xe9\n",
    )


async def test_a_version_4_daemon_gets_one_plain_line_not_a_traceback(ms_dirs: MsDirs) -> None:
    env = latin_env(ms_dirs)
    async with older_daemon(ms_dirs, 4):
        refused = await run(ms_dirs, "new", "-d", "--", "sh", "-c", SCRIPT, ARG)
        assert (refused.returncode, refused.stderr) == (
            1,
            b"multiserver: the daemon speaks protocol 4, which cannot carry non-UTF-8"
            b" arguments; restart it\n",
        )
        # The environment is bytes too; UTF-8 alone goes through as before.
        refused = await run(ms_dirs, "new", "-d", "--", "sh", "-c", SCRIPT, env=env)
        assert refused.returncode == 1 and b"protocol 4" in refused.stderr
        plain = await run(ms_dirs, "new", "-d", "-n", "plain", "--", "sh", "-c", SCRIPT, "ü")
        assert (plain.returncode, plain.stdout) == (0, b"plain\n"), plain.stderr
        assert (await ls_json(ms_dirs))["plain"]["argv"][-1] == "ü"


def test_the_error_printer_shows_such_bytes_escaped(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Whatever an error quotes (here a path the command itself failed on),
    it is one line, escaped as `ls` shows it: never a UnicodeEncodeError."""

    def failing(args: argparse.Namespace) -> int:
        raise CliError("cannot read " + os.fsdecode(b"/tmp/caf\xe9"))

    monkeypatch.setattr(ls_command, "run", failing)
    with pytest.raises(SystemExit) as exit_:
        main_module.main(["ls"])
    assert exit_.value.code == 1
    assert capsysbinary.readouterr().err == b"multiserver: cannot read /tmp/caf\\xe9\n"
