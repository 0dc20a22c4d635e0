"""``multiserver daemon``: make sure the daemon runs (starting it if need
be), print its socket on stdout and say on stderr how it was started;
``--foreground`` and ``--service`` run it in this process instead;
``--json`` reports every running daemon."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli._errors import CliError

NAME = "daemon"
HELP = "make sure the daemon runs and print its socket path (and say how it was started)"
EXAMPLE = "multiserver daemon --foreground"
# What config.toml decides (_settings.apply: the flag's attribute, or None:
# through its environment variable).
SETTINGS = {
    "buffer_limit": None,
    "share_size": None,
}


def add_arguments(p: ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--json",
        action="store_true",
        help="report every running daemon (starting none): socket, pid, the version of the"
        " code it runs, protocol, how and when it was started, its open files and their limit",
    )
    g.add_argument(
        "--foreground",
        action="store_true",
        help="run the daemon in this process (it exits when idle, as one started on demand)",
    )
    g.add_argument(
        "--service",
        action="store_true",
        help="run the daemon in this process for a service manager (what `multiserver service"
        " install` sets up): it stays up with no sessions, waits for a daemon started on demand"
        " to exit first, and tells systemd when it is ready",
    )


def run(args: Namespace) -> int:
    """The socket on stdout (for scripts), and how the daemon was started on
    stderr (for a person)."""
    if args.foreground or args.service:
        return _foreground(args)
    if args.json:
        return _report(args)
    from multiserver import DaemonPaths, dial_blocking
    from multiserver_cli._running import describe_daemon
    from multiserver_cli._sessions import bounded, deadline

    paths = DaemonPaths.for_number(args.daemon)
    with (
        bounded("daemon"),
        dial_blocking(paths, start=True, children=False, deadline=deadline()) as client,
    ):
        print(client.socket_path, flush=True)
        print(describe_daemon(client), file=sys.stderr)
    return 0


def _report(args: Namespace) -> int:
    """``daemon --json``: what each running daemon (``--daemon N``: that one)
    says of itself, and its lock file of how it was started; one that does
    not answer is a row with its ``error``, and the status 1."""
    from multiserver import DaemonPaths, MultiserverError, dial_blocking
    from multiserver.internal import find_sockets, open_fd_count, read_origin
    from multiserver_cli._args import only_daemon
    from multiserver_cli._format import print_json
    from multiserver_cli._sessions import deadline

    number = only_daemon(args)
    sockets = find_sockets() if number is None else [DaemonPaths.for_number(number).socket]
    rows: list[dict[str, object]] = []
    for socket in sockets:
        paths = DaemonPaths.for_socket(socket)
        row: dict[str, object] = {"socket": str(socket), "number": paths.number}
        try:
            with dial_blocking(socket, children=False, deadline=deadline()) as client:
                welcome = client.welcome
                origin = read_origin(paths.lock)
                if origin is not None and origin.instance_id != welcome.instance_id:
                    origin = None  # a dead daemon's line: not this one's
                server = welcome.server
                row.update(
                    pid=welcome.pid,
                    instance_id=welcome.instance_id,
                    version=server.partition("/")[2] if server.startswith("multiserver/") else None,
                    server=server,
                    protocol=welcome.version,
                    started=None if origin is None else origin.started,
                    idle_exit=None if origin is None else origin.idle_exit,
                    started_at=None if origin is None else origin.started_at,
                    upgraded_at=None if origin is None else origin.upgraded_at,
                    # Its limit (raised at its start), and what it has open
                    # where this OS tells (Linux).
                    open_files={
                        "limit": None if origin is None else origin.open_files,
                        "in_use": open_fd_count(welcome.pid),
                    },
                )
        except MultiserverError as exc:
            if number is None and not socket.exists():
                continue
            row["error"] = str(exc)
        rows.append(row)
    print_json(rows)
    return 1 if any("error" in r for r in rows) else 0


def _foreground(args: Namespace) -> int:
    """The daemon itself, in this process, until it exits."""
    import logging

    from multiserver import DaemonPaths
    from multiserver.internal import LockBusy, config_from_env, run_foreground

    paths = DaemonPaths.for_number(args.daemon)
    try:
        config = config_from_env()
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s multiserver[%(process)d] %(levelname)s %(message)s",
    )
    try:
        run_foreground(
            paths,
            config,
            on_ready=lambda: print(paths.socket, flush=True),
            service=args.service,
        )
    except LockBusy:
        raise CliError(f"a daemon already runs on {paths.socket}") from None
    return 0
