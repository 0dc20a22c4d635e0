"""The daemon's open files (issue 35): a login's soft limit of 1024 let a
daemon start 505 sessions of 1,000; at the limit its accept loop stalled
(`ls` and `kill` timed out, `kill` said a session was missing) and its log
gained 10 lines a second. Real daemons, real PTYs; the limits are set in
the daemon's process (``preexec_fn`` before its exec, or ``prlimit`` on
the running daemon)."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys

import pytest
import trio

from multiserver import RequestFailed, open_client
from tests.cli.conftest import ms, person_env
from tests.conftest import MsDirs, RunningDaemon, fd_count, wait_until
from tests.reliability.test_daemon_edges import limit_leaving

SESSIONS = 1000
LOGIN_SOFT = 1024
TIMEOUT = 60.0  # a bound on a thousand launches on this loaded machine


def soft_limit_of(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    return int(line.split()[3])


async def daemon_under(ms_dirs: MsDirs, soft: int) -> RunningDaemon:
    """Daemon 1, started by ``multiserver daemon`` whose soft RLIMIT_NOFILE
    is ``soft`` (set in the child before its exec); its hard limit is this
    process's. Stopped by pid by ``ms_dirs``."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def login_limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "multiserver_cli", "daemon"],
            env=person_env(ms_dirs),
            capture_output=True,
            preexec_fn=login_limits,
            timeout=30,
            check=True,
        )
    )
    assert done.stdout.decode().strip() == str(ms_dirs.paths.socket)
    async with open_client(ms_dirs.paths) as client:
        return RunningDaemon(ms_dirs.paths, client.daemon_pid, client.instance_id)


def log_lines(ms_dirs: MsDirs, word: str) -> int:
    try:
        with open(ms_dirs.paths.log) as f:
            return sum(1 for line in f if word in line)
    except FileNotFoundError:
        return 0


async def test_a_thousand_sessions_start_under_a_login_soft_limit_of_1024(
    ms_dirs: MsDirs,
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 3 * SESSIONS + 200:
        pytest.skip(f"the hard limit here is {hard}: a thousand sessions need about 3,100")
    daemon = await daemon_under(ms_dirs, LOGIN_SOFT)
    assert soft_limit_of(daemon.pid) == hard  # raised at start
    with trio.fail_after(TIMEOUT):
        async with open_client(daemon.paths) as client, trio.open_nursery() as nursery:
            for i in range(SESSIONS):
                nursery.start_soon(
                    lambda i=i: client.launch(["sleep", "600"], name=f"s{i}", hold=False)
                )
        async with open_client(daemon.paths) as client:
            listed = await client.list()
    assert len(listed) == SESSIONS and all(c.state == "running" for c in listed)
    # Its programs keep the limit the login gave (select() needs fds < 1024).
    assert {soft_limit_of(c.pid) for c in listed[:: SESSIONS // 10]} == {LOGIN_SOFT}
    [row] = json.loads((await ms(ms_dirs, "daemon", "--json")).stdout)
    assert row["open_files"]["limit"] == hard
    assert row["open_files"]["in_use"] >= 2 * SESSIONS


async def test_a_launch_that_would_leave_no_fds_for_clients_is_refused_in_one_line(
    daemon: RunningDaemon, ms_dirs: MsDirs
) -> None:
    """Refused while the daemon can still hand every session to a client:
    a claim of all of them at once goes through."""
    limit = fd_count(daemon.pid) + 150
    resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (limit, limit))
    async with open_client(daemon.paths) as client:
        ids = []
        with trio.fail_after(TIMEOUT), pytest.raises(RequestFailed) as refused:
            while True:
                ids.append((await client.launch(["sleep", "600"], hold=False)).child.id)
        assert refused.value.errno == errno.EMFILE
        why = refused.value.message
        assert why.startswith("cannot start a session: the daemon has ") and "\n" not in why
        assert f"of its {limit} open files in use" in why
        assert 20 < len(ids) < 50  # 150 fds, three a session, 64 kept
        done = await ms(ms_dirs, "new", "-d", "--", "sleep", "600", check=False)
        assert done.returncode == 1
        [line] = done.stderr.decode().splitlines()
        assert line.startswith("multiserver: cannot start a session: the daemon has")
        results = await client.claim(ids)
        try:
            assert all(r.ok and r.master is not None for r in results)
        finally:
            for r in results:
                if r.master is not None:
                    os.close(r.master)


async def test_at_the_limit_new_clients_are_told_in_one_line_and_the_others_served(
    daemon: RunningDaemon, ms_dirs: MsDirs
) -> None:
    soft, hard = resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE)
    async with open_client(daemon.paths) as served:
        for i in range(3):
            await served.launch(["sleep", "600"], name=f"s{i}", hold=False)
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (limit_leaving(daemon.pid, 0), hard))
        before = log_lines(ms_dirs, "refused")
        with trio.fail_after(TIMEOUT), pytest.raises(RequestFailed) as turned_away:
            async with open_client(daemon.paths):
                pass
        assert turned_away.value.errno == errno.EMFILE
        assert "open files in use" in turned_away.value.message
        # The client it has is served.
        assert sorted(c.name for c in await served.list()) == ["s0", "s1", "s2"]
        listing = await ms(ms_dirs, "ls", check=False)
        assert "open files in use" in listing.stderr.decode()
        killed = await ms(ms_dirs, "kill", "s1", check=False)
        assert killed.returncode == 1
        [line] = killed.stderr.decode().splitlines()
        assert "no session named" not in line
        assert "cannot tell whether there is a session named 's1'" in line
        # Idle at the limit, the accept loop waits for a connection: no
        # line a tenth of a second, as it did.
        await wait_until(lambda: log_lines(ms_dirs, "refused") > before, 5, "a refusal logged")
        logged = log_lines(ms_dirs, "refused")
        await trio.sleep(1.5)
        assert log_lines(ms_dirs, "refused") == logged
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (soft, hard))
        killed = await ms(ms_dirs, "kill", "s1")
        assert killed.stderr.decode() == "s1: killed by SIGHUP\n"
        assert sorted(c.name for c in await served.list()) == ["s0", "s2"]
