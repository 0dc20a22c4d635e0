"""Tables for people."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from multiserver import ChildInfo, escaped
from multiserver._paths import SOCKET_RE


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


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def daemon_label(socket: Path) -> str:
    """A daemon as `--daemon N` names it: its number, else its socket's name."""
    m = SOCKET_RE.match(socket.name)
    return m.group(1) if m else socket.name


def ls_table(children: list[ChildInfo], now: float, daemons: list[str] | None = None) -> str:
    """``daemons``: each child's daemon, for a DAEMON column (when the
    children come from more than one). An argv or cwd that is not UTF-8 is
    shown escaped (``caf\\xe9``)."""
    rows = []
    for c in children:
        state = "running" if c.state == "running" else f"exited {c.exit_code}"
        waiting = human_bytes(c.buffered_bytes)
        if c.dropped_bytes:
            waiting += f" (+{human_bytes(c.dropped_bytes)} dropped)"
        rows.append(
            [
                c.name,
                state,
                "held" if c.held else "-",
                _truncate(shlex.join(escaped(a) for a in c.argv), 40),
                _truncate(escaped(c.cwd), 40),
                human_age(now - c.started_at),
                waiting,
            ]
        )
    header = ["NAME", "STATE", "HELD", "COMMAND", "CWD", "AGE", "WAITING"]
    if daemons is not None:
        header.insert(1, "DAEMON")
        rows = [[r[0], d, *r[1:]] for r, d in zip(rows, daemons, strict=True)]
    return table(header, rows)
