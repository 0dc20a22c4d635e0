"""A person's terminal layout: ``multiserver save --from kitty|tmux`` reads
it into the saved arrangement, ``multiserver restore --open
kitty|tmux|print`` opens it again (``restore/layout/``: the pure plan,
the terminals, the capture).

Which session a pane shows is told by the processes running in it: one of
them is ``multiserver attach NAME`` (or ``multiserver new -n NAME``, or a
bare ``multiserver``: the session ``main``), read with this command's own
parser, so every spelling it accepts is recognised.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import sys
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path

from multiserver import NAME_RE
from multiserver_cli import _state
from multiserver_cli._errors import CliError
from multiserver_cli._format import plural
from restore import (
    Arrangement,
    ArrangementStore,
    Capture,
    Kitty,
    Op,
    OpenTab,
    SplitPane,
    StoreError,
    TerminalError,
    Tmux,
    open_plan,
    save_layout,
    tab_size,
    without_sessions,
)

TERMINALS = ("kitty", "tmux")
OPENERS = (*TERMINALS, "print")
# Variables every pane gets from the restoring process: where the daemons
# and the store are (a terminal's panes start with the terminal's
# environment, not this one's).
PASSED_ENV_PREFIX = "MULTISERVER_"


def attached_session(argv: Sequence[str]) -> str | None:
    """The session that ``argv`` (a process's arguments) attaches to, if it
    is this command attaching: ``attach NAME``, ``new [-A] -n NAME`` not
    detached, or no command at all (the session ``main``)."""
    from multiserver_cli.main import build_parser

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
            args = build_parser().parse_args(rest)
    except SystemExit:
        return None
    attaching = args.cmd == "attach" or (args.cmd == "new" and not args.detach)
    name: str | None = args.name if attaching else None
    return name if name is not None and NAME_RE.fullmatch(name) else None


def _terminal(args: Namespace, which: str) -> Kitty | Tmux:
    if which == "kitty":
        return Kitty.at(args.to or os.environ.get("KITTY_LISTEN_ON"))
    if args.to:
        return Tmux(("tmux", "-S", args.to))
    return Tmux()


def cmd_save_from(args: Namespace) -> int:
    """``save --from kitty|tmux``: the terminal's layout becomes the saved
    arrangement's (one transaction)."""
    terminal = _terminal(args, args.from_terminal)
    with _state.open_store() as store:
        if store is None:
            return 1
        from multiserver_cli.commands.new import user_shell

        try:
            how = Capture(attached_session, args.adopt_panes, tuple(user_shell()))
            saved = save_layout(terminal, store, how)
        except TerminalError as exc:
            raise CliError(str(exc)) from exc
        except StoreError as exc:
            raise CliError(f"layout not saved: {exc}") from exc
    for line in saved.skipped:
        print(f"  not saved: {line}", file=sys.stderr)
    line = (
        f"saved the layout of {args.from_terminal}: {plural(saved.tabs, 'tab')},"
        f" {plural(saved.sessions, 'session')}"
    )
    if saved.adopted:
        line += f", {saved.adopted} pane(s) to start as new sessions at the next restore"
    print(line, file=sys.stderr)
    return 0


def _here() -> tuple[Kitty | Tmux, int] | None:
    """The terminal this process runs in, and its pane, if it is a tmux
    pane or a kitty window whose kitty listens on a socket."""
    pane = os.environ.get("TMUX_PANE", "")
    if os.environ.get("TMUX") and pane.startswith("%") and pane[1:].isdigit():
        return Tmux(), int(pane[1:])
    window = os.environ.get("KITTY_WINDOW_ID", "")
    address = os.environ.get("KITTY_LISTEN_ON")
    if address and window.isdigit():
        return Kitty.at(address), int(window)
    return None


def track_pane(name: str) -> None:
    """Inside a tmux pane or a kitty window, record the terminal's layout
    with session ``name`` in this pane, as ``save --from`` would, in a
    child process that nobody waits for: attaching does not wait for
    tmux or kitty, and a layout that cannot be read is not said over the
    session's screen (``save --from`` says why)."""
    here = _here()
    if here is None:
        return
    terminal, pane = here
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child != 0:
        # The child forks the one that works and exits at once: reaped
        # here, so no zombie waits for the attach to end.
        os.waitpid(child, 0)
        return
    if os.fork() != 0:
        os._exit(0)
    try:  # the grandchild: its own session, nothing on the terminal, in /
        os.setsid()
        os.chdir("/")
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with ArrangementStore.open() as store:
            save_layout(terminal, store, Capture(attached_session, shown={pane: name}))
    except BaseException:
        os._exit(1)
    os._exit(0)


def attach_argv() -> tuple[str, ...]:
    """How a pane runs this command: the ``multiserver`` next to this
    interpreter (a venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "multiserver"
    exe = str(beside) if beside.exists() else (shutil.which("multiserver") or "multiserver")
    return (exe, "attach")


def open_layout(
    arrangement: Arrangement, which: str, held: set[str], args: Namespace
) -> tuple[list[Op], list[str]]:
    """Open ``arrangement`` in terminal ``which`` (``print``: print the
    commands), leaving out the sessions in ``held`` (a client holds them)
    unless ``args.steal``. Returns the plan and a line per session left
    out."""
    left = set() if args.steal else held
    lines = [f"{name}: held by a client, left where it is" for name in sorted(left)]
    shown = without_sessions(arrangement, left)
    # attach takes a session from the client holding it: --steal only
    # decides whether held sessions get a pane.
    exe = attach_argv()
    ops = open_plan(shown, lambda leaf: (*exe, leaf.name))
    if which == "print":
        print(print_plan(ops))
        return ops, lines
    env = {k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV_PREFIX)}
    terminal = _terminal(args, which)
    try:
        if isinstance(terminal, Tmux):
            sizes = {w.name: _window_size(w.tabs) for w in shown.windows}
            terminal.open(ops, env, sizes)
        else:
            terminal.open(ops, env)
    except TerminalError as exc:
        raise CliError(str(exc)) from exc
    if which == "tmux" and ops:
        server = f"-S {shlex.quote(args.to)} " if args.to else ""
        first = shlex.quote(ops[0].window) if isinstance(ops[0], OpenTab) else "..."
        how = "switch-client" if os.environ.get("TMUX") and not args.to else "attach"
        lines.append(f"in tmux, detached: see it with `tmux {server}{how} -t {first}`")
    return ops, lines


def _window_size(tabs: Sequence[object]) -> tuple[int, int]:
    sizes = [tab_size(t.root) for t in tabs]  # type: ignore[attr-defined]
    return max(c for c, _ in sizes), max(r for _, r in sizes)


def print_plan(ops: Sequence[Op]) -> str:
    """The plan as a shell script for WezTerm's ``wezterm cli``, which other
    terminals' users can adapt (each line is one tab or one split)."""
    lines = ["#!/bin/sh", "# multiserver restore --open print: the layout, for WezTerm", "set -e"]
    first = ""
    for op in ops:
        cmd = shlex.join(op.command.argv)
        cwd = shlex.quote(op.command.cwd)
        var = f"p{op.pane}"
        if isinstance(op, OpenTab):
            if op.new_window:
                where = "--new-window"
                first = var
            else:
                where = f'--pane-id "${first}"'
            lines.append(f"# {op.window} / {op.title}")
            lines.append(f"{var}=$(wezterm cli spawn {where} --cwd {cwd} -- {cmd})")
            lines.append(f'wezterm cli set-tab-title --pane-id "${var}" {shlex.quote(op.title)}')
        else:
            assert isinstance(op, SplitPane)
            side = "--right" if op.vertical else "--bottom"
            lines.append(
                f'{var}=$(wezterm cli split-pane --pane-id "$p{op.target}" {side}'
                f" --percent {op.percent} --cwd {cwd} -- {cmd})"
            )
    return "\n".join(lines)
