"""``multiserver version``: this multiserver's version and the protocols it
speaks; ``--json`` is what another host's multiserver asks through ssh."""

from __future__ import annotations

from argparse import ArgumentParser, Namespace

NAME = "version"
HELP = "print this multiserver's version and protocol"
EXAMPLE = "multiserver version"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="as one JSON object")


def run(args: Namespace) -> int:
    from multiserver import PROTOCOL_VERSION
    from multiserver.internal import MIN_PROTOCOL_VERSION
    from multiserver_cli._format import print_json
    from multiserver_cli._version import version_info

    info = version_info()
    if args.json:
        print_json(info)
    else:
        print(
            f"multiserver {info['version']} (protocol {PROTOCOL_VERSION},"
            f" speaks {MIN_PROTOCOL_VERSION}-{PROTOCOL_VERSION})"
        )
    return 0
