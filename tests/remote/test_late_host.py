"""restore with a host that answers after its own timeout (issue 16): its
sessions are reported timed out at that timeout, and its late answer goes to
the adopter: a saved session running there is found, one gone there is
started again, and one started there that nobody saved is adopted into the
orphans window as HOST:NAME, once."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from adopter import ORPHAN_NOTICE, ORPHAN_WINDOW
from restore import ArrangementStore, SessionLeaf
from restore._plan import RELAUNCH_MARKER
from tests.conftest import MsDirs
from tests.remote.conftest import Remote
from tests.remote.test_hosts import remotely, run
from tests.timing import TIMER_SLACK, restore_command_bound

# How long the slow host takes to answer once, against its own --timeout
# (OWN) and the restore's (DEADLINE).
SLOW = 3
OWN = 1.0
DEADLINE = 8.0


def slow_command(ms_dirs: MsDirs, sshd: Remote) -> tuple[str, Path]:
    """The remote multiserver behind a wrapper that makes the first command
    after ``flag`` appears wait SLOW s (the host's machine busy, a slow
    link); every other command runs at once."""
    flag = ms_dirs.root / "slow-once"
    script = ms_dirs.root / "slow-multiserver"
    script.write_text(
        f'#!/bin/sh\nif rm "{flag}" 2>/dev/null; then sleep {SLOW}; fi\nexec {sshd.command} "$@"\n'
    )
    script.chmod(0o755)
    return str(script), flag


def remote_ls(sshd: Remote) -> dict[str, dict[str, Any]]:
    """The remote's own sessions by name, as it lists them there."""
    done = subprocess.run(
        ["sh", "-c", f"{sshd.command} ls --json"], capture_output=True, timeout=60, check=True
    )
    return {s["name"]: s for s in json.loads(done.stdout) if s.get("host") is None}


def saved_there(sshd: Remote, name: str) -> SessionLeaf | None:
    """The session ``name`` as the host's own store keeps it."""
    with ArrangementStore.open(sshd.root / "state" / "arrangement.sqlite3") as store:
        return store.load().find(name)


def restore(ms_dirs: MsDirs, sshd: Remote) -> dict[str, Any]:
    """``multiserver restore --json``'s report, once it returned by its
    deadline (``seconds``) and exited after its sweep."""
    t0 = time.monotonic()
    done = run(ms_dirs, sshd, "restore", "--json", "--timeout", str(DEADLINE))
    took = time.monotonic() - t0
    assert done.stdout, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    assert out["seconds"] < DEADLINE + TIMER_SLACK, out
    assert took < restore_command_bound(DEADLINE)
    return out


def test_a_host_that_answers_late_goes_to_the_adopter(ms_dirs: MsDirs, sshd: Remote) -> None:
    command, flag = slow_command(ms_dirs, sshd)
    # Two names for the one machine: "late" (slow) and "prompt" (not).
    for name, its in [("late", command), ("prompt", sshd.command)]:
        added = run(ms_dirs, sshd, "host", "add", name, "--ssh", sshd.alias, "--command", its)
        assert added.returncode == 0, added.stderr
    for target, name in [("late", "web"), ("late", "job"), ("prompt", "db")]:
        made = run(ms_dirs, sshd, "new", "--host", target, "-d", "-n", name, "--", "sh")
        assert made.returncode == 0, made.stderr
    # Its timeout is 1 s only now: the first commands start the daemon
    # there, which may take longer on a busy machine.
    added = run(
        ms_dirs, sshd, "host", "add", "late", "--replace", "--ssh", sshd.alias,
        "--command", command, "--timeout", str(OWN), "--no-check",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    remotely(sshd, "kill", "job")  # its grace window elapsed there
    remotely(sshd, "new", "-d", "-n", "x", "--", "sleep", "1000")  # made there, not saved here
    there = remote_ls(sshd)
    with ArrangementStore.open() as store:
        job_before = store.load().find("late:job")
    assert job_before is not None and job_before.ref is not None

    flag.touch()
    out = restore(ms_dirs, sshd)
    assert not flag.exists()  # the slow answer was the restore's
    rows = {r["name"]: r for r in out["sessions"]}
    assert {n: r["outcome"] for n, r in rows.items()} == {
        "late:web": "timed-out",
        "late:job": "timed-out",
        "prompt:db": "attached",
    }, out
    for name in ("late:web", "late:job"):
        assert OWN <= rows[name]["seconds"] < OWN + TIMER_SLACK, rows[name]  # its own 1 s
        assert f"no answer within {OWN:g} s" in rows[name]["detail"]
        assert "asked on until the restore's deadline" in rows[name]["detail"]
    swept = {r["name"]: r for r in out["sweep"] if r["state"] == "late"}
    assert {n: r["action"] for n, r in swept.items()} == {
        "late:web": "found",
        "late:job": "relaunched",
        "late:x": "adopted",
    }, out["sweep"]
    for r in swept.values():
        assert r["socket"].startswith("late:/"), r
        assert r["detail"].startswith("answered after ")
    assert f"running on late, pid {there['web']['pid']}" in swept["late:web"]["detail"]
    assert out["ok"]

    with ArrangementStore.open() as store:
        arrangement = store.load()
    x = arrangement.find("late:x")
    assert x is not None and x.ref is not None
    assert (x.host, x.notice, x.argv) == ("late", ORPHAN_NOTICE.encode(), ["sleep", "1000"])
    assert (x.ref.instance_id, x.ref.child_id) == (
        there["x"]["daemon_instance"],
        there["x"]["id"],
    )
    orphans = arrangement.window(ORPHAN_WINDOW)
    assert orphans is not None and [t.root for t in orphans.tabs] == [x]
    # The one gone there runs again, from its saved cwd, with its marker.
    job = arrangement.find("late:job")
    assert job is not None and job.ref is not None and job.ref != job_before.ref
    # Its marker waits there, where the screen it shows first is kept.
    job_there = saved_there(sshd, "job")
    assert job_there is not None and job_there.notice is not None
    assert RELAUNCH_MARKER.encode() in job_there.notice
    assert remote_ls(sshd)["job"]["id"] == job.ref.child_id
    # Nothing of the other name for the machine was taken: db is prompt's.
    assert arrangement.find("late:db") is None

    # Late again (as a person sees it): everything is found, nothing adopted twice.
    flag.touch()
    table = run(ms_dirs, sshd, "restore", "--timeout", str(DEADLINE)).stdout
    late_rows = [line.split() for line in table.splitlines() if "late:multiserver-daemon" in line]
    assert sorted((r[0], r[1], r[2]) for r in late_rows) == [
        (name, "sweep:", "found") for name in ("late:job", "late:web", "late:x")
    ], table
    with ArrangementStore.open() as store:
        leaves = store.load().leaves()
    assert sorted(leaf.name for leaf in leaves) == ["late:job", "late:web", "late:x", "prompt:db"]
    # And in time, the adopted one is a saved session like the others.
    prompt = restore(ms_dirs, sshd)
    assert {r["name"]: r["outcome"] for r in prompt["sessions"]} == {
        "late:web": "attached",
        "late:job": "attached",
        "late:x": "attached",
        "prompt:db": "attached",
    }
    assert not [r for r in prompt["sweep"] if r["state"] == "late"]
