"""The remote side, started through ssh, runs the installed code: the
host's command runs in a directory holding hostile packages named as
ours (``tests.reliability._hostile_cwd``), as a login there might land in
a clone of this project."""

from __future__ import annotations

import json
import shlex

from tests.conftest import MsDirs, daemon_pids_under
from tests.reliability._hostile_cwd import cwd_of, make_hostile_dir, markers
from tests.remote.conftest import Remote
from tests.remote.test_hosts import run


def test_a_host_run_from_a_hostile_directory_imports_nothing_from_it(
    ms_dirs: MsDirs, sshd: Remote
) -> None:
    evil = make_hostile_dir(ms_dirs.root)
    command = f"cd {shlex.quote(str(evil))} && exec {sshd.command}"
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", command)
    assert added.returncode == 0, added.stderr
    made = run(
        ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web",
        "--", "sh", "-c", "echo hello-from-db1; exec sleep 300",
    )  # fmt: skip
    assert made.returncode == 0 and made.stdout == "web\n", made.stderr
    listed = [s for s in json.loads(run(ms_dirs, sshd, "ls", "--json").stdout) if "host" in s]
    assert [(s["host"], s["name"]) for s in listed] == [("db1", "web")]
    assert "hello-from-db1" in run(ms_dirs, sshd, "peek", "db1:web").stdout

    (daemon,) = daemon_pids_under(ms_dirs.root / "remote")
    assert cwd_of(daemon) == "/"
    assert markers(ms_dirs.root) == []
