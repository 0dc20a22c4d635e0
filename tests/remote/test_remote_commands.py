"""new, peek, attach and kill through a host (a real sshd on loopback)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Sequence

import pytest
import trio

from tests.cli.conftest import Terminal, cmdline, session_pids
from tests.conftest import POLL_INTERVAL, MsDirs
from tests.remote.conftest import Remote, ssh_masters_under
from tests.remote.test_hosts import person_ssh_env, run


async def test_a_session_on_a_host_is_made_shown_attached_and_ended(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(
        ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web",
        "--", "sh", "-c", "echo hello-from-db1; exec sh",
    )  # fmt: skip
    assert made.returncode == 0 and made.stdout == "web\n", made.stderr
    (web,) = [s for s in json.loads(run(ms_dirs, sshd, "ls", "--json").stdout) if "host" in s]
    assert (web["host"], web["name"], web["linger"]) == ("db1", "web", 300.0)

    peeked = run(ms_dirs, sshd, "peek", "db1:web")
    assert peeked.returncode == 0 and "hello-from-db1" in peeked.stdout

    term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await term.wait_prompt()
    term.line("multiserver attach db1:web")
    await term.wait_screen("hello-from-db1")
    term.line("echo typed-over-ssh")
    await term.wait_screen("typed-over-ssh\n")
    term.type(b"\x1c")  # the detach key, ^\, read by the remote attach
    await term.wait_screen("detached from web")
    await term.wait_prompt(count=2)
    again = run(ms_dirs, sshd, "peek", "db1:web")
    assert "typed-over-ssh" in again.stdout  # it ran on, with what was typed

    killed = run(ms_dirs, sshd, "kill", "db1:web")
    assert killed.returncode == 0, killed.stderr
    assert not [s for s in json.loads(run(ms_dirs, sshd, "ls", "--json").stdout) if "host" in s]


def test_a_host_that_is_not_configured_is_named(ms_dirs: MsDirs, sshd: Remote) -> None:
    done = run(ms_dirs, sshd, "peek", "nowhere:web")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "multiserver: no host named nowhere (hosts: none: multiserver host add NAME --ssh DEST)"
    )


async def wait_until(check: Callable[[], object], what: str, timeout: float) -> None:
    with trio.move_on_after(timeout):
        while not check():
            await trio.sleep(POLL_INTERVAL * 4)
        return
    pytest.fail(f"not {what} within {timeout} s")


def ssh_clients_in(term: Terminal) -> list[int]:
    """The ssh processes running a remote attach in the person's terminal."""
    return [
        p
        for p in session_pids(term.pid)
        if cmdline(p)[:1] == ["ssh"] and " attach " in f" {cmdline(p)[-1]} "
    ]


async def attached_over_ssh(
    ms_dirs: MsDirs,
    sshd: Remote,
    open_terminal: Callable[..., Terminal],
    command: Sequence[str] = ("sh",),
) -> Terminal:
    """Host db1 added, its session web (``command``: a shell) made, and a
    person's terminal attached to it through ssh."""
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web", "--", *command)
    assert made.returncode == 0, made.stderr
    term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await term.wait_prompt()
    term.line("multiserver attach db1:web")
    await wait_until(lambda: ssh_clients_in(term), "connected", 15)
    return term


async def test_a_dropped_connection_reconnects_and_replays_what_was_missed(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    term = await attached_over_ssh(ms_dirs, sshd, open_terminal)
    # Output that keeps coming while the link is down: numbered lines.
    term.line("i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo tick-$i; sleep 0.1; done")
    await term.wait_screen("tick-3")
    for pid in ssh_clients_in(term):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # the link drops (as a laptop lid closing)
    await term.wait_screen("[reconnecting to db1... in 0.5 s; ^\\ to stop]")
    await term.wait_bytes(b"tick-40")
    # Every line is there: those written while nobody was attached replayed.
    shown = bytes(term.raw).decode(errors="replace")
    assert all(f"tick-{i}\r\n" in shown for i in range(1, 41)), shown[-2000:]
    term.type(b"\x1c")
    await term.wait_screen("detached from web")


async def test_the_detach_key_stops_the_reconnecting(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    term = await attached_over_ssh(ms_dirs, sshd, open_terminal)
    # The host goes away for good: sshd stops taking connections.
    config = sshd.ssh_config.read_text().replace(f"Port {sshd.port}", "Port 1")
    sshd.ssh_config.write_text(config)
    for pid in ssh_masters_under(ms_dirs.root) + ssh_clients_in(term):
        with contextlib.suppress(ProcessLookupError):  # gone with the master
            os.kill(pid, signal.SIGKILL)
    await term.wait_screen("[reconnecting to db1...")
    term.type(b"\x1c")
    await term.wait_screen("[stopped reconnecting to db1; the session runs on there]")
    await term.wait_prompt(count=2)


def test_new_a_through_a_host_makes_it_once(ms_dirs: MsDirs, sshd: Remote) -> None:
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    for _ in range(2):
        made = run(ms_dirs, sshd, "new", "--host", "db1", "-A", "-d", "-n", "web", "--", "sh")
        assert (made.returncode, made.stdout) == (0, "web\n"), made.stderr
    listed = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    assert [s["name"] for s in listed if s.get("host") == "db1"] == ["web"]
