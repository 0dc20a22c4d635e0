"""A host that rebooted (issue 23): its daemon and programs SIGKILLed, its
own store still naming the session (or lost). The next restore here starts
the session again there, in its saved cwd; its first attach shows what that
host saved of its screen, then the marker; outcome relaunched, exit 0."""

from __future__ import annotations

import json
import os
import shlex
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from restore._plan import RELAUNCH_MARKER
from tests.cli.conftest import Terminal
from tests.conftest import MsDirs, daemon_pids_under, kill_children_of, wait_until_sync
from tests.remote.conftest import Remote
from tests.remote.test_hosts import person_ssh_env, run
from tests.remote.test_late_host import remote_ls


def reboot_there(sshd: Remote) -> None:
    """The host's machine goes down: its daemons and their programs SIGKILLed
    (by pid), nothing of them left to say goodbye."""
    for pid in daemon_pids_under(sshd.root):
        kill_children_of(pid)
        os.kill(pid, signal.SIGKILL)
    assert wait_until_sync(lambda: not daemon_pids_under(sshd.root), 5.0)


def program(flag: Path) -> list[str]:
    """A shell that says which run it is: the first, then any other."""
    script = (
        f"if [ -e {shlex.quote(str(flag))} ]; then echo second-run-$((40+2));"
        f" else touch {shlex.quote(str(flag))}; echo first-run-$((40+1)); fi; exec sh"
    )
    return ["sh", "-c", script]


@pytest.mark.parametrize("store_there", ["kept", "lost"])
async def test_a_host_that_rebooted_gets_its_session_back(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal], store_there: str
) -> None:
    added = run(ms_dirs, sshd, "host", "add", "rh", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    work = ms_dirs.root / "work dir"
    work.mkdir()
    made = run(
        ms_dirs, sshd, "new", "--host", "rh", "-d", "-n", "s-expired", "--cwd", str(work),
        "--", *program(ms_dirs.root / "ran-once"),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert wait_until_sync(
        lambda: "first-run-41" in run(ms_dirs, sshd, "peek", "rh:s-expired").stdout, 10.0
    )
    # The host's daemon keeps it on disk within its flush period.
    assert wait_until_sync(
        lambda: any(
            b"first-run-41" in p.read_bytes() for p in (sshd.root / "state").glob("output/*/*.out")
        ),
        10.0,
    )
    reboot_there(sshd)
    if store_there == "lost":
        for f in (sshd.root / "state").glob("arrangement.sqlite3*"):
            f.unlink()

    done = run(ms_dirs, sshd, "restore", "--json", "--timeout", "10")
    (row,) = json.loads(done.stdout)["sessions"]
    assert (row["name"], row["outcome"], done.returncode) == ("rh:s-expired", "relaunched", 0), (
        row,
        done.stderr,
    )
    assert remote_ls(sshd)["s-expired"]["cwd"] == str(work)  # in its saved cwd

    term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await term.wait_prompt()
    term.line("multiserver attach rh:s-expired")
    await term.wait_screen("second-run-42")
    shown = term.screen_text()
    marker = shown.index(RELAUNCH_MARKER[:40])
    assert marker < shown.index("second-run-42"), shown
    if store_there == "kept":  # what the host saved, then the marker
        assert shown.index("first-run-41") < marker, shown
    else:  # nothing was saved of it there: the marker only
        assert "first-run-41" not in shown, shown
    assert shown.count(RELAUNCH_MARKER[:40]) == 1, shown  # one notice, not one per side
    term.type(b"\x1c")
    await term.wait_screen("detached from s-expired")
