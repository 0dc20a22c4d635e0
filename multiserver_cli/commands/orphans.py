"""``multiserver orphans``: what a sweep finds (``adopter``): processes that
no saved session owns, and stale sockets; ``--adopt`` adopts the orphans
into the window ``orphans`` and removes the stale sockets. On trio."""

from __future__ import annotations

import os
import sys
from argparse import ArgumentParser, Namespace

NAME = "orphans"
HELP = "list processes no saved session owns, and stale sockets (--adopt: adopt them)"
EXAMPLE = "multiserver orphans --adopt"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="the rows as one JSON array")
    p.add_argument(
        "--adopt",
        action="store_true",
        help="adopt orphans into the window 'orphans' and remove stale sockets",
    )


async def run(args: Namespace) -> int:
    """What a sweep would do (``--adopt``: do it)."""
    import attrs

    from adopter import SWEEP_BOUND, StoreSink, sweep
    from multiserver_cli import _state
    from multiserver_cli._format import print_json, table

    with _state.open_store() as store:
        if store is None:
            return 1
        report = await sweep(StoreSink(store), adopt=args.adopt, bound=SWEEP_BOUND)
    if args.json:
        print_json([attrs.asdict(r) for r in report.rows])
    elif report.rows:
        print(
            table(
                ["SOCKET", "STATE", "ACTION", "NAME", "DETAIL"],
                [
                    [os.path.basename(r.socket), r.state, r.action, r.name or "-", r.detail]
                    for r in report.rows
                ],
            )
        )
    else:
        print("no daemons found", file=sys.stderr)
    return 0
