"""The command line's grammar, shared by every command: the parser and its
help formatter, the top-level parser with a sub-parser per command
(``parser_for``), the flags that carry a setting (``SettingFlag``: read by
the setting's row, as its variable and the file are), the option groups
several commands take (the detach key, what of this environment a session
gets, ``--to``), and what the shared options become once parsed
(``settle``).

A command is a module of ``commands/`` (a ``Command``); this module
imports none of them: ``main`` hands it its table, and ``save`` the two
commands whose grammar it reads in a pane's processes.
"""

from __future__ import annotations

import argparse
import os
import sys

from multiserver_cli.attach._keys import DEFAULT_DETACH

# Types only: typing at run time would cost every command its import.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence
    from typing import Any, NoReturn, Protocol

    class Command(Protocol):
        """What a module of ``commands/`` holds, as tmux's command entry
        does: its name, one line of help, an example, its argument spec, and
        what it does (an exit status; async for a command that runs on trio)."""

        NAME: str
        HELP: str
        EXAMPLE: str

        def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

        def run(self, args: argparse.Namespace) -> int | Awaitable[int]: ...


class Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse makes a formatter for every argument it adds (to check it),
    and a formatter with no width imports shutil (5 ms, with its compression
    modules) to ask for the terminal's: ask the OS directly."""

    def __init__(self, prog: str) -> None:
        try:
            columns = os.get_terminal_size(sys.stdout.fileno()).columns
        except (OSError, ValueError):
            columns = int(os.environ.get("COLUMNS", "80") or 80)
        super().__init__(prog, width=max(columns, 40) - 2)


class SettingFlag(argparse.Action):
    """A flag that carries a setting (``setting=``: its row's name in
    ``_settings.SETTINGS``): its text read by that row's kind, as the
    environment and the file are, so a value it refuses is the line they
    would say, naming the flag (``-e '^ß': must be ...``), a usage error.
    It notes ``DEST_given`` (``_settings.apply``: a flag given wins, even
    one whose value is None, ``--grace none``). ``append``: each one adds
    one item to a list (``--strip-env``)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        setting: str,
        append: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.setting, self.append = setting, append

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from multiserver import SettingError
        from multiserver_cli._settings import BY_NAME

        flag = option_string or self.option_strings[0]
        try:
            value = BY_NAME[self.setting].from_flag(flag, str(values), one=self.append)
        except SettingError as exc:
            parser.error(str(exc))
        if self.append:  # a new list: the default is shared
            value = [*(getattr(namespace, self.dest, None) or ()), value]
        setattr(namespace, self.dest, value)
        setattr(namespace, f"{self.dest}_given", True)


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"multiserver: {message} (see: {self.prog} --help)\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but words nobody took are refused pointing to the
        help of the command they were given to (argparse's top parser
        refuses them, with its own help)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "cmd", None)
            prog = self.prog if command is None else f"{self.prog} {command}"
            self.exit(
                2, f"multiserver: unrecognized arguments: {' '.join(extras)} (see: {prog} --help)\n"
            )
        return parsed


def parser_for(
    commands: Sequence[Command], argv: Sequence[str] | None = None
) -> argparse.ArgumentParser:
    """``multiserver [--daemon N] COMMAND ...``: the top-level parser, with a
    sub-parser for each of ``commands``, in their order.

    With ``argv`` naming a command, only that command is added, with its
    arguments: each sub-parser costs argparse's gettext lookups (about
    0.6 ms) and each command's arguments more; the others are needed only
    by the top-level help and an unknown command's error, which get the
    whole parser."""
    wanted = named_command(argv, {command.NAME for command in commands})
    parser: argparse.ArgumentParser = Parser(
        prog="multiserver",
        description="Terminal sessions that outlive their terminal. With no command: attach to the session 'main', creating it if needed.",
        epilog="examples:\n  multiserver                 # the session 'main'\n  multiserver new -d -n build -- make\n  multiserver ls\n  multiserver attach build",
        formatter_class=Formatter,
    )
    parser.add_argument(
        "--daemon",
        action=SettingFlag,
        setting="daemon",
        metavar="N",
        help="new, daemon, stop, upgrade, events: use daemon N"
        " (default: $MULTISERVER_DAEMON or 1);"
        " ls, attach, peek, kill: only daemon N's sessions (default: every daemon's)",
    )
    subs = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    for command in commands:
        if wanted is not None and wanted != command.NAME:
            continue
        sub = subs.add_parser(
            command.NAME,
            help=command.HELP,
            description=command.HELP,
            epilog=f"example:\n  {command.EXAMPLE}",
            formatter_class=Formatter,
        )
        command.add_arguments(sub)
    return parser


def named_command(argv: Sequence[str] | None, names: set[str]) -> str | None:
    """The command ``argv`` names: its first word that is not the top-level
    ``--daemon N``, if that is a command's name (else None: no command, help,
    or a word the parser will refuse)."""
    words = list(argv or ())
    while words:
        word = words.pop(0)
        if word == "--daemon":
            if words:
                words.pop(0)
            continue
        if word.startswith("--daemon="):
            continue
        return word if word in names else None
    return None


def settle(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The shared options once parsed: the daemon (``--daemon N``, else
    $MULTISERVER_DAEMON or 1; ``daemon_given``: whether it was said) and
    the detach key as the byte it sends (``detach_key``; None: ``-E``).
    Each was checked already: the flags as they were parsed (``SettingFlag``),
    the variable and the file by ``main``; a bad one is a usage error."""
    from multiserver import default_daemon_number

    args.daemon_given = args.daemon is not None
    if args.daemon is None:
        try:
            args.daemon = default_daemon_number()
        except ValueError as exc:
            parser.error(str(exc))
    if hasattr(args, "detach_spec"):
        from multiserver_cli.attach._keys import parse_key

        spec = DEFAULT_DETACH if args.detach_spec is None else args.detach_spec
        args.detach_key = None if args.no_detach else parse_key(spec)


