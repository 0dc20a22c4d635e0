"""``multiserver stop``: stop the daemon, refused while it runs sessions
(``--force``: end them first). No daemon running is no error."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli._errors import CliError

NAME = "stop"
HELP = "stop the daemon (refused while sessions run)"
EXAMPLE = "multiserver stop --force"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="end every session first")


def run(args: Namespace) -> int:
    from multiserver import DaemonNotRunning, DaemonPaths, RequestFailed
    from multiserver_cli._dial import dial
    from multiserver_cli._sessions import bounded, deadline

    paths = DaemonPaths.for_number(args.daemon)
    try:
        with bounded("stop"), dial(paths.socket, deadline=deadline()) as client:
            try:
                client.shutdown(force=args.force)
            except RequestFailed as exc:
                raise CliError(exc.message) from None
    except DaemonNotRunning:
        print(f"no daemon running at {paths.socket}", file=sys.stderr)
    else:
        print(f"stopped the daemon at {paths.socket}", file=sys.stderr)
    if args.force:
        _stop_connections()
    return 0


def _stop_connections() -> None:
    """``--force``: ssh's shared connections to the hosts go too (they
    would otherwise outlive it by ControlPersist); their sessions run on."""
    from restore import HostsFileError, load_hosts

    try:
        hosts = load_hosts()
    except HostsFileError:
        return  # said by the commands that use hosts; nothing to stop here
    if hosts:
        from multiserver_cli._remote import stop_connections

        stop_connections(list(hosts.values()))
