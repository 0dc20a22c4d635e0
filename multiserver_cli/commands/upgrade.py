"""``multiserver upgrade``: every running daemon of this user (``--daemon
N``: that one) replaces its code with the installed one, in place: the same
pid, socket, sessions and connections (``multiserver/daemon/_upgrade.py``).
``--host H`` runs the host's own ``multiserver upgrade`` through ssh.

One line per daemon, from which version to which and how long it served
nobody; a daemon that refused says why (its sessions are as they were),
and the status is 1."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

NAME = "upgrade"
HELP = "have every running daemon take the installed code, in place, keeping every session"
EXAMPLE = "multiserver upgrade   # after pip install -U multiserver"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument("--host", metavar="H", help="upgrade the daemons of host H (through ssh)")


def run(args: Namespace) -> int:
    if args.host is not None:
        return _upgrade_there(args.host)
    from multiserver import DaemonPaths
    from multiserver.internal import find_sockets
    from multiserver_cli._args import only_daemon

    number = only_daemon(args)
    sockets = find_sockets() if number is None else [DaemonPaths.for_number(number).socket]
    if not sockets:
        print("no daemon running: nothing to upgrade", file=sys.stderr)
        return 0
    status = 0
    for socket in sockets:
        line, ok = upgrade_one(socket, explicit=number is not None)
        if line:
            print(line, file=sys.stdout if ok else sys.stderr, flush=True)
        status |= 0 if ok else 1
    return status


# An upgrade waits for the new code to start and answer: its check run
# (the installed code's imports, about 0.3 s) and its exec.
UPGRADE_TIMEOUT = 60.0


def upgrade_one(socket: Path, *, explicit: bool) -> tuple[str, bool]:
    """(one line for a person, whether it went well) for the daemon on
    ``socket``; ("", True) for a socket nobody serves that was not named."""
    import time

    from multiserver import (
        DaemonNotRunning,
        DaemonPaths,
        MultiserverError,
        RequestFailed as Refused,
        dial_blocking,
    )
    from multiserver.internal import UPGRADE_VERSION

    paths = DaemonPaths.for_socket(socket)
    label = f"daemon {paths.number}"
    try:
        with dial_blocking(
            paths.socket, children=False, deadline=time.monotonic() + UPGRADE_TIMEOUT
        ) as client:
            welcome = client.welcome
            if welcome.version < UPGRADE_VERSION:
                return (
                    f"multiserver: {label} (pid {welcome.pid}) runs {welcome.server}, which cannot"
                    " upgrade in place; `multiserver stop`, then `multiserver restore`,"
                    " starts the installed one (its programs end and start again)",
                    False,
                )
            try:
                done = client.upgrade()
            except Refused as exc:
                return (
                    f"multiserver: {label} (pid {welcome.pid}): not upgraded: {exc.message}",
                    False,
                )
    except DaemonNotRunning:
        if not explicit:
            return "", True
        return f"multiserver: {label}: no daemon running at {paths.socket}", False
    except MultiserverError as exc:
        return f"multiserver: {label}: {exc}", False
    old, new = _version(done.old_server), _version(done.server)
    return (
        f"{label} (pid {done.pid}): {old} -> {new}{_direction(old, new)},"
        f" paused {done.paused * 1000:.0f} ms",
        True,
    )


def _direction(old: str, new: str) -> str:
    """What a person should know of the move: back to older code is a
    downgrade (issue 36: "0.1.4 -> 0.1.0" said nothing of it)."""
    from multiserver_cli._older import is_older

    if is_older(new, old):
        return " (a downgrade: the installed code is older than what ran)"
    return ""


def _version(server: str) -> str:
    return server.partition("/")[2] or server if server.startswith("multiserver/") else server


def _upgrade_there(host_name: str) -> int:
    """``upgrade --host H``: the host's own ``multiserver upgrade``."""
    from multiserver.internal import printable
    from multiserver_cli._remote import host_of, passed
    from restore import run_remote

    host = host_of(host_name)
    done = run_remote(host, ["upgrade"], timeout=max(host.timeout, UPGRADE_TIMEOUT))
    for line in done.stdout.decode(errors="replace").splitlines():
        print(printable(f"{host_name}: {line}"), flush=True)  # whose daemon it was
    return passed(done, host_name, stdout=False)