def only_daemon(args: argparse.Namespace) -> int | None:
    """The daemon ``--daemon N`` narrows a command to, if it was given."""
    number: int | None = args.daemon if args.daemon_given else None
    return number


# --- option groups ---------------------------------------------------------------------


def detach_options(p: argparse.ArgumentParser) -> None:
    """How an attach lets go, and how the program redraws on attach; the
    detach key said in the command's description, where a person looks."""
    ctrl = f"Ctrl-{DEFAULT_DETACH[1:]}"
    p.description = (
        f"{p.description or ''}\n\n"
        f"detach: press {DEFAULT_DETACH} ({ctrl}); the session runs on, and `multiserver"
        " attach NAME`\ncomes back to it. -e KEY for another key, -E for none."
    ).lstrip()
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-e",
        action=SettingFlag,
        setting="detach_key",
        dest="detach_spec",
        metavar="KEY",
        default=None,  # config.toml's detach_key, else DEFAULT_DETACH (_settings)
        help="detach key, e.g. ^A (default ^\\, or config.toml's detach_key); under another"
        " key, ^\\ goes to the program, where it is SIGQUIT",
    )
    g.add_argument("-E", dest="no_detach", action="store_true", help="no detach key")
    p.add_argument(
        "--redraw",
        dest="redraw",
        choices=["none", "winch", "ctrl_l"],
        default="winch",
        help="how to make the program redraw on attach (default: winch, a size jiggle)",
    )


def share_options(p: argparse.ArgumentParser, *takeover: str) -> None:
    """How to attach to a session other terminals hold (docs/sharing.md):
    join them (the default), only watch, or take it over (``takeover``:
    the flags of that one)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-r",
        "--read-only",
        action="store_true",
        help="only watch: see everything, type nothing into it (but the detach key); this"
        " terminal's size never changes the session's",
    )
    g.add_argument(
        *takeover,
        dest="takeover",
        action="store_true",
        help="take it over: the other terminals that hold it are detached (by default this"
        " terminal joins them: all see every byte and all type)",
    )


def env_options(p: argparse.ArgumentParser) -> None:
    """Where sessions start: what of this environment they do not get."""
    p.add_argument(
        "--strip-env",
        action=SettingFlag,
        setting="strip_env",
        append=True,
        default=[],
        metavar="PATTERN",
        help="leave variables matching this name or glob (e.g. 'AWS_*') out of the session's"
        " environment; repeatable; adds to $MULTISERVER_STRIP_ENV and the default list"
        " (*_API_KEY, *_AUTH_TOKEN, GITHUB_TOKEN...: see README)",
    )
    p.add_argument(
        "--keep-env",
        action=SettingFlag,
        setting="keep_env",
        append=True,
        default=[],
        metavar="PATTERN",
        help="keep variables matching this even if a strip pattern matches them; repeatable;"
        " adds to $MULTISERVER_KEEP_ENV ('*' strips no credentials)",
    )


def to_option(p: argparse.ArgumentParser) -> None:
    """Which kitty or tmux a layout is read from or opened in."""
    p.add_argument(
        "--to",
        metavar="ADDRESS",
        help="kitty: its remote control address (default: $KITTY_LISTEN_ON, or this terminal);"
        " tmux: its server's socket (default: the one tmux uses)",
    )
