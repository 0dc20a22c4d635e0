"""A real OpenSSH server on 127.0.0.1, and a "remote" multiserver behind it.

``sshd`` from the distribution runs in the foreground (``-D``) on a free
port with a host key and a user key generated for the test, everything in
the test's private dir; it is stopped by its pid. The client side never
reads the user's ``~/.ssh``: ``$MULTISERVER_SSH`` is ``ssh -F CONFIG``
with a config naming the key, the port and a known_hosts file that holds
the generated host key. The "remote" multiserver is this one, with its own
runtime and state dirs, given as the host's ``--command``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.cli.conftest import open_terminal  # noqa: F401 - the person's terminal, a fixture
from tests.conftest import (
    MsDirs,
    child_pids,
    daemon_pids_under,
    is_alive,
    stop_daemon_sync,
    wait_until_sync,
)

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
SSH = shutil.which("ssh")
MULTISERVER = str(Path(sys.executable).with_name("multiserver"))

needs_sshd = pytest.mark.skipif(
    SSHD is None or SSH is None or os.geteuid() != 0,
    reason="needs OpenSSH (sshd, ssh; make test installs openssh-server where it runs as"
    " root with apt) and root to run sshd",
)


def process_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(child_pids(p))
    return out


def ssh_masters_under(root: Path) -> list[int]:
    """ssh's ControlMaster processes whose socket is under ``root`` (they
    name it in their title: ``ssh: PATH [mux]``)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                title = f.read()
        except OSError:
            continue
        if title.startswith(f"ssh: {root}/".encode()):
            found.append(int(name))
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@attrs.frozen
class Remote:
    """An sshd to reach as ``alias``, and the remote multiserver's command."""

    alias: str
    port: int
    ssh_config: Path
    command: str  # the remote multiserver, with its own dirs
    root: Path  # the remote's dirs live under here
    key: Path

    @property
    def ssh_env(self) -> dict[str, str]:
        return {"MULTISERVER_SSH": f"ssh -F {shlex.quote(str(self.ssh_config))}"}


def _keygen(path: Path, kind: str = "ed25519", passphrase: str = "") -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


@pytest.fixture
def sshd(ms_dirs: MsDirs) -> Iterator[Remote]:
    if SSHD is None or SSH is None or os.geteuid() != 0:
        pytest.skip("needs sshd, ssh and root")
    base = ms_dirs.root / "ssh"
    base.mkdir(mode=0o700)
    host_key, user_key = base / "host_key", base / "user_key"
    _keygen(host_key)
    _keygen(user_key)
    authorized = base / "authorized_keys"
    authorized.write_text((user_key.with_suffix(".pub")).read_text())
    authorized.chmod(0o600)
    port = free_port()
    config = base / "sshd_config"
    config.write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}",
                "PidFile none",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "LogLevel ERROR",
                "MaxStartups 100",
                "MaxSessions 100",
            ]
        )
        + "\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=open(base / "sshd.log", "wb"),  # noqa: SIM115 - the child keeps it
    )
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        assert wait_until_sync(listening, 10.0), (base / "sshd.log").read_text()
        known = base / "known_hosts"
        pub = host_key.with_suffix(".pub").read_text().split()
        known.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
        ssh_config = base / "ssh_config"
        ssh_config.write_text(
            "\n".join(
                [
                    "Host remote1",
                    "  HostName 127.0.0.1",
                    f"  Port {port}",
                    "  User root",
                    f"  IdentityFile {user_key}",
                    "  IdentitiesOnly yes",
                    f"  UserKnownHostsFile {known}",
                    "  StrictHostKeyChecking yes",
                    "  ConnectTimeout 10",
                ]
            )
            + "\n"
        )
        remote_root = ms_dirs.root / "remote"
        (remote_root / "run").mkdir(parents=True, mode=0o700)
        (remote_root / "state").mkdir(mode=0o700)
        command = shlex.join(
            [
                "env",
                f"MULTISERVER_RUNTIME_DIR={remote_root / 'run'}",
                f"MULTISERVER_STATE_DIR={remote_root / 'state'}",
                "MULTISERVER_IDLE_EXIT=never",
                MULTISERVER,
            ]
        )
        yield Remote("remote1", port, ssh_config, command, remote_root, user_key)
    finally:
        # ssh's shared connections (ControlPersist masters), then sshd and
        # every connection it forked, all by pid.
        pids = ssh_masters_under(ms_dirs.root) + process_tree(proc.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)
        wait_until_sync(lambda: not any(is_alive(p) for p in pids), 5.0)
        # The remote daemons (under remote_root: ms_dirs' teardown finds
        # them too; here first, while sshd's children are gone).
        for pid in daemon_pids_under(ms_dirs.root / "remote"):
            stop_daemon_sync(pid)
