"""``multiserver config``: the settings in effect, each with where it came
from (``$VAR``, ``config.toml:LINE``, ``default``), and what is wrong with
the file, if anything (exit 1). The order and the file: ``_settings``."""

from __future__ import annotations

from argparse import ArgumentParser, Namespace

NAME = "config"
HELP = "show the settings in effect and where each came from (config.toml)"
EXAMPLE = "multiserver config --json"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: the file, each setting's value and source, the problems",
    )


def run(args: Namespace) -> int:
    import json
    import sys

    from multiserver import printable
    from multiserver_cli._format import print_json, table
    from multiserver_cli._settings import SETTINGS, Settings

    settings = Settings.read()
    decided = {s.key: settings.decide(s.key) for s in SETTINGS}
    if args.json:
        print_json(
            {
                "file": str(settings.path),
                "settings": {k: {"value": v, "from": src} for k, (v, src) in decided.items()},
                "problems": settings.problems,
            }
        )
    else:
        for problem in settings.problems:
            print(f"multiserver: {printable(problem)}", file=sys.stderr)
        rows = [[s.key, json.dumps(decided[s.key][0]), decided[s.key][1]] for s in SETTINGS]
        print(table(["SETTING", "VALUE", "FROM"], rows))
        exists = "" if settings.path.exists() else " (none: every setting is from elsewhere)"
        print(f"file: {printable(str(settings.path))}{exists}", file=sys.stderr)
    return 1 if settings.problems else 0
