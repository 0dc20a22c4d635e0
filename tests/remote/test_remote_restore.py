"""restore with five hosts at once (issue 16): one eager, one deferred (a
key with a passphrase and no agent), one refusing connections, one that
accepts and never answers, and one whose session expired there."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable

import attrs

from restore import ArrangementStore, RestorationRef, SessionLeaf
from restore._plan import RELAUNCH_MARKER
from tests.cli.conftest import Terminal
from tests.conftest import MsDirs, daemon_pids_under, kill_children_of, wait_until_sync
from tests.remote.conftest import Remote
from tests.remote.test_hosts import person_ssh_env, remotely, run
from tests.remote.test_late_host import saved_there
from tests.timing import TIMER_SLACK, restore_command_bound

DEADLINE = 5.0  # the restore's --timeout
SILENT = 2.0  # the silent host's own --timeout


def add_locked_host(ms_dirs: MsDirs, sshd: Remote, passphrase: str) -> None:
    """ssh alias ``locked``: the same sshd through a key with a passphrase,
    and no agent, so BatchMode cannot use it. Named localhost, so that it
    gets a connection of its own, not another host's (ssh shares one per
    host, port and user)."""
    key = ms_dirs.root / "ssh" / "locked_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(key)],
        check=True,
        timeout=30,
    )
    authorized = ms_dirs.root / "ssh" / "authorized_keys"
    authorized.write_text(authorized.read_text() + key.with_suffix(".pub").read_text())
    known = ms_dirs.root / "ssh" / "known_hosts"
    known.write_text(known.read_text() + known.read_text().replace("127.0.0.1", "localhost"))
    sshd.ssh_config.write_text(
        sshd.ssh_config.read_text()
        + f"Host locked\n  HostName localhost\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {key}\n  IdentitiesOnly yes\n  IdentityAgent none\n"
        f"  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n"
    )


def ssh_clients_of(dest: str) -> list[int]:
    """The ssh clients (not shared connections) running for ``dest``."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"ssh" and b"--" in argv and dest.encode() in argv:
            found.append(int(name))
    return found


def saved(ms_dirs: MsDirs) -> dict[str, SessionLeaf]:
    with ArrangementStore.open() as store:
        return {leaf.name: leaf for leaf in store.load().leaves()}


def test_restore_with_five_hosts_at_once(ms_dirs: MsDirs, sshd: Remote) -> None:
    add_locked_host(ms_dirs, sshd, "a passphrase")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        config = sshd.ssh_config.read_text()
        config += (
            "Host refusing\n  HostName 127.0.0.1\n  Port 1\n"
            f"Host silent\n  HostName 127.0.0.1\n  Port {silent.getsockname()[1]}\n"
            "  ConnectTimeout 60\n"
        )
        sshd.ssh_config.write_text(config)
        for name, dest, extra in [
            ("eager", sshd.alias, []),
            ("expiring", sshd.alias, []),
            ("deferred", "locked", ["--no-check"]),
            ("refusing", "refusing", ["--no-check"]),
            ("silent", "silent", ["--no-check", "--timeout", str(SILENT)]),
        ]:
            added = run(
                ms_dirs, sshd, "host", "add", name, "--ssh", dest,
                "--command", sshd.command, *extra,
            )  # fmt: skip
            assert added.returncode == 0, added.stderr

        # Sessions made through the eager host and the one that will expire
        # are saved here as HOST:NAME.
        for target, name in [("eager", "web"), ("expiring", "job")]:
            made = run(ms_dirs, sshd, "new", "--host", target, "-d", "-n", name, "--", "sh")
            assert made.returncode == 0, made.stderr
        assert {"eager:web", "expiring:job"} <= set(saved(ms_dirs))
        # The others were saved by an earlier login (their hosts were up).
        ref = RestorationRef("/run/remote.sock", "0" * 32, 1, 1)
        with ArrangementStore.open() as store:
            for host in ("deferred", "refusing", "silent"):
                store.add_session(SessionLeaf(f"{host}:s", ["sh"], "/", ref=ref, host=host))
        # A local session too, its daemon and child gone (a reboot here).
        assert run(ms_dirs, sshd, "new", "-d", "-n", "here", "--", "sleep", "1000").returncode == 0
        for pid in daemon_pids_under(ms_dirs.runtime):
            kill_children_of(pid)
            os.kill(pid, signal.SIGKILL)
        assert wait_until_sync(lambda: not daemon_pids_under(ms_dirs.runtime), 5.0)
        # The job expired there: its grace window elapsed (killed there).
        remotely(sshd, "kill", "job")

        # The silent host's question runs on after its own 2 s, until the
        # restore's deadline (an answer by then would go to the adopter).
        t0 = time.monotonic()
        done = run(ms_dirs, sshd, "restore", "--json", "--timeout", str(DEADLINE))
        took = time.monotonic() - t0
    out = json.loads(done.stdout)
    rows = {r["name"]: r for r in out["sessions"]}
    outcomes = {name: r["outcome"] for name, r in rows.items()}
    assert outcomes == {
        "here": "relaunched",
        "eager:web": "attached",
        "expiring:job": "relaunched",
        "deferred:s": "deferred",
        "refusing:s": "failed",
        "silent:s": "timed-out",
    }, out
    assert done.returncode == 1  # one failed: the refusing host
    assert "`multiserver attach deferred:s` brings it back" in rows["deferred:s"]["detail"]
    assert "ssh failed" in rows["refusing:s"]["detail"]
    # A refusal is an answer: never waited on until the deadline (ssh's
    # start-up on a busy machine took up to 1.2 s).
    assert rows["refusing:s"]["seconds"] < DEADLINE
    # Its own 2 s, not ssh's 60, nor the deadline.
    assert SILENT <= rows["silent:s"]["seconds"] < SILENT + TIMER_SLACK
    # The local one never waited for the hosts, asked until the deadline
    # (starting its daemon on a busy machine took up to 2.6 s).
    assert rows["here"]["seconds"] < DEADLINE
    # The restore returns at its deadline, not before (the silent host is
    # asked until then) nor after; the command exits after its sweep.
    assert DEADLINE <= out["seconds"] < DEADLINE + TIMER_SLACK
    assert DEADLINE <= took < restore_command_bound(DEADLINE)  # not ssh's 60 s
    assert not [r for r in out["sweep"] if r["state"] == "late"]  # it never answered
    assert not ssh_clients_of("silent")  # killed and reaped by the restore

    # The expired one runs there again, its marker waiting for its first attach.
    listed = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    assert any(s.get("host") == "expiring" and s["name"] == "job" for s in listed)
    job_there = saved_there(sshd, "job")  # where the screen it shows first is kept
    assert job_there is not None and job_there.notice is not None
    assert RELAUNCH_MARKER.encode() in job_there.notice
    # The deferred host is remembered as one that needs a credential.
    hosts = json.loads(run(ms_dirs, sshd, "host", "ls", "--json").stdout)
    assert [h["needs_credential"] for h in hosts if h["name"] == "deferred"] == [True]


