"""What ``restore`` and ``orphans`` print: a restored session and a sweep's
row as ``--json`` gives them, restore's outcomes as a table, and the file
through which a restore that waited for another one reports that one's
outcomes as its own."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from multiserver.internal import printable
from multiserver_cli import _state
from multiserver_cli._format import print_json, socket_text, table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from adopter import SweepRow
    from restore import RestoredSession

# The outcomes of the last restore, for one that waited for it (in the state dir).
RESTORE_REPORT = "restore-report.json"


def session_row(s: RestoredSession) -> dict[str, object]:
    return {
        "name": s.leaf.name,
        "outcome": s.outcome,
        "daemon": s.daemon,
        "detail": s.detail,
        "exit_code": s.exit_code,
        "seconds": round(s.elapsed, 4),
    }


def sweep_row(r: SweepRow) -> dict[str, object]:
    return {
        "socket": r.socket,
        "state": r.state,
        "action": r.action,
        "name": r.name,
        "detail": r.detail,
        "exit_code": r.exit_code,
    }


# --- the report a waiting restore reads ----------------------------------------------


def identity(path: Path) -> tuple[int, int, int] | None:
    """Which file ``path`` is now (device, inode, mtime), if it is one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def write_report(path: Path, out: dict[str, object]) -> None:
    """Whole or not at all (another restore may read it the moment the lock
    is free); a report that cannot be written costs only the waiter's copy."""
    from multiserver.internal import write_whole

    try:
        write_whole(path, json.dumps(out).encode())
    except OSError as exc:
        _state.warn(f"could not keep the restore's report for a restore that waits: {exc}")


def read_report(path: Path) -> dict[str, object] | None:
    try:
        with open(path) as f:
            out = json.load(f)
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) and isinstance(out.get("sessions"), list) else None


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
