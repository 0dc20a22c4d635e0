"""``multiserver version`` and ``multiserver host add | ls | rm``: the
hosts other commands reach through OpenSSH (``_hosts``, ``_ssh``)."""

from __future__ import annotations

import sys
from argparse import Namespace

import attrs

from multiserver._messages import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION
from multiserver_cli._errors import CliError
from multiserver_cli._format import print_json, table
from multiserver_cli._hosts import (
    Host,
    check_command,
    check_dest,
    check_host_name,
    load_hosts,
    parse_grace,
    parse_timeout,
    save_hosts,
)
from multiserver_cli._ssh import remote_json


def version_info() -> dict[str, object]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("multiserver")
    except PackageNotFoundError:
        ours = "unknown"
    return {"version": ours, "protocol": PROTOCOL_VERSION, "min_protocol": MIN_PROTOCOL_VERSION}


def cmd_version(args: Namespace) -> int:
    info = version_info()
    if args.json:
        print_json(info)
    else:
        print(
            f"multiserver {info['version']} (protocol {PROTOCOL_VERSION},"
            f" speaks {MIN_PROTOCOL_VERSION}-{PROTOCOL_VERSION})"
        )
    return 0


def compatible(answer: object, host: Host) -> str:
    """The remote's version, if its answer to ``version --json`` says it
    speaks a protocol we speak; CliError, saying what to install, if not."""
    if not isinstance(answer, dict) or not all(
        isinstance(answer.get(k), int) for k in ("protocol", "min_protocol")
    ):
        raise CliError(f"{host.name}: `{host.command} version --json` answered {answer!r}")
    theirs = (answer["min_protocol"], answer["protocol"])
    if theirs[1] < MIN_PROTOCOL_VERSION or theirs[0] > PROTOCOL_VERSION:
        raise CliError(
            f"{host.name}: its multiserver {answer.get('version')} speaks protocol"
            f" {theirs[0]}-{theirs[1]}, this one {MIN_PROTOCOL_VERSION}-{PROTOCOL_VERSION}:"
            f" install the same multiserver on {host.dest} as here"
            f" ({version_info()['version']})"
        )
    return str(answer.get("version"))


def cmd_host(args: Namespace) -> int:
    return {"add": _add, "ls": _ls, "rm": _rm}[args.host_cmd](args)


def _add(args: Namespace) -> int:
    name = check_host_name(args.name)
    host = Host(
        name,
        check_dest(args.ssh or name),
        check_command(args.command),
        parse_grace(args.grace),
        timeout=parse_timeout(args.timeout),
    )
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
        except CliError as exc:
            if "ssh failed" not in str(exc) or not sys.stdin.isatty():
                raise
            remote = compatible(remote_json(host, ["version", "--json"], batch=False), host)
            host = attrs.evolve(host, needs_credential=True)
    hosts[name] = host
    save_hosts(hosts)
    grace = "none" if host.grace is None else f"{host.grace:g} s"
    print(f"added {name} ({host.dest}, multiserver {remote}, grace {grace})", file=sys.stderr)
    return 0


def _ls(args: Namespace) -> int:
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
    hosts = load_hosts()
    if args.name not in hosts:
        raise CliError(f"no host named {args.name}")
    del hosts[args.name]
    save_hosts(hosts)
    print(f"removed {args.name}", file=sys.stderr)
    return 0
