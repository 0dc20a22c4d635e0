"""``multiserver save``: the saved arrangement brought up to date with the
sessions now: every live session's cwd and title (its foreground
process's; ``_saver``). What sessions show needs no saving: their daemon
keeps it on disk as it comes (``--scrollback`` and ``--every``, which an
older login service runs, say so and exit 0). ``--from kitty|tmux`` saves
that terminal's layout instead: its windows, tabs and splits, and which
session each pane shows.

Which session a pane shows is told by the processes running in it: one of
them is ``multiserver attach NAME`` (or ``multiserver new -n NAME``, or a
bare ``multiserver``: the session ``main``), read with the ``new`` and
``attach`` commands' own argument specs (``attached_session``), so every
spelling they accept is recognised. ``--pane ID=NAME`` (for ``new`` and
``attach``, ``_pane``) says it of one pane outright.
"""

from __future__ import annotations

import argparse
import sys
from argparse import ArgumentParser, Namespace
from collections.abc import Sequence

from multiserver.internal import printable
from multiserver_cli import _args
from multiserver_cli._errors import CliError, UsageError
from multiserver_cli.commands import attach, new

NAME = "save"
HELP = "refresh the saved cwd and title of every live session, or save a terminal's layout"
EXAMPLE = "multiserver save --from tmux"


def add_arguments(p: ArgumentParser) -> None:
    # What an older login service runs (``save --scrollback --every 5``):
    # the daemon keeps what sessions show now; said once, exit 0.
    p.add_argument("--scrollback", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--every", type=float, metavar="S", help=argparse.SUPPRESS)
    p.add_argument("--until-idle", action="store_true", help=argparse.SUPPRESS)
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
    # --from: pane ID shows session NAME, whatever runs in it: what `new`
    # and `attach` run in the background inside a pane (_pane).
    p.add_argument("--pane", type=_pane_spec, metavar="ID=NAME", help=argparse.SUPPRESS)


def _pane_spec(text: str) -> tuple[int, str]:
    pane, sep, name = text.partition("=")
    if not (sep and pane.isdigit() and name):
        raise argparse.ArgumentTypeError(f"{text!r} is not ID=NAME")
    return int(pane), name


def run(args: Namespace) -> int:
    if args.from_terminal is not None:
        return _save_layout(args)
    if args.pane is not None:
        raise UsageError("--pane goes with --from")
    from multiserver_cli import _saver, _state
    from multiserver_cli._format import save_summary

    if args.every is not None or args.until_idle or args.scrollback:
        _state.warn(
            "what sessions show is kept by their daemon now, as it comes: nothing to run"
            " (multiserver service install brings an older login service up to date)"
        )
        return 0
    saver = _saver.Saver(number=_args.only_daemon(args))
    with _state.open_store() as store:
        if store is None:
            return 1
        report = saver.run_pass(store)
    for problem in report.problems:
        _state.warn(problem)
    print(save_summary(report.total, report.live, report.changed), file=sys.stderr)
    return 0


def _save_layout(args: Namespace) -> int:
    """``save --from kitty|tmux``: the terminal's layout becomes the saved
    arrangement's (one transaction)."""
    from multiserver_cli import _layouts, _state
    from multiserver_cli._format import plural
    from restore import Capture, StoreError, TerminalError, save_layout

    terminal = _layouts.terminal(args.from_terminal, args.to)
    with _state.open_store() as store:
        if store is None:
            return 1
        shown = dict([args.pane]) if args.pane is not None else {}
        try:
            how = Capture(attached_session, args.adopt_panes, tuple(new.user_shell()), shown)
            saved = save_layout(terminal, store, how)
        except TerminalError as exc:
            raise CliError(str(exc)) from exc
        except StoreError as exc:
            raise CliError(f"layout not saved: {exc}") from exc
    for line in saved.skipped:
        print(f"  not saved: {printable(line)}", file=sys.stderr)
    line = (
        f"saved the layout of {args.from_terminal}: {plural(saved.tabs, 'tab')},"
        f" {plural(saved.sessions, 'session')}"
    )
    if saved.adopted:
        line += f", {saved.adopted} pane(s) to start as new sessions at the next restore"
    print(line, file=sys.stderr)
    return 0


def attached_session(argv: Sequence[str]) -> str | None:
    """The session that ``argv`` (a process's arguments) attaches to, if it
    is this command attaching: ``attach NAME``, ``new [-A] -n NAME`` not
    detached, or no command at all (the session ``main``)."""
    import contextlib
    import io
    from pathlib import Path

    from multiserver.internal import NAME_RE

    rest: list[str] | None = None
    # The program itself, or a Python running it: its options, then the
    # script or -m (a file named multiserver given to vim is no attach).
    python = bool(argv) and Path(argv[0]).name.startswith("python")
    for i, arg in enumerate(argv):
        if i > 0 and not python:
            break
        if Path(arg).name == "multiserver":
            rest = list(argv[i + 1 :])
            break
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] == "multiserver_cli":
            rest = list(argv[i + 2 :])
            break
        if i > 0 and not arg.startswith("-"):
            break
    if rest is None:
        return None
    if all(a.startswith("--daemon") or a.isdigit() for a in rest):
        return "main"
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = _args.parser_for((new, attach)).parse_args(rest)
    except SystemExit:
        return None
    attaching = args.cmd == "attach" or (args.cmd == "new" and not args.detach)
    name: str | None = args.name if attaching else None
    return name if name is not None and NAME_RE.fullmatch(name) else None
