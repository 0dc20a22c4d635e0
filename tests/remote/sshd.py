"""A real OpenSSH server on 127.0.0.1 for tests and benchmarks (no pytest).

``start_sshd(base, remote_root)`` runs ``sshd -D`` on a free port with a
host key and a user key generated into ``base``; the client side never
reads the user's ``~/.ssh``: ``Remote.ssh_env`` is ``MULTISERVER_SSH=ssh
-F CONFIG`` with a config naming the key, the port and a known_hosts file
holding the generated host key (alias ``remote1``). The "remote"
multiserver is this one, with its own runtime and state dirs under
``remote_root``, given as the host's ``--command``. ``Remote.stop()`` stops
ssh's shared connections, sshd and every connection it forked, by pid.
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
import time
from pathlib import Path

import attrs

from tests.procs import child_pids, cmdlines, is_alive

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
SSH = shutil.which("ssh")
MULTISERVER = str(Path(sys.executable).with_name("multiserver"))


def usable() -> str | None:
    """Why a real sshd cannot run here, or None."""
    if SSHD is None or SSH is None:
        return "OpenSSH is not installed (make test installs openssh-server as root with apt)"
    if os.geteuid() != 0:
        return "sshd needs root here"
    return None


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
    title = f"ssh: {root}/".encode()
    return [pid for pid, cmdline in cmdlines() if cmdline.startswith(title)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


@attrs.define
class Remote:
    """An sshd to reach as ``alias``, and the remote multiserver's command."""

    alias: str
    port: int
    ssh_config: Path
    command: str  # the remote multiserver, with its own dirs
    root: Path  # the remote's dirs live under here
    key: Path
    proc: subprocess.Popen[bytes]
    watched: Path  # ssh's shared connections live under here

    @property
    def ssh_env(self) -> dict[str, str]:
        return {"MULTISERVER_SSH": f"ssh -F {shlex.quote(str(self.ssh_config))}"}

    def stop(self) -> None:
        pids = ssh_masters_under(self.watched) + process_tree(self.proc.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)
        end = time.monotonic() + 5
        while any(is_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.02)


def start_sshd(base: Path, remote_root: Path, watched: Path) -> Remote:
    """sshd on 127.0.0.1 with everything in ``base`` (made 0700); the remote
    multiserver's dirs under ``remote_root``; ``watched``: where clients'
    shared connections will live (stopped with it)."""
    base.mkdir(mode=0o700)
    host_key, user_key = base / "host_key", base / "user_key"
    _keygen(host_key)
    _keygen(user_key)
    authorized = base / "authorized_keys"
    authorized.write_text(user_key.with_suffix(".pub").read_text())
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
    assert SSHD is not None
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    with open(base / "sshd.log", "wb") as log:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log)
    end = time.monotonic() + 10
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if time.monotonic() > end or proc.poll() is not None:
            proc.kill()
            proc.wait(10)
            raise RuntimeError(f"sshd did not start: {(base / 'sshd.log').read_text()}")
        time.sleep(0.02)
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
    (remote_root / "run").mkdir(parents=True, mode=0o700)
    (remote_root / "state").mkdir(mode=0o700)
    command = shlex.join(
        [
            "env",
            f"MULTISERVER_RUNTIME_DIR={remote_root / 'run'}",
            f"MULTISERVER_STATE_DIR={remote_root / 'state'}",
            # Its own hosts file: the test's (the local side's) is not the host's.
            f"MULTISERVER_CONFIG_DIR={remote_root / 'config'}",
            "MULTISERVER_IDLE_EXIT=never",
            MULTISERVER,
        ]
    )
    return Remote("remote1", port, ssh_config, command, remote_root, user_key, proc, watched)
