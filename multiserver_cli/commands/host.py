"""``multiserver host add | ls | rm``: the other machines whose sessions
this one reaches through OpenSSH (``HOST:NAME``; ``restore.remote``).
``add`` checks that the host's multiserver answers and speaks with this
one, unless told not to."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver.internal import printable
from multiserver_cli._args import SettingFlag
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from restore import Host

NAME = "host"
HELP = "the other machines whose sessions this one reaches through ssh"
EXAMPLE = "multiserver host add db1 --ssh me@db1.example.com"
# What config.toml decides (_settings.apply: the flag's attribute, or None:
# through its environment variable).
SETTINGS = {
    "host_grace": "grace",
}


def add_arguments(p: ArgumentParser) -> None:
    hosts = p.add_subparsers(dest="host_cmd", metavar="add|ls|rm", required=True)
    h = hosts.add_parser("add", help="add a host (checks that its multiserver answers)")
    h.add_argument("name", metavar="NAME", help="what HOST:SESSION starts with")
    h.add_argument("--ssh", metavar="DEST", help="ssh's destination, [user@]host (default: NAME)")
    h.add_argument(
        "--command",
        default="multiserver",
        metavar="PATH",
        help="the multiserver command there (default: multiserver)",
    )
    h.add_argument(
        "--grace",
        action=SettingFlag,
        setting="host_grace",
        default=None,  # config.toml's host_grace, else 300
        metavar="S",
        help="sessions started through it end S seconds after their last client (60-3600,"
        " or none; default 300, or config.toml's host_grace)",
    )
    h.add_argument(
        "--timeout",
        default="15",
        metavar="S",
        help="how long to wait for it, connecting included (default 15)",
    )
    h.add_argument("--replace", action="store_true", help="replace a host of that name")
    h.add_argument("--no-check", action="store_true", help="do not connect to check it")
    h = hosts.add_parser("ls", help="list the hosts")
    h.add_argument("--json", action="store_true", help="one JSON array")
    h = hosts.add_parser("rm", help="forget a host (its sessions run on)")
    h.add_argument("name", metavar="NAME")


def run(args: Namespace) -> int:
    return {"add": _add, "ls": _ls, "rm": _rm}[args.host_cmd](args)


def _add(args: Namespace) -> int:
    from multiserver.internal import replaced
    from multiserver_cli._version import compatible
    from restore import (
        Host,
        HostFailure,
        HostSettingError,
        check_command,
        check_dest,
        check_host_name,
        load_hosts,
        parse_timeout,
        remote_json,
        save_hosts,
    )

    try:
        name = check_host_name(args.name)
        host = Host(
            name,
            check_dest(args.ssh or name),
            check_command(args.command),
            args.grace,  # checked as a setting (60-3600, or none)
            timeout=parse_timeout(args.timeout),
        )
    except HostSettingError as exc:
        raise CliError(str(exc), 2) from None
    hosts = load_hosts()
    if name in hosts and not args.replace:
        raise CliError(f"a host named {name} exists already (--replace to change it)")
    if args.no_check:
        remote = "not checked"
    else:
        # A person is here: a passphrase may be typed (BatchMode off), and
        # then the host is one that needs a credential (restore defers it).
        try:
            remote = compatible(remote_json(host, ["version", "--json"]), host)
        except HostFailure as exc:
            if exc.kind not in ("credential", "unreachable") or not sys.stdin.isatty():
                raise
            remote = compatible(remote_json(host, ["version", "--json"], batch=False), host)
            host = replaced(host, needs_credential=True)
    hosts[name] = host
    save_hosts(hosts)
    grace = "none" if host.grace is None else f"{host.grace:g} s"
    print(
        printable(f"added {name} ({host.dest}, multiserver {remote}, grace {grace})"),
        file=sys.stderr,
    )
    return 0


def _ls(args: Namespace) -> int:
    from multiserver_cli._format import print_json, table
    from restore import load_hosts

    hosts = load_hosts()
    if args.json:
        print_json([_row(h) for h in hosts.values()])
        return 0
    if not hosts:
        print("no hosts (add one: multiserver host add NAME --ssh DEST)", file=sys.stderr)
        return 0
    rows = [
        [
            h.name,
            h.dest,
            h.command,
            "none" if h.grace is None else f"{h.grace:g}s",
            "needs one" if h.needs_credential else "-",
        ]
        for h in hosts.values()
    ]
    print(table(["NAME", "SSH", "COMMAND", "GRACE", "CREDENTIAL"], rows))
    return 0


def _row(h: Host) -> dict[str, object]:
    return {
        "name": h.name,
        "dest": h.dest,
        "command": h.command,
        "grace": h.grace,
        "needs_credential": h.needs_credential,
        "timeout": h.timeout,
    }


def _rm(args: Namespace) -> int:
    from restore import load_hosts, save_hosts

    hosts = load_hosts()
    if args.name not in hosts:
        raise CliError(f"no host named {args.name}")
    gone = hosts.pop(args.name)
    save_hosts(hosts)
    from multiserver_cli._remote import stop_connections

    stop_connections([gone])  # ssh's shared connection to it, kept for nothing now
    print(printable(f"removed {args.name}"), file=sys.stderr)
    return 0
