"""``multiserver ls`` lists local sessions and those of every host, each
host asked at once under its own bound: a host that refuses or never
answers is a line that says why, and the others are listed meanwhile."""

from __future__ import annotations

import json
import socket
import time

from tests.conftest import MsDirs
from tests.remote.conftest import Remote
from tests.remote.test_hosts import remotely, run
from tests.timing import COMMAND_SLACK

OWN = 2.0  # the --timeout of the hosts that never answer


def test_ls_lists_every_host_and_says_which_could_not_be_asked(
    ms_dirs: MsDirs, sshd: Remote
) -> None:
    remotely(sshd, "new", "-d", "-n", "web", "--", "sleep", "1000")
    run(ms_dirs, sshd, "new", "-d", "-n", "here", "--", "sleep", "1000")
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    # A host that refuses connections, and one that accepts and never
    # answers (a listener nobody reads from).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        config = sshd.ssh_config.read_text()
        config += "Host refusing\n  HostName 127.0.0.1\n  Port 1\n"
        config += f"Host silent\n  HostName 127.0.0.1\n  Port {port}\n  ConnectTimeout 60\n"
        sshd.ssh_config.write_text(config)
        for name in ("refusing", "silent"):
            done = run(ms_dirs, sshd, "host", "add", name, "--no-check", "--timeout", str(OWN))
            assert done.returncode == 0, done.stderr

        t0 = time.monotonic()
        listed = run(ms_dirs, sshd, "ls")
        took = time.monotonic() - t0
    assert listed.returncode == 1  # not every host could be listed
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "DAEMON"], listed.stdout
    names = sorted(line.split()[0] for line in lines[1:])
    assert names == ["db1:web", "here"], listed.stdout
    said = listed.stderr.splitlines()
    assert any(s.startswith("multiserver: refusing: ssh failed:") for s in said), said
    assert any(s.startswith(f"multiserver: silent: no answer within {OWN:g} s") for s in said), said
    assert took < OWN + COMMAND_SLACK, took  # the silent host's own bound, not ssh's 60 s

    as_json = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    web = next(s for s in as_json if s.get("host") == "db1")
    assert web["name"] == "web" and web["argv"] == ["sleep", "1000"]
