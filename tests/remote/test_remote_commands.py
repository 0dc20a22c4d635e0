"""new, peek, attach and kill through a host (a real sshd on loopback)."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.cli.conftest import Terminal, person_env
from tests.conftest import MsDirs
from tests.remote.conftest import Remote
from tests.remote.test_hosts import run


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

    env = {
        **person_env(ms_dirs),
        **sshd.ssh_env,
        "MULTISERVER_CONFIG_DIR": str(ms_dirs.root / "config"),
    }
    term = open_terminal(env=env)
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
