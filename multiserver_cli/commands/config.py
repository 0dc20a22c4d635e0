"""``multiserver config``: every setting in effect, each with where it came
from (``$VAR``, ``config.toml:LINE``, ``default``), and what is wrong with
the file or the ``MULTISERVER_*`` variables, if anything (exit 1): the one
command that says a bad variable rather than refuse it. The table, the
order and the file: ``_settings``."""

from __future__ import annotations

from argparse import ArgumentParser, Namespace

NAME = "config"
HELP = "show the settings in effect and where each came from (config.toml, MULTISERVER_*)"
EXAMPLE = "multiserver config --json"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: the file, each setting's value and source, the problems",
    )


def run(args: Namespace) -> int:
    import json
    import os
    import sys

    from multiserver import SettingError
    from multiserver.internal import printable
    from multiserver_cli._format import print_json, table
    from multiserver_cli._settings import SETTINGS, Settings

    settings = Settings.read()
    problems = list(settings.problems)
    decided: dict[str, tuple[object, str]] = {}
    for setting in SETTINGS:
        try:
            value, source = settings.decide(setting.name)
            value = setting.kind.shown(value)
        except SettingError as exc:  # refused by every other command
            problems.append(str(exc))
            value, source = os.environ.get(setting.env or ""), f"${setting.env} (refused)"
        if value is None and setting.name in _DIRS:
            value = str(_DIRS[setting.name]())
        if setting.name == "shell" and not value:  # what new runs: $SHELL, else the login's
            value, source = _resolved_shell()
        decided[setting.key or setting.env or setting.name] = (value, source)
    if args.json:
        print_json(
            {
                "file": str(settings.path),
                "settings": {k: {"value": v, "from": src} for k, (v, src) in decided.items()},
                "problems": problems,
            }
        )
    else:
        for problem in problems:
            print(f"multiserver: {printable(problem)}", file=sys.stderr)
        rows = [[k, printable(json.dumps(v)), printable(src)] for k, (v, src) in decided.items()]
        print(table(["SETTING", "VALUE", "FROM"], rows))
        exists = "" if settings.path.exists() else " (none: every setting is from elsewhere)"
        print(f"file: {printable(str(settings.path))}{exists}", file=sys.stderr)
    return 1 if problems else 0


def _resolved_shell() -> tuple[str, str]:
    """The shell ``new`` runs with no command and none set (issue 36: ``config``
    showed ``""``), and where it came from."""
    import os

    from multiserver_cli.commands.new import user_shell

    if os.environ.get("SHELL"):
        return os.environ["SHELL"], "$SHELL"
    return user_shell()[0], "your login shell (passwd)"


def _runtime_dir() -> object:
    from multiserver.internal import runtime_dir

    return runtime_dir()


def _state_dir() -> object:
    from multiserver.internal import state_dir

    return state_dir()


def _config_dir() -> object:
    from restore import config_dir

    return config_dir()


# The dirs' defaults, worked out as their readers do.
_DIRS = {"runtime_dir": _runtime_dir, "state_dir": _state_dir, "config_dir": _config_dir}
