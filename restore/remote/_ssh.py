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

One logic, two drivers: what a finished ssh run means (``checked``,
``parsed_json``: pure) is the same for the blocking run of the command
line (``run_remote``: a timeout of its own, as it has no cancel scope)
and the restore's run on trio (``run_remote_async``: its caller's cancel
scope bounds it, and kills ssh). A run that did not do its work is a
HostFailure that carries its kind.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from multiserver.internal import ensure_private_dir, from_environment, runtime_dir
from restore.remote._errors import FailureKind, HostFailure
from restore.remote._hosts import Host

CONTROL_PERSIST = 600
# ssh's own exit status for its failures (connection, authentication).
SSH_FAILED = 255
# A remote shell's status for a command it cannot find.
NOT_FOUND = 127
# What ssh says when it is a credential that is missing (its own words:
# the one place they are read, to give the failure its kind).
AUTH_WORDS = ("permission denied", "passphrase", "password", "authentication")

Ran = subprocess.CompletedProcess[bytes]


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


def exit_argv(host: Host) -> list[str]:
    """The ssh command that stops the shared connection ``ssh_argv`` opens
    to ``host`` (``-O exit`` on the same control path)."""
    control = ["-o", f"ControlPath={control_dir()}/%C", "-O", "exit"]
    return [*ssh_command(), *control, "--", host.dest]


def ssh_command() -> list[str]:
    """``ssh``, or ``$MULTISERVER_SSH`` split into words (as git's
    ``GIT_SSH_COMMAND``: e.g. ``ssh -F ~/.ssh/work_config``). Raises
    SettingError (one line) if it does not split (a quote left open)."""
    words = from_environment("ssh")
    assert isinstance(words, list)
    return words or ["ssh"]


def said(done: Ran) -> str:
    """The end of what a run wrote on stderr, on one line."""
    return " ".join(done.stderr.decode(errors="replace").split())[-300:]


def checked(host: Host, done: Ran) -> Ran:
    """``done``, if the remote multiserver ran (whatever its own exit
    status); else the HostFailure that says why not."""
    if done.returncode == SSH_FAILED:
        why = said(done)
        credential = any(w in why.lower() for w in AUTH_WORDS)
        kind: FailureKind = "credential" if credential else "unreachable"
        raise HostFailure(host.name, kind, f"{host.name}: ssh failed: {why or 'no reason given'}")
    if done.returncode == NOT_FOUND:
        raise HostFailure(
            host.name,
            "missing",
            f"{host.name}: {host.command!r} was not found there: install multiserver on"
            f" {host.dest} (e.g. `pipx install multiserver`) or give its path with --command",
        )
    return done


def succeeded(host: Host, done: Ran) -> Ran:
    """``done``, if the remote command also succeeded; else HostFailure
    (``error``) with what it said."""
    if done.returncode != 0:
        raise HostFailure(
            host.name, "error", f"{host.name}: {said(done) or f'exit status {done.returncode}'}"
        )
    return done


def parsed_json(host: Host, done: Ran) -> object:
    """What a command that prints JSON printed; HostFailure if it failed
    (``error``) or printed anything else (``garbage``)."""
    try:
        return json.loads(succeeded(host, done).stdout)
    except ValueError:
        shown = done.stdout[:60].decode(errors="replace")
        raise HostFailure(
            host.name, "garbage", f"{host.name}: answered something that is not JSON: {shown!r}"
        ) from None


def _no_ssh(host: Host) -> HostFailure:
    return HostFailure(host.name, "unreachable", "ssh is not installed (not on PATH)")


def run_remote(
    host: Host,
    remote: Sequence[str],
    *,
    batch: bool = True,
    timeout: float | None = None,
    input: bytes | None = None,
) -> Ran:
    """Run ``host``'s multiserver with ``remote``, blocking; its output.
    HostFailure if ssh cannot run it (``checked``) or it takes longer than
    ``timeout`` (``silent``; by default the host's own, ``host add
    --timeout``: there is no other bound to fall back on)."""
    if timeout is None:
        timeout = host.timeout
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
        raise _no_ssh(host) from exc
    except subprocess.TimeoutExpired as exc:
        raise HostFailure(
            host.name, "silent", f"{host.name}: no answer within {timeout:g} s"
        ) from exc
    return checked(host, done)


def remote_json(host: Host, remote: Sequence[str], **kw: object) -> object:
    """``run_remote`` of a command that prints JSON; what it printed."""
    return parsed_json(host, run_remote(host, remote, **kw))  # type: ignore[arg-type]


async def run_remote_async(host: Host, remote: Sequence[str]) -> Ran:
    """``run_remote`` on trio, in batch mode, with no bound of its own.

    Cancellation: ssh is killed (trio's ``run_process``); nothing else is
    left behind.
    """
    import trio

    try:
        done = await trio.run_process(
            ssh_argv(host, remote), stdin=b"", capture_stdout=True, capture_stderr=True, check=False
        )
    except FileNotFoundError as exc:
        raise _no_ssh(host) from exc
    return checked(host, done)


async def remote_json_async(host: Host, remote: Sequence[str]) -> object:
    """``remote_json`` on trio (``run_remote_async``)."""
    return parsed_json(host, await run_remote_async(host, remote))
