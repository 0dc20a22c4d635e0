"""A person's terminal layout opened again: ``multiserver restore --open
kitty|tmux|print`` opens the saved arrangement's windows, tabs and splits,
each pane attaching to its session (``restore/layout/``: the pure plan,
the terminals). ``save --from`` reads a layout in (``commands/save.py``);
both reach their terminal through ``terminal``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path

from multiserver_cli._errors import CliError
from restore import (
    Arrangement,
    Kitty,
    Op,
    OpenTab,
    SplitPane,
    TerminalError,
    Tmux,
    open_plan,
    tab_size,
    without_sessions,
)

TERMINALS = ("kitty", "tmux")
OPENERS = (*TERMINALS, "print")
# Variables every pane gets from the restoring process: where the daemons
# and the store are (a terminal's panes start with the terminal's
# environment, not this one's).
PASSED_ENV_PREFIX = "MULTISERVER_"


def terminal(which: str, to: str | None) -> Kitty | Tmux:
    """Terminal ``which`` (kitty or tmux), at ``to`` (``--to``) or where it
    says it is."""
    if which == "kitty":
        return Kitty.at(to or os.environ.get("KITTY_LISTEN_ON"))
    if to:
        return Tmux(("tmux", "-S", to))
    return Tmux()


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
    where = terminal(which, args.to)
    try:
        if isinstance(where, Tmux):
            sizes = {w.name: _window_size(w.tabs) for w in shown.windows}
            where.open(ops, env, sizes)
        else:
            where.open(ops, env)
    except TerminalError as exc:
        raise CliError(str(exc)) from exc
    if which == "tmux" and ops:
        lines.append(tmux_hint(ops, args.to))
    return ops, lines


def tmux_hint(ops: Sequence[Op], to: str | None) -> str:
    """Where ``ops`` opened in tmux: each tmux session made (one per saved
    window), detached, and how to see them."""
    server = f"-S {shlex.quote(to)} " if to else ""
    made = list(dict.fromkeys(op.window for op in ops if isinstance(op, OpenTab)))
    how = "switch-client" if os.environ.get("TMUX") and not to else "attach"
    names = ", ".join(shlex.quote(w) for w in made)
    noun = "session" if len(made) == 1 else "sessions"
    return (
        f"in tmux, detached: tmux {noun} {names}; see one with"
        f" `tmux {server}{how} -t {shlex.quote(made[0])}`"
    )


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
            lines.append(f"# {_one_line(op.window)} / {_one_line(op.title)}")
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


def _one_line(name: str) -> str:
    """A name in a comment of the script: ``printable`` (``caf\\xe9``,
    ``\\n``), so that nothing in a name ends the comment and runs as a line
    of its own, or acts on the terminal the script is printed to."""
    from multiserver.internal import printable

    return printable(name)
