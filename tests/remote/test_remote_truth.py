"""Commands through a host tell the truth (issue 23): a link that dies after
the host made a session finds it (and a retry is no second one); what a
host says names the host; a daemon there that does not answer is never a
reason to forget its session; a saved session its host no longer has is
still listed; and ssh's shared connection goes with the host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import attrs

from restore import ArrangementStore, SessionLeaf
from tests.cli.conftest import Terminal
from tests.conftest import MsDirs, daemon_pids_under, wait_until_sync
from tests.remote.conftest import MULTISERVER, Remote, ssh_masters_under
from tests.remote.test_hosts import person_ssh_env, remotely, run
from tests.remote.test_late_host import remote_ls

# How long the remote `new` lingers after making its session (a slow link).
SLOW_NEW = 3


def saved_here(ms_dirs: MsDirs) -> dict[str, SessionLeaf]:
    with ArrangementStore.open() as store:
        return {leaf.name: leaf for leaf in store.load().leaves()}


def slow_new_host(ms_dirs: MsDirs, sshd: Remote, name: str) -> Path:
    """Host ``name``: the remote multiserver behind a wrapper whose ``new``
    answers SLOW_NEW s after making the session, and whose first ``ls``
    after the returned flag appears fails as ssh does (exit 255: the link
    still down)."""
    flag = ms_dirs.root / f"{name}-ls-fails-once"
    script = ms_dirs.root / f"{name}-multiserver"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = new ]; then {sshd.command} "$@"; s=$?; sleep {SLOW_NEW}; exit $s; fi\n'
        f'if [ "$1" = ls ] && rm "{flag}" 2>/dev/null; then exit 255; fi\n'
        f'exec {sshd.command} "$@"\n'
    )
    script.chmod(0o755)
    added = run(ms_dirs, sshd, "host", "add", name, "--ssh", sshd.alias, "--command", str(script))
    assert added.returncode == 0, added.stderr
    return flag


def new_cut_mid_way(ms_dirs: MsDirs, sshd: Remote, host: str, name: str) -> tuple[int, str, str]:
    """``new --host HOST -d -n NAME``, its shared connection killed once the
    host has made the session, before it answered."""
    env = {**person_ssh_env(ms_dirs, sshd)}
    proc = subprocess.Popen(
        [MULTISERVER, "new", "--host", host, "-d", "-n", name, "--", "sleep", "1000"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until_sync(lambda: name in remote_ls(sshd), 15.0), "not made there"
        masters = ssh_masters_under(ms_dirs.root)
        assert masters, "no shared connection"
        for pid in masters:
            os.kill(pid, signal.SIGKILL)  # the link dies while the host answers
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return proc.returncode, out, err


def test_a_link_that_dies_after_the_host_made_the_session_finds_it(
    ms_dirs: MsDirs, sshd: Remote
) -> None:
    slow_new_host(ms_dirs, sshd, "sr")
    status, out, err = new_cut_mid_way(ms_dirs, sshd, "sr", "cut1")
    assert (status, out) == (0, "cut1\n"), err
    assert "multiserver: sr: the link died after sr:cut1 was made there; it runs" in err
    there = remote_ls(sshd)["cut1"]
    ref = saved_here(ms_dirs)["sr:cut1"].ref
    assert ref is not None and (ref.instance_id, ref.child_id) == (
        there["daemon_instance"],
        there["id"],
    )
    # The same name again is the host's refusal, said as the host's.
    again = run(ms_dirs, sshd, "new", "--host", "sr", "-d", "-n", "cut1", "--", "sleep", "1")
    assert again.returncode == 1
    assert again.stderr.startswith(
        "multiserver: sr: a session named 'cut1' exists already (on daemon 1, running)"
    ), again.stderr


def test_a_retry_finds_what_a_dead_link_made(ms_dirs: MsDirs, sshd: Remote) -> None:
    flag = slow_new_host(ms_dirs, sshd, "sr")
    flag.touch()  # the link is still down when the command looks
    status, out, err = new_cut_mid_way(ms_dirs, sshd, "sr", "cut2")
    assert (status, out) == (1, ""), err
    assert err.startswith("multiserver: sr: ssh failed: "), err
    assert err.rstrip().endswith(
        "sr:cut2 may have been made there: the same command again finds it"
    ), err
    assert "sr:cut2" not in saved_here(ms_dirs)

    retry = run(ms_dirs, sshd, "new", "--host", "sr", "-d", "-n", "cut2", "--", "sleep", "1000")
    assert (retry.returncode, retry.stdout, retry.stderr) == (0, "cut2\n", "")
    assert [n for n in remote_ls(sshd) if n == "cut2"] == ["cut2"]  # one session, not two
    assert "sr:cut2" in saved_here(ms_dirs)
    # Known now: a third time is the host's refusal again, not taken twice.
    third = run(ms_dirs, sshd, "new", "--host", "sr", "-d", "-n", "cut2")
    assert third.returncode == 1 and "multiserver: sr: a session named 'cut2'" in third.stderr


async def test_a_remote_daemon_that_does_not_answer_is_not_advice_to_forget(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    added = run(ms_dirs, sshd, "host", "add", "rh", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "rh", "-d", "-n", "dj", "--", "sleep", "1000")
    assert made.returncode == 0, made.stderr
    (daemon,) = daemon_pids_under(sshd.root)
    os.kill(daemon, signal.SIGSTOP)  # wedged there
    try:
        term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
        await term.wait_prompt()
        term.line("multiserver attach rh:dj; echo status=$?")
        await term.wait_screen("status=1", timeout=30)
    finally:
        os.kill(daemon, signal.SIGCONT)
    shown = bytes(term.raw).decode(errors="replace")
    assert (
        "multiserver: rh: session 'dj' is saved, not running: daemon 1 did not answer;"
        " its program may run there still: try again once it answers"
    ) in shown, shown
    assert "forgets" not in shown
    assert "dj" in remote_ls(sshd)  # it ran on there


def test_a_saved_session_its_host_no_longer_has_is_listed(ms_dirs: MsDirs, sshd: Remote) -> None:
    added = run(ms_dirs, sshd, "host", "add", "rh", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "rh", "-d", "-n", "job2", "--", "sleep", "1000")
    assert made.returncode == 0, made.stderr
    remotely(sshd, "kill", "job2")  # gone there
    # Its relaunch fails: the cwd it was saved with is gone there too.
    with ArrangementStore.open() as store:
        leaf = store.load().find("rh:job2")
        assert leaf is not None
        store.update_session(attrs.evolve(leaf, cwd="/no/such/dir"))
    done = run(ms_dirs, sshd, "restore", "--json", "--timeout", "10")
    (row,) = json.loads(done.stdout)["sessions"]
    assert (row["name"], row["outcome"]) == ("rh:job2", "failed"), row
    assert "rh:job2" in saved_here(ms_dirs)

    listed = run(ms_dirs, sshd, "ls")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    (line,) = [ln for ln in lines if ln.startswith("rh:job2 ")]
    assert " not running " in line and " rh " in line, listed.stdout
    assert any(ln.startswith("  rh:job2: saved, not running: gone from rh;") for ln in lines)
    rows = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    assert [(r["name"], r["host"], r["state"]) for r in rows if r.get("host")] == [
        ("job2", "rh", "not running")
    ]
    # Killed, it is forgotten here (nothing of it there to end).
    killed = run(ms_dirs, sshd, "kill", "rh:job2")
    assert (killed.returncode, killed.stderr) == (
        0,
        "rh:job2: forgot the saved session (gone from rh)\n",
    )
    assert "rh:job2" not in saved_here(ms_dirs)


def test_a_plain_name_hints_at_the_host_and_a_host_is_named(ms_dirs: MsDirs, sshd: Remote) -> None:
    added = run(ms_dirs, sshd, "host", "add", "H", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "H", "-d", "-n", "rjob", "--", "sleep", "1000")
    assert made.returncode == 0, made.stderr
    peeked = run(ms_dirs, sshd, "peek", "rjob")
    assert (peeked.returncode, peeked.stderr) == (
        1,
        "multiserver: no session named 'rjob' (H:rjob is a session of host H:"
        " multiserver peek H:rjob)\n",
    )
    assert run(ms_dirs, sshd, "kill", "H:rjob").returncode == 0
    again = run(ms_dirs, sshd, "kill", "H:rjob")
    assert (again.returncode, again.stderr) == (1, "multiserver: H: no session named 'rjob'\n")


def test_host_rm_and_stop_force_stop_the_shared_connection(ms_dirs: MsDirs, sshd: Remote) -> None:
    for _ in range(2):
        added = run(
            ms_dirs, sshd, "host", "add", "rh", "--ssh", sshd.alias, "--command", sshd.command
        )
        assert added.returncode == 0, added.stderr
        assert ssh_masters_under(ms_dirs.root), "no shared connection to begin with"
        if _ == 0:
            done = run(ms_dirs, sshd, "host", "rm", "rh")
        else:
            assert (
                run(ms_dirs, sshd, "new", "-d", "-n", "here", "--", "sleep", "100").returncode == 0
            )
            done = run(ms_dirs, sshd, "stop", "--force")
        assert done.returncode == 0, done.stderr
        assert wait_until_sync(lambda: not ssh_masters_under(ms_dirs.root), 5.0), done.args
