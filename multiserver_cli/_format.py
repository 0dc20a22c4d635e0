"""Tables for people."""

from __future__ import annotations

import json
import os
import shlex
import sys

from multiserver import describe_exit
from multiserver.internal import SOCKET_RE, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from multiserver import ChildInfo
    from restore import SessionLeaf


def print_json(value: object) -> None:
    """``--json`` output: indented for a person at a terminal, one compact
    line for a script (the indenting encoder is pure Python: 5-10x slower,
    30 ms for a restore of 1,000 sessions)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(value, indent=indent) + "\n")


def human_age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}K"
    return f"{n / (1024 * 1024):.1f}M"


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def table(header: list[str], rows: list[list[str]], squeeze: Sequence[str] = ()) -> str:
    """Columns for a person; every cell ``printable`` (a name, an argv or a
    detail that came from a program cannot act on the terminal). At a
    terminal, the columns named in ``squeeze`` are cut (``…``), widest
    first, until a row fits its width (issue 36: a row wrapped at 120
    columns is every row wrapped); to a pipe, nothing is cut."""
    rows = [[printable(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    room = _terminal_width()
    cut = [i for i, h in enumerate(header) if h in squeeze]
    if room is not None and cut:
        over = sum(widths) + 2 * (len(widths) - 1) - room
        while over > 0:
            widest = max(cut, key=lambda i: widths[i])
            least = max(len(header[widest]), 8)
            if widths[widest] <= least:
                break
            step = min(over, widths[widest] - least)
            widths[widest] -= step
            over -= step
        rows = [[_truncate(c, widths[i]) for i, c in enumerate(r)] for r in rows]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _terminal_width() -> int | None:
    """The columns of the terminal stdout is, if it is one and says
    (``$COLUMNS`` first, as ``shutil.get_terminal_size`` reads it; a
    terminal of 0 columns says nothing)."""
    if not sys.stdout.isatty():
        return None
    given = os.environ.get("COLUMNS", "")
    if given.isascii() and given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or None
    except (OSError, ValueError):
        return None


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def save_summary(total: int, live: int, changed: int) -> str:
    """What ``save`` did: every saved session is saved; ``live`` of them
    were asked for their cwd and title, ``changed`` of those had moved on."""
    if total == 0:
        return "nothing to save: no saved sessions"
    line = f"saved {plural(total, 'session')} ({changed} updated"
    if total > live:
        gone = total - live
        line += f"; {gone} not running, kept as {'it was' if gone == 1 else 'they were'}"
    return line + ")"


def daemon_label(socket: str | os.PathLike[str]) -> str:
    """A daemon as `--daemon N` names it: its number, else its socket's name;
    one in no socket dir of this login (another runtime dir's, named by a
    saved session) by its whole path, which no `--daemon N` names. (A
    string will do: `ls` asks once a session, 1,000 Paths cost 3 ms; and
    once a socket.)"""
    path = os.fspath(socket)
    label = _LABELS.get(path)
    if label is None:
        text = socket_text(path)  # a whole path never matches SOCKET_RE
        m = SOCKET_RE.match(text)
        label = _LABELS[path] = m.group(1) if m else text
    return label


_LABELS: dict[str, str] = {}


def socket_text(socket: str | os.PathLike[str]) -> str:
    """A daemon's socket for a person: its file name in a socket dir of this
    login, else its whole path (two daemons 1 of two runtime dirs)."""
    path = os.fspath(socket)
    head, name = os.path.split(path)
    return path if head and os.path.normpath(head) not in _socket_dirs() else name


_DIRS: list[str] = []


def _socket_dirs() -> list[str]:
    if not _DIRS:
        from multiserver.internal import socket_dirs

        _DIRS.extend(os.path.normpath(d) for d in socket_dirs())
    return _DIRS


def _command_cells(argv: Sequence[str], cwd: str) -> list[str]:
    """COMMAND and CWD of a row: ``printable``, then cut to their column."""
    return [_truncate(shlex.join(printable(a) for a in argv), 40), _truncate(printable(cwd), 40)]


def waiting_text(waiting: tuple[int, int] | None) -> str:
    """WAITING: (bytes kept, bytes dropped) since the last detach; None
    while a client holds the session (it shows everything)."""
    if waiting is None:
        return "-"
    kept, dropped = waiting
    text = human_bytes(kept)
    if dropped:
        text += f" (+{human_bytes(dropped)} dropped)"
    return text


def holding(child: ChildInfo) -> tuple[int, int]:
    """How many clients hold ``child``, and how many of those only watch.
    A daemon before sharing (protocol 9) says only ``held``: one holder."""
    holders = max(child.holders, 1 if child.held else 0)
    return holders, min(child.watchers, holders)


def held_text(holders: int, watchers: int) -> str:
    """HELD: how many clients hold it, the read-only ones said apart
    (``3 (1 ro)``); ``-`` when none."""
    if not holders:
        return "-"
    return f"{holders} ({watchers} ro)" if watchers else str(holders)


def ls_table(
    children: list[ChildInfo],
    now: float,
    daemons: list[str] | None = None,
    waiting: list[tuple[int, int] | None] | None = None,
    saved: Sequence[tuple[SessionLeaf, str]] = (),
    notes: Sequence[str | None] = (),
) -> str:
    """``daemons``: each child's daemon, for a DAEMON column (when the
    children come from more than one). ``waiting``: each child's WAITING
    figures (default: what its daemon buffers). ``saved``: saved sessions
    with no live child and their STATE, listed after the children (DAEMON:
    their host's name, if any; WAITING: their saved output). ``notes``: what each child's STATE adds, if
    anything. HELD: how many clients hold each (``held_text``). An argv
    or cwd is shown ``printable`` (``caf\\xe9``,
    ``sleep 100 # \\x1b]0;T\\x07``), then cut to its column."""
    if waiting is None:
        waiting = [(c.buffered_bytes, c.dropped_bytes) for c in children]
    rows = []
    notes = list(notes) or [None] * len(children)
    for c, w, note in zip(children, waiting, notes, strict=True):
        state = "running" if c.exit_code is None else describe_exit(c.exit_code)
        state = state if note is None else f"{state} ({note})"
        rows.append(
            [
                c.name,
                state,
                held_text(*holding(c)),
                *_command_cells(c.argv, c.cwd),
                human_age(now - c.started_at),
                waiting_text(w),
            ]
        )
    header = ["NAME", "STATE", "HELD", "COMMAND", "CWD", "AGE", "WAITING"]
    if daemons is not None:
        header.insert(1, "DAEMON")
        rows = [[r[0], d, *r[1:]] for r, d in zip(rows, daemons, strict=True)]
    for leaf, state in saved:
        row = [
            leaf.name,
            state,
            "-",
            *_command_cells(leaf.argv, leaf.cwd),
            human_age(now - leaf.created_at) if leaf.created_at else "-",
            human_bytes(len(leaf.scrollback or b"")),
        ]
        rows.append(row if daemons is None else [row[0], leaf.host or "-", *row[1:]])
    return table(header, rows, squeeze=("COMMAND", "CWD", "STATE"))
