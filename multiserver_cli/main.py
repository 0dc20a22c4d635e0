"""The ``multiserver`` command: argument parsing and the one place where
errors become one line on stderr and an exit status.

This package is the top of the import graph: it may use ``multiserver``,
``restore`` and ``adopter``; none of them imports it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn

from multiserver import LockBusy, MultiserverError, default_daemon_number, escaped
from multiserver_cli._errors import CliError
from multiserver_cli.attach._keys import parse_key

DEFAULT_DETACH = "^\\"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse makes a formatter for every argument it adds (to check it),
    and a formatter with no width imports shutil (5 ms, with its compression
    modules) to ask for the terminal's: ask the OS directly."""

    def __init__(self, prog: str) -> None:
        try:
            columns = os.get_terminal_size(sys.stdout.fileno()).columns
        except (OSError, ValueError):
            columns = int(os.environ.get("COLUMNS", "80") or 80)
        super().__init__(prog, width=max(columns, 40) - 2)


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"multiserver: {message} (see: {self.prog} --help)\n")


def _detach_options(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-e",
        dest="detach_spec",
        metavar="KEY",
        default=DEFAULT_DETACH,
        help="detach key, e.g. ^A (default ^\\)",
    )
    g.add_argument("-E", dest="no_detach", action="store_true", help="no detach key")
    p.add_argument(
        "-r",
        dest="redraw",
        choices=["none", "winch", "ctrl_l"],
        default="winch",
        help="how to make the program redraw on attach (default: winch, a size jiggle)",
    )


def _env_options(p: argparse.ArgumentParser) -> None:
    """Where sessions start: what of this environment they do not get."""
    p.add_argument(
        "--strip-env",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave variables matching this name or glob (e.g. 'AWS_*') out of the session's"
        " environment; repeatable; adds to $MULTISERVER_STRIP_ENV and the default list"
        " (*_API_KEY, *_AUTH_TOKEN, GITHUB_TOKEN...: see README)",
    )
    p.add_argument(
        "--keep-env",
        action="append",
        default=[],
        metavar="PATTERN",
        help="keep variables matching this even if a strip pattern matches them; repeatable;"
        " adds to $MULTISERVER_KEEP_ENV ('*' strips no credentials)",
    )


def _to_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--to",
        metavar="ADDRESS",
        help="kitty: its remote control address (default: $KITTY_LISTEN_ON, or this terminal);"
        " tmux: its server's socket (default: the one tmux uses)",
    )


