"""``multiserver save``: the saved arrangement brought up to date with the
sessions: every live session's cwd and title (its foreground process's);
with ``--scrollback``, what each session nobody holds shows; with
``--every S``, again every S seconds until stopped (``_saver``, for the
login service). ``--from kitty|tmux`` saves that terminal's layout
instead (``_layouts``)."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli import _args
from multiserver_cli._errors import CliError

NAME = "save"
HELP = "refresh the saved cwd and title of every live session (--scrollback: and what it shows)"
EXAMPLE = "multiserver save --scrollback --every 5"


def add_arguments(p: ArgumentParser) -> None:
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
    _args.to_option(p)


def run(args: Namespace) -> int:
    if args.from_terminal is not None:
        from multiserver_cli import _layouts

        return _layouts.cmd_save_from(args)
    from multiserver_cli import _saver, _state
    from multiserver_cli._format import save_summary

    saver = _saver.Saver(scrollback=args.scrollback, number=_args.only_daemon(args))
    if args.every is not None:
        if not _saver.MIN_EVERY <= args.every <= _saver.MAX_EVERY:
            raise CliError(
                f"--every must be from {_saver.MIN_EVERY:g} to {_saver.MAX_EVERY:g} seconds", 2
            )
        return _saver.run_every(args.every, saver)
    with _state.open_store() as store:
        if store is None:
            return 1
        report = saver.run_pass(store)
    for problem in report.problems:
        print(f"multiserver: {problem}", file=sys.stderr)
    print(save_summary(report.total, report.live, report.changed, report.outputs), file=sys.stderr)
    return 0
