"""What ``restore`` prints: its outcomes as a table (or as ``--json``
gives them: ``adopter.LoginReport.as_json``), and the line said when the
report a restore that waits would read could not be kept."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from multiserver.internal import printable
from multiserver_cli import _state
from multiserver_cli._format import print_json, socket_text, table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def not_kept(exc: OSError) -> None:
    """The report a restore that waits reads could not be written: that
    costs only the waiter's copy (it restores itself)."""
    _state.warn(f"could not keep the restore's report for a restore that waits: {exc}")


# --- for a person ------------------------------------------------------------------------


def show(out: dict[str, Any], as_json: bool, script: bool = False, said: bool = False) -> int:
    """Print a restore's outcomes; its exit status. ``script``: stdout is a
    script's (``--open print``), so the table goes to stderr. ``said``:
    each session's outcome was said as it came, on stderr; where stderr and
    stdout are one terminal the table leaves them out (issue 36: every
    session twice), and keeps the sweep's rows."""
    status = 0 if out.get("ok") and out.get("saved", True) and out.get("opened_ok", True) else 1
    if not as_json:
        for line in out.get("opened", []):
            print(f"  {printable(line)}", file=sys.stderr)
    if not out.get("saved", True):
        _state.warn(
            "the store did not take every outcome (see each session's detail);"
            " the next restore settles them"
        )
    if as_json:
        print_json(out)
        return status
    rows = out["sessions"]
    if said and not script and _one_terminal():
        rows = []
    table_rows = [
        [
            str(r["name"]),
            str(r["outcome"]),
            socket_text(str(r["daemon"])) if r["daemon"] else "-",
            str(r["detail"]),
            f"{r['seconds']:.3f}s",
        ]
        for r in rows
    ]
    table_rows += [
        [
            str(r["name"] or "-"),
            f"sweep: {r['action']}",
            _daemon_label(str(r["socket"])),
            str(r["detail"]),
            "",
        ]
        for r in out["sweep"]
    ]
    if table_rows:
        print(
            table(
                ["NAME", "OUTCOME", "DAEMON", "DETAIL", "TIME"],
                table_rows,
                squeeze=("DETAIL", "DAEMON"),
            ),
            file=sys.stderr if script else sys.stdout,
        )
    elif not out["sessions"]:
        print("nothing to restore", file=sys.stderr)
    return status


def _one_terminal() -> bool:
    """Whether stdout and stderr are the same terminal (a person reads both)."""
    try:
        if not (sys.stdout.isatty() and sys.stderr.isatty()):
            return False
        return os.fstat(sys.stdout.fileno()).st_rdev == os.fstat(sys.stderr.fileno()).st_rdev
    except (OSError, ValueError):
        return False


def _daemon_label(socket: str) -> str:
    """A sweep row's daemon for a person: its socket's file name, after
    ``HOST:`` for a daemon on another host (``db1:multiserver-daemon-1.socket``)."""
    host, sep, path = socket.partition(":")
    if sep and not socket.startswith("/"):
        return f"{host}:{Path(path).name}"
    return socket_text(socket)