def _sub(
    subs: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, example: str
) -> argparse.ArgumentParser:
    return subs.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=_Formatter,
    )


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
        prog="multiserver",
        description="Terminal sessions that outlive their terminal. With no command: attach to the session 'main', creating it if needed.",
        epilog="examples:\n  multiserver                 # the session 'main'\n  multiserver new -d -n build -- make\n  multiserver ls\n  multiserver attach build",
        formatter_class=_Formatter,
    )
    parser.add_argument(
        "--daemon",
        type=int,
        metavar="N",
        help="new, daemon, stop: use daemon N (default: $MULTISERVER_DAEMON or 1);"
        " ls, attach, peek, kill: only daemon N's sessions (default: every daemon's)",
    )
    subs = parser.add_subparsers(dest="cmd", metavar="COMMAND")

    p = _sub(
        subs,
        "daemon",
        "make sure the daemon runs and print its socket path (and say how it was started)",
        "multiserver daemon --foreground",
    )
    g = p.add_mutually_exclusive_group()
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

    p = _sub(
        subs,
        "new",
        "start a session and attach to it (-d: leave it detached)",
        "multiserver new -n build -d -- make -j4",
    )
    p.add_argument(
        "-n",
        "--name",
        help="session name, unused on every daemon (default: the smallest free number)",
    )
    p.add_argument(
        "-d", "--detach", action="store_true", help="do not attach; print the session's name"
    )
    p.add_argument(
        "-A",
        dest="attach_existing",
        action="store_true",
        help="attach if a session NAME exists (a saved one that is not running is started"
        " again from its saved command and cwd), else create it",
    )
    p.add_argument("--cwd", metavar="DIR", help="working directory (default: this one)")
    p.add_argument(
        "--linger",
        type=float,
        metavar="SECONDS",
        help="end the session after it has been detached this long",
    )
    p.add_argument(
        "--window", default="main", help="window of the saved arrangement (default: main)"
    )
    p.add_argument(
        "--host",
        metavar="HOST",
        help="start it on that host (multiserver host add), with the host's grace window"
        " as its --linger",
    )
    _env_options(p)
    _detach_options(p)
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARG...",
        help="command (default: your shell)",
    )

    p = _sub(subs, "attach", "attach this terminal to a session", "multiserver attach -e ^A build")
    _detach_options(p)
    # `attach HOST:NAME` runs `attach --relay NAME` there: the terminal is
    # relayed over ssh's stdin and stdout, not a PTY of sshd's (_relay).
    p.add_argument("--relay", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("name", metavar="NAME")

    p = _sub(subs, "ls", "list the sessions of every daemon", "multiserver ls --json")
    p.add_argument(
        "--json",
        action="store_true",
        help="for scripts: one JSON array with an object per session (one line when piped)",
    )

    p = _sub(
        subs,
        "peek",
        "print a session's kept output (what attach replays) without attaching",
        "multiserver peek --bytes 4096 build",
    )
    p.add_argument(
        "--bytes", type=int, metavar="N", help="at most the last N bytes (from a line start)"
    )
    p.add_argument("name", metavar="NAME")

    p = _sub(
        subs,
        "kill",
        "end a session (SIGHUP, then SIGKILL after 3 s) and forget it",
        "multiserver kill -s INT build",
    )
    p.add_argument(
        "-s", "--signal", metavar="SIGNAL", help="send this signal only (e.g. INT, TERM, 9)"
    )
    p.add_argument("name", metavar="NAME")

    p = _sub(
        subs,
        "restore",
        "bring back every saved session (run it at login)",
        "multiserver restore --timeout 5",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="the whole restore's deadline, in seconds (default 10)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="the report as one JSON object (sessions, sweep, seconds, ok)",
    )
    p.add_argument(
        "--no-relaunch",
        action="store_true",
        help="report sessions whose program is gone (outcome expired); start nothing",
    )
    p.add_argument(
        "--relaunch-ended",
        action="store_true",
        help="start sessions whose program had exited again",
    )
    p.add_argument(
        "--open",
        choices=["kitty", "tmux", "print"],
        help="then open the saved layout (windows, tabs, splits) in kitty or tmux, each pane"
        " attached to its session; print: print it as WezTerm commands",
    )
    p.add_argument(
        "--steal",
        action="store_true",
        help="--open: give sessions a client holds a pane too (attaching takes them)",
    )
    _to_option(p)
    _env_options(p)

    p = _sub(
        subs,
        "orphans",
        "list processes no saved session owns, and stale sockets (--adopt: adopt them)",
        "multiserver orphans --adopt",
    )
    p.add_argument("--json", action="store_true", help="the rows as one JSON array")
    p.add_argument(
        "--adopt",
        action="store_true",
        help="adopt orphans into the window 'orphans' and remove stale sockets",
    )

    p = _sub(
        subs,
        "save",
        "refresh the saved cwd and title of every live session (--scrollback: and what it shows)",
        "multiserver save --scrollback --every 5",
    )
    p.add_argument(
        "--scrollback",
        action="store_true",
        help="also keep what each session not attached anywhere shows (its newest 256 KiB),"
        " for the first attach after a reboot; attached sessions are kept by their client",
    )
    p.add_argument(
        "--every",
        type=float,
        metavar="S",
        help="keep saving, every S seconds (1 to 86400), until stopped (SIGTERM: one last save);"
        " one per user: for the login service",
    )
    p.add_argument(
        "--from",
        dest="from_terminal",
        choices=["kitty", "tmux"],
        help="save the layout of this terminal (windows, tabs, splits and sizes) instead",
    )
    p.add_argument(
        "--adopt-panes",
        action="store_true",
        help="--from: a pane running something else becomes a new session in its cwd,"
        " started at the next restore",
    )
    _to_option(p)

    p = _sub(
        subs, "version", "print this multiserver's version and protocol", "multiserver version"
    )
    p.add_argument("--json", action="store_true", help="as one JSON object")

    p = _sub(
        subs,
        "host",
        "the other machines whose sessions this one reaches through ssh",
        "multiserver host add db1 --ssh me@db1.example.com",
    )
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
        default="300",
        metavar="S",
        help="sessions started through it end S seconds after their last client (60-3600,"
        " or none; default 300)",
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

    p = _sub(
        subs, "stop", "stop the daemon (refused while sessions run)", "multiserver stop --force"
    )
    p.add_argument("--force", action="store_true", help="end every session first")

    p = _sub(
        subs,
        "service",
        "run the daemon as a service of your login (systemd user units; launchd agents on"
        " macOS) that stays up, and `multiserver restore` at login",
        "multiserver service install",
    )
    p.add_argument(
        "action",
        choices=["install", "uninstall", "status"],
        help="install: write and enable the units and start the daemon; uninstall: remove them"
        " (never ending a session); status: what is installed and whether it runs",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="install: the deadline of the restore at login, in seconds (default 5)",
    )
    return parser


# Each command's module is imported when it runs. The commands of
# ``commands.new`` are blocking and import no trio (a command is mostly the
# interpreter's start-up: trio alone would double it); ``restore`` and
# ``orphans`` talk to many daemons at once, on trio.
COMMANDS: dict[str, tuple[str, str]] = {
    "daemon": ("commands.new", "cmd_daemon"),
    "new": ("commands.new", "cmd_new"),
    "attach": ("commands.new", "cmd_attach"),
    "ls": ("commands.new", "cmd_ls"),
    "peek": ("commands.new", "cmd_peek"),
    "kill": ("commands.new", "cmd_kill"),
    "stop": ("commands.new", "cmd_stop"),
    "save": ("commands.new", "cmd_save"),
    "service": ("commands.service", "cmd_service"),
    "restore": ("commands.restore", "cmd_restore"),
    "version": ("commands.host", "cmd_version"),
    "host": ("commands.host", "cmd_host"),
    "orphans": ("commands.restore", "cmd_orphans"),
}
ON_TRIO = frozenset({"commands.restore"})


Handler = Callable[[argparse.Namespace], int | Awaitable[int]]


def command(name: str) -> Handler:
    module, func = COMMANDS[name]
    handler: Handler = getattr(importlib.import_module(f"multiserver_cli.{module}"), func)
    return handler


def run(name: str, args: argparse.Namespace) -> int:
    """Run command ``name``: directly, or under trio if it is async."""
    handler = command(name)
    if COMMANDS[name][0] in ON_TRIO:
        import trio

        status: int = trio.run(handler, args)  # type: ignore[arg-type]
        return status
    result = handler(args)
    assert isinstance(result, int)
    return result


def _normalize(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    args.daemon_given = args.daemon is not None
    try:
        if args.daemon is None:
            args.daemon = default_daemon_number()
        if not 1 <= args.daemon <= 999_999:
            raise ValueError(f"daemon number must be 1..999999, got {args.daemon}")
    except ValueError as exc:
        parser.error(str(exc))
    if hasattr(args, "detach_spec"):
        try:
            args.detach_key = None if args.no_detach else parse_key(args.detach_spec)
        except ValueError as exc:
            parser.error(str(exc))
    if getattr(args, "command", None) and args.command[0] == "--":
        args.command = args.command[1:]
    if getattr(args, "linger", None) is not None and args.linger < 0:
        parser.error("--linger must be >= 0")
    if args.cmd == "service" and not args.timeout > 0:
        parser.error("--timeout must be > 0")


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    global_only = all(a.startswith("--daemon") or a.isdigit() for a in argv)
    if global_only:  # bare `multiserver`: new -A -n main
        argv = [*argv, "new", "-A", "-n", "main"]
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        sys.exit(2)
    _normalize(args, parser)
    try:
        if args.cmd == "daemon" and (args.foreground or args.service):
            status = _foreground(args)
        else:
            status = run(args.cmd, args)
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


def _say_error(exc: Exception) -> None:
    # bytes: an error may quote an argv or a path that is not UTF-8; it is
    # shown escaped (caf\xe9), as `ls` shows it.
    print(f"multiserver: {escaped(str(exc))}", file=sys.stderr)


def _foreground(args: argparse.Namespace) -> int:
    from multiserver import DaemonPaths, config_from_env, run_foreground

    paths = DaemonPaths.for_number(args.daemon)
    try:
        config = config_from_env()
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    import logging

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
