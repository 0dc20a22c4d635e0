"""Running the remote multiserver through OpenSSH.

Every call is ``ssh [options] -- DEST 'COMMAND ARG...'`` (``ssh`` is
``$MULTISERVER_SSH`` when set): the user's ssh,
with their config, agent, jump hosts and known_hosts; ``--`` before the
destination (which ``_hosts`` already refuses to start with ``-``), and
every argument quoted for the remote shell. One connection per host is
shared (``ControlMaster=auto``, its socket in the runtime dir, kept
``CONTROL_PERSIST`` seconds after the last use), so the second command to
a host costs a round trip, not a handshake. ``BatchMode=yes`` unless a
person is there to type a passphrase: a host that needs one fails at
once rather than waiting on a prompt nobody sees.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import attrs

from multiserver import ensure_private_dir, runtime_dir
from multiserver_cli._errors import CliError
from multiserver_cli._hosts import Host

CONTROL_PERSIST = 600
# ssh's own exit status for its failures (connection, authentication).
SSH_FAILED = 255
# A remote shell's status for a command it cannot find.
NOT_FOUND = 127
# How long a remote command may take (connecting included).
REMOTE_TIMEOUT = 15.0
AUTH_WORDS = ("permission denied", "passphrase", "password", "authentication")


def control_dir() -> Path:
    return ensure_private_dir(runtime_dir() / "multiserver-ssh")


def ssh_argv(
    host: Host, remote: Sequence[str], *, tty: bool = False, batch: bool = True
) -> list[str]:
    """The ssh command that runs ``host``'s multiserver with ``remote``."""
    options = [
        "-o", "ControlMaster=auto",
        "-o", f"ControlPath={control_dir()}/%C",
        "-o", f"ControlPersist={CONTROL_PERSIST}",
        "-o", "ServerAliveInterval=15",
    ]  # fmt: skip
    if batch:
        options += ["-o", "BatchMode=yes"]
    options.append("-tt" if tty else "-T")
    line = f"{host.command} {shlex.join(remote)}" if remote else host.command
    return [*ssh_command(), *options, "--", host.dest, line]


def ssh_command() -> list[str]:
    """``ssh``, or ``$MULTISERVER_SSH`` split into words (as git's
    ``GIT_SSH_COMMAND``: e.g. ``ssh -F ~/.ssh/work_config``)."""
    return shlex.split(os.environ.get("MULTISERVER_SSH", "")) or ["ssh"]


@attrs.frozen
class RemoteFailure:
    """Why a remote command did not run: one line, and whether a credential
    is what was missing."""

    message: str
    needs_credential: bool = False


def failure(host: Host, done: subprocess.CompletedProcess[bytes]) -> RemoteFailure | None:
    """What went wrong with a finished ssh run, or None if the remote
    multiserver ran (whatever its own exit status)."""
    said = " ".join(done.stderr.decode(errors="replace").split())[-300:]
    if done.returncode == SSH_FAILED:
        credential = any(w in said.lower() for w in AUTH_WORDS)
        return RemoteFailure(f"{host.name}: ssh failed: {said or 'no reason given'}", credential)
    if done.returncode == NOT_FOUND:
        return RemoteFailure(
            f"{host.name}: {host.command!r} was not found there: install multiserver on"
            f" {host.dest} (e.g. `pipx install multiserver`) or give its path with --command"
        )
    return None


def run_remote(
    host: Host,
    remote: Sequence[str],
    *,
    batch: bool = True,
    timeout: float = REMOTE_TIMEOUT,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``host``'s multiserver with ``remote``; its output. CliError (one
    line) if ssh cannot run it or it takes longer than ``timeout``."""
    argv = ssh_argv(host, remote, batch=batch)
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=timeout,
            check=False,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise CliError("ssh is not installed (not on PATH)") from exc
    except subprocess.TimeoutExpired as exc:
        raise CliError(f"{host.name}: no answer within {timeout:g} s") from exc
    bad = failure(host, done)
    if bad is not None:
        raise CliError(bad.message)
    return done


def remote_json(host: Host, remote: Sequence[str], **kw: object) -> object:
    """``run_remote`` of a command that prints JSON; CliError if it failed
    or printed anything else."""
    done = run_remote(host, remote, **kw)  # type: ignore[arg-type]
    if done.returncode != 0:
        said = " ".join(done.stderr.decode(errors="replace").split())[-300:]
        raise CliError(f"{host.name}: {said or f'exit status {done.returncode}'}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        shown = done.stdout[:60].decode(errors="replace")
        raise CliError(f"{host.name}: answered something that is not JSON: {shown!r}") from None
