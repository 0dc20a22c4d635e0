"""``multiserver host add | ls | rm`` against a real sshd, and the host
file's rules."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from multiserver_cli._names import split_target
from restore import Host, HostsFileError, load_hosts, save_hosts
from tests.cli.conftest import person_env
from tests.conftest import MsDirs
from tests.remote.conftest import MULTISERVER, Remote


def run(ms_dirs: MsDirs, remote: Remote | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**person_env(ms_dirs), "MULTISERVER_CONFIG_DIR": str(ms_dirs.root / "config")}
    if remote is not None:
        env.update(remote.ssh_env)
    return subprocess.run(
        [MULTISERVER, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def remotely(sshd: Remote, *args: str) -> None:
    """The remote multiserver run directly (as a person logged in there)."""
    subprocess.run(
        ["sh", "-c", f"{sshd.command} " + " ".join(args)],
        check=True,
        capture_output=True,
        timeout=60,
    )


def person_ssh_env(ms_dirs: MsDirs, sshd: Remote) -> dict[str, str]:
    """A person's terminal here, with this test's ssh and hosts file."""
    return {
        **person_env(ms_dirs),
        **sshd.ssh_env,
        "MULTISERVER_CONFIG_DIR": str(ms_dirs.root / "config"),
    }


def test_a_host_is_added_when_its_multiserver_answers(ms_dirs: MsDirs, sshd: Remote) -> None:
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    assert added.stderr.startswith("added db1 (remote1, multiserver 0.1.0, grace 300 s)")
    listed = run(ms_dirs, sshd, "host", "ls", "--json")
    (entry,) = json.loads(listed.stdout)
    assert entry == {
        "name": "db1",
        "dest": "remote1",
        "command": sshd.command,
        "grace": 300.0,
        "needs_credential": False,
        "timeout": 15.0,
    }
    again = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", "x")
    assert again.returncode == 1 and "exists already" in again.stderr
    removed = run(ms_dirs, sshd, "host", "rm", "db1")
    assert removed.returncode == 0 and "no hosts" in run(ms_dirs, sshd, "host", "ls").stderr


def test_a_host_without_multiserver_says_what_to_install(ms_dirs: MsDirs, sshd: Remote) -> None:
    missing = run(
        ms_dirs, sshd, "host", "add", "db2", "--ssh", sshd.alias, "--command", "/nowhere/ms"
    )
    assert missing.returncode == 1
    (line,) = missing.stderr.splitlines()
    assert "was not found there: install multiserver on remote1" in line
    assert not (ms_dirs.root / "config" / "hosts.json").exists()


def test_a_remote_answering_garbage_is_one_line(ms_dirs: MsDirs, sshd: Remote) -> None:
    garbage = run(ms_dirs, sshd, "host", "add", "db3", "--ssh", sshd.alias, "--command", "echo")
    assert garbage.returncode == 1
    (line,) = garbage.stderr.splitlines()
    assert "db3: answered something that is not JSON: 'version --json" in line


def test_an_unreachable_host_fails_at_once(ms_dirs: MsDirs, sshd: Remote) -> None:
    config = sshd.ssh_config.read_text().replace(f"Port {sshd.port}", "Port 1")
    sshd.ssh_config.write_text(config)
    refused = run(ms_dirs, sshd, "host", "add", "db4", "--ssh", sshd.alias)
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert line.startswith("multiserver: db4: ssh failed:") and "refused" in line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--", "-oProxyCommand=x"], "bad host name"),
        (["ok", "--ssh=-oProxyCommand=touch /tmp/pwned"], "must not start with '-'"),
        (["ok", "--ssh", "a b"], "no spaces"),
        (["ok", "--grace", "5"], "--grace 5: must be between 60 and 3600 seconds, or none"),
        (["ok", "--grace", "soon"], "--grace soon: must be between 60 and 3600 seconds, or none"),
        (["a:b"], "bad host name"),
    ],
)
def test_bad_host_words_are_refused_before_ssh_runs(
    ms_dirs: MsDirs, args: list[str], said: str
) -> None:
    done = run(ms_dirs, None, "host", "add", *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_the_hosts_file_round_trips_and_a_damaged_one_is_said(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "hosts.json"
    hosts = {"a": Host("a", "me@a"), "b": Host("b", "b", "/opt/ms", None, True)}
    save_hosts(hosts, path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert load_hosts(path) == hosts
    path.write_text('{"hosts": [{"name": "-x", "dest": "y"}]}')
    with pytest.raises(HostsFileError, match="damaged"):
        load_hosts(path)
    path.write_text("{")
    with pytest.raises(HostsFileError, match="cannot read the hosts file"):
        load_hosts(path)
    assert path.read_text() == "{"  # never rewritten by a read
    assert load_hosts(tmp_path / "none.json") == {}
    os.chmod(path, 0o600)


def test_targets_split_at_the_first_colon() -> None:
    assert split_target("db1:web") == ("db1", "web")
    assert split_target("web") == (None, "web")
