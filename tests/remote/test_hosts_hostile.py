"""A hosts file and hosts that say what they should not (issue 23): each
is one line on stderr, never a traceback; one bad host is its own line,
the others are listed; a host is waited for as long as it was told."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from restore import Host, HostsFileError, load_hosts, save_hosts
from restore.remote._hosts import TIMEOUT_DEFAULT
from restore.remote._listing import SCHEMA, read_listing
from restore.remote._restore import remember_credential
from tests.conftest import MsDirs
from tests.remote.conftest import Remote
from tests.remote.test_hosts import remotely, run
from tests.restore.remote.test_listing import VERSION_0
from tests.timing import COMMAND_SLACK


def hosts_file(ms_dirs: MsDirs) -> Path:
    """The hosts file of ``run``'s commands (and of this process's, for
    the tests that call the library: never the user's own)."""
    path = ms_dirs.root / "config" / "hosts.json"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    return path


@pytest.mark.parametrize("command", [["ls"], ["host", "ls"], ["host", "ls", "--json"]])
def test_a_hosts_file_of_strings_is_one_line(ms_dirs: MsDirs, command: list[str]) -> None:
    hosts_file(ms_dirs).write_text('{"hosts": ["x"]}')
    done = run(ms_dirs, None, *command)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("multiserver: the hosts file "), line
    assert "is damaged (an entry is not a host: 'x'); fix or move it" in line, line
    assert hosts_file(ms_dirs).read_text() == '{"hosts": ["x"]}'  # a read never rewrites it


@pytest.mark.parametrize("grace", ["-5", "NaN", "1e308", "0", "true", '"300"'])
def test_a_tampered_grace_is_refused_at_load_naming_host_and_field(
    tmp_path: Path, grace: str
) -> None:
    path = tmp_path / "hosts.json"
    path.write_text(f'{{"hosts": [{{"name": "db1", "dest": "db1", "grace": {grace}}}]}}')
    with pytest.raises(HostsFileError) as caught:
        load_hosts(path)
    said = str(caught.value)
    assert "\n" not in said
    assert "is damaged (host db1: grace " in said, said
    assert "is not 60-3600 seconds or null); fix or move it" in said, said


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", "-1"), ("timeout", "NaN"), ("needs_credential", '"no"'), ("dest", "5")],
)
def test_other_tampered_fields_are_refused_at_load(tmp_path: Path, field: str, value: str) -> None:
    path = tmp_path / "hosts.json"
    entry = f'{{"name": "db1", "dest": "db1", "{field}": {value}}}'
    path.write_text(f'{{"hosts": [{entry}]}}')
    with pytest.raises(HostsFileError, match=f"host db1: {field} "):
        load_hosts(path)