async def test_a_deferred_session_comes_back_at_its_first_attach(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    """Login deferred it (its key has a passphrase, no agent); the person
    attaches, types the passphrase at ssh's prompt, and the session, gone
    there meanwhile, is started again with its marker shown first."""
    add_locked_host(ms_dirs, sshd, "open sesame")
    added = run(
        ms_dirs, sshd, "host", "add", "db9", "--ssh", "locked", "--command", sshd.command,
        "--no-check",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    ref = RestorationRef("/run/remote.sock", "0" * 32, 1, 1)
    with ArrangementStore.open() as store:
        store.add_session(SessionLeaf("db9:job", ["sh"], str(ms_dirs.root), ref=ref, host="db9"))
    login = json.loads(run(ms_dirs, sshd, "restore", "--json").stdout)
    assert [r["outcome"] for r in login["sessions"]] == ["deferred"]

    term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await term.wait_prompt()
    term.line("multiserver attach db9:job")
    await term.wait_screen("Enter passphrase for key")
    term.line("open sesame")
    await term.wait_screen(RELAUNCH_MARKER[:40])
    await term.wait_screen("gone from its host")
    term.line("echo back-on-$((40+2))")
    await term.wait_screen("back-on-42")
    term.type(b"\x1c")
    await term.wait_screen("detached from job")
    assert saved(ms_dirs)["db9:job"].notice is None  # shown once, then cleared


def test_a_relaunch_whose_record_was_lost_is_the_session_not_a_second_one(
    ms_dirs: MsDirs, sshd: Remote
) -> None:
    """A restore started db1:web again there and died (or its store failed)
    before it saved the new child: the saved ref is stale, and the host has
    a session of that name. The next restore takes it as the session (its
    ref saved), starts nothing, and attach reaches it."""
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web", "--", "sh")
    assert made.returncode == 0, made.stderr
    real = saved(ms_dirs)["db1:web"].ref
    assert real is not None
    stale = RestorationRef(real.socket, "0" * 32, real.child_id + 7, 1)
    with ArrangementStore.open() as store:
        store.update_session(attrs.evolve(saved(ms_dirs)["db1:web"], ref=stale))

    done = run(ms_dirs, sshd, "restore", "--json", "--timeout", "10")
    (row,) = json.loads(done.stdout)["sessions"]
    assert (row["outcome"], done.returncode) == ("attached", 0), row
    assert "(not the saved child: web there is taken as it)" in row["detail"]
    assert saved(ms_dirs)["db1:web"].ref == real  # follows the child there
    listed = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    assert [s["name"] for s in listed if s.get("host") == "db1"] == ["web"]  # not twice
