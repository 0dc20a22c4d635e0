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
    from multiserver import DaemonNotRunning, DaemonPaths, RequestFailed, dial_blocking
    from multiserver_cli._sessions import bounded, deadline

    paths = DaemonPaths.for_number(args.daemon)
    try:
        with bounded("stop"), dial_blocking(paths.socket, deadline=deadline()) as client:
            try:
                client.shutdown(force=args.force)
            except RequestFailed as exc:
                raise CliError(exc.message) from None
    except DaemonNotRunning:
        print(f"no daemon running at {paths.socket}", file=sys.stderr)
        return 0
    print(f"stopped the daemon at {paths.socket}", file=sys.stderr)
    return 0
