"""The ``multiserver`` command: which command runs (``COMMANDS``, one
module each in ``commands/``), and the one place where errors become one
line on stderr and an exit status.

This package is the top of the import graph: it may use ``multiserver``,
``restore`` and ``adopter``; none of them imports it. A command's module
is loaded when the command line names it (``load_command``), for its argument
spec; all of them only for the help that lists them and for an unknown
command's error. What a command runs with it loads when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from multiserver import MultiserverError
from multiserver.internal import printable
from multiserver_cli import _args
from multiserver_cli._errors import CliError, UsageError

# The commands, in the order `multiserver --help` lists them: each the
# module of that name in commands/ (whose NAME it is; a test says so).
# Loading all of them for every command cost it about 2 ms.
COMMAND_NAMES: tuple[str, ...] = (
    "daemon",
    "new",
    "attach",
    "ls",
    "peek",
    "capture",
    "kill",
    "events",
    "restore",
    "orphans",
    "save",
    "version",
    "host",
    "stop",
    "upgrade",
    "service",
    "config",
    "completion",
)
# restore and orphans talk to many daemons at once, on trio. The others
# block, on the blocking client, and import no trio: a command is mostly
# the interpreter's start-up, and trio alone would double it.
ON_TRIO: tuple[str, ...] = ("restore", "orphans")


def load_command(name: str) -> _args.Command:
    """The command ``name`` (one of COMMAND_NAMES): its module."""
    module: _args.Command = importlib.import_module(f"multiserver_cli.commands.{name}")
    return module


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, one that parses that command line (only
    the command it names gets its arguments)."""
    wanted = _args.named_command(argv, set(COMMAND_NAMES))
    names = COMMAND_NAMES if wanted is None else (wanted,)
    return _args.parser_for([load_command(n) for n in names], argv)


def run(command: _args.Command, args: argparse.Namespace) -> int:
    """Run ``command``: directly, or under trio if it is one of ON_TRIO (unless
    its ``quick``, if it has one, finds nothing to do and answers alone)."""
    if command.NAME in ON_TRIO:
        quick = getattr(command, "quick", None)  # the case with nothing to do
        if quick is not None and (done := quick(args)) is not None:
            return int(done)
        import trio

        status: int = trio.run(command.run, args)  # type: ignore[arg-type]
        return status
    result = command.run(args)
    assert isinstance(result, int)
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    global_only = all(a.startswith("--daemon") or a.isdigit() for a in argv)
    if global_only:  # bare `multiserver`: new -A -n main
        argv = [*argv, "new", "-A", "-n", "main"]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        sys.exit(2)
    command = load_command(args.cmd)
    _settle_settings(command, args)
    _args.settle(args, parser)
    if getattr(command, "WHOLE_PARSER", False):  # completion: every command's flags
        args.whole_parser = build_parser()
    try:
        try:
            status = run(command, args)
        finally:
            _say_pending()
    except UsageError as exc:  # pointing to the help of the command it was given to
        parser.exit(2, f"multiserver: {printable(str(exc))} (see: multiserver {args.cmd} --help)\n")
    except CliError as exc:
        _say_error(exc)
        sys.exit(exc.status)
    except MultiserverError as exc:
        _say_error(exc)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # The reader went away (`multiserver ls --json | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    sys.exit(status)


def _say_pending() -> None:
    """What a command met and had to keep until its screen was the
    person's again (``_older``): said last."""
    if "multiserver_cli._older" in sys.modules:
        from multiserver_cli._older import say_pending

        say_pending()


def _settle_settings(command: _args.Command, args: argparse.Namespace) -> None:
    """Before a command runs: every ``MULTISERVER_*`` variable checked
    (one line and exit 2 for a bad one: nothing is started with it; the
    flags were checked as they were parsed), then the command's settings
    decided (``SETTINGS``: config.toml, read only by the commands that use
    it). ``config`` reports a bad variable instead."""
    from multiserver import SettingError
    from multiserver.internal import check_environment

    try:
        if command.NAME != "config":
            check_environment()
        wanted = getattr(command, "SETTINGS", None)
        if wanted:
            from multiserver_cli import _settings

            _settings.apply(args, wanted)
    except SettingError as exc:
        _say_error(exc)
        sys.exit(2)


def _say_error(exc: Exception) -> None:
    # An error may quote a name, an argv or a path: shown printable
    # (caf\xe9, \x1b), as `ls` shows it.
    print(f"multiserver: {printable(str(exc), lines=True)}", file=sys.stderr)