def test_the_hosts_file_still_takes_what_save_hosts_writes(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    hosts = {
        "a": Host("a", "me@a", grace=60.0, timeout=0.5),
        "b": Host("b", "b", "/opt/ms", None, True, 600.0),
        "c": Host("c", "c", grace=3600),
    }
    save_hosts(hosts, path)
    assert load_hosts(path) == hosts


def test_a_credential_is_remembered_for_the_destination_that_asked(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore that found db1 asking for a credential at its old
    destination, while the person gave it a new one, leaves the new one
    alone: else every later login would defer it."""
    monkeypatch.setenv("MULTISERVER_CONFIG_DIR", str(hosts_file(ms_dirs).parent))
    save_hosts({"db1": Host("db1", "new.example")})
    remember_credential(Host("db1", "old.example"))
    assert load_hosts()["db1"].needs_credential is False
    remember_credential(Host("db1", "new.example"))
    assert load_hosts(hosts_file(ms_dirs))["db1"].needs_credential is True


def test_a_new_destination_clears_the_credential_flag(ms_dirs: MsDirs) -> None:
    path = hosts_file(ms_dirs)
    save_hosts({"db1": Host("db1", "old.example", needs_credential=True)}, path)
    done = run(
        ms_dirs, None, "host", "add", "db1", "--ssh", "new.example", "--replace", "--no-check"
    )
    assert done.returncode == 0, done.stderr
    assert load_hosts(path)["db1"] == Host("db1", "new.example")


def test_one_host_answering_rows_without_a_name_is_its_own_line(
    ms_dirs: MsDirs, sshd: Remote
) -> None:
    remotely(sshd, "new", "-d", "-n", "web", "--", "sleep", "1000")
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    # A "multiserver" there whose ls --json rows have no name.
    nameless = ms_dirs.root / "nameless-ms"
    nameless.write_text('#!/bin/sh\necho \'[{"id": 1, "pid": 2}]\'\n')
    nameless.chmod(0o755)
    done = run(
        ms_dirs, sshd, "host", "add", "bad", "--ssh", sshd.alias, "--command", str(nameless),
        "--no-check",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    listed = run(ms_dirs, sshd, "ls")
    assert listed.returncode == 1, listed.stderr
    (line,) = listed.stderr.splitlines()
    assert line == "multiserver: bad: answered garbage (ls --json row 0: no name)", line
    assert [row.split()[0] for row in listed.stdout.splitlines()[1:]] == ["db1:web"], listed.stdout


def _answering(ms_dirs: MsDirs, sshd: Remote, name: str, listing: str) -> None:
    """Host ``name``, whose "multiserver" answers ``listing`` whatever it
    is asked."""
    (ms_dirs.root / f"{name}.json").write_text(listing)
    command = ms_dirs.root / f"{name}-ms"
    command.write_text(f"#!/bin/sh\ncat {ms_dirs.root / f'{name}.json'}\n")
    command.chmod(0o755)
    added = run(
        ms_dirs, sshd, "host", "add", name, "--ssh", sshd.alias, "--command", str(command),
        "--no-check",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr


def test_an_older_host_is_listed_and_a_newer_one_is_one_line(ms_dirs: MsDirs, sshd: Remote) -> None:
    """A host whose multiserver prints the listing without a schema (as
    every one did before it) is read as version 0; one of a newer schema
    is its own line, saying what to do, and the others are listed."""
    _answering(ms_dirs, sshd, "old", VERSION_0)
    _answering(ms_dirs, sshd, "new", '[{"schema": 99, "name": "web", "id": "a new meaning"}]')

    listed = run(ms_dirs, sshd, "ls")
    assert listed.returncode == 1, listed.stderr
    (line,) = listed.stderr.splitlines()
    assert line == (
        'multiserver: new: ls --json row 0 ("web") is of schema 99, newer than this'
        f" multiserver reads (0 to {SCHEMA}): upgrade multiserver here"
    ), line
    # Its running sessions (saved ones with no program are not for ls here).
    names = [row.split()[0] for row in listed.stdout.splitlines()[1:]]
    assert names == ["old:one", "old:one-late", "old:five", "old:web"], listed.stdout

    as_json = run(ms_dirs, sshd, "ls", "--json")
    rows = read_listing(as_json.stdout)
    assert [(r.name, r.host) for r in rows] == [
        ("one", "old"),
        ("one-late", "old"),
        ("five", "old"),
        ("web", "old"),
    ]
    assert all(r["schema"] == SCHEMA for r in json.loads(as_json.stdout))


def test_host_add_waits_for_its_own_timeout(ms_dirs: MsDirs, sshd: Remote) -> None:
    """``host add --timeout 2`` of a host that accepts and never answers
    gives up after 2 s, not after the default 15."""
    own = 2.0
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        config = sshd.ssh_config.read_text()
        config += f"Host silent\n  HostName 127.0.0.1\n  Port {port}\n  ConnectTimeout 60\n"
        sshd.ssh_config.write_text(config)
        t0 = time.monotonic()
        done = run(ms_dirs, sshd, "host", "add", "silent", "--timeout", str(own))
        took = time.monotonic() - t0
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line == f"multiserver: silent: no answer within {own:g} s", line
    # Its own 2 s and the command's start-up: less than the default's 15 s,
    # which a host add that ignored its --timeout would wait.
    assert took < min(own + COMMAND_SLACK, TIMEOUT_DEFAULT), took
