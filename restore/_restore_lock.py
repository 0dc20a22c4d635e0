"""One restore at a time: the restore lock in the state dir, with the pid
of its holder for one that waits, and the report each restore leaves
beside it, which a restore that waited shows as its own
(docs/restore.md, "One restore at a time").

Two terminals opening at login run two restores: run at the same moment,
both would claim and relaunch the same sessions; run one after the other,
the second would find every session attached and report none relaunched.
So the second waits for the first and reports the first's outcomes.

Light (os and json): the command line's path with nothing to restore takes
the lock and leaves a report without importing trio. ``adopter``'s login
procedure waits for the lock and writes the report through these.
"""

from __future__ import annotations

import contextlib
import json
import os

from multiserver.internal import try_lock, write_whole

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

RESTORE_LOCK = "restore.lock"
# The outcomes of the last restore, for one that waited for it.
RESTORE_REPORT = "restore-report.json"


def take_restore_lock(state: Path) -> int:
    """The restore lock of the state dir ``state``, taken without waiting,
    this process's pid written in it (``restore_lock_holder``); the locked
    fd is the caller's, and closing it lets go. LockBusy while another
    process holds it."""
    fd = try_lock(state / RESTORE_LOCK)
    with contextlib.suppress(OSError):  # who holds it: only for a person
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def restore_lock_holder(state: Path) -> int | None:
    """The pid the holder of the restore lock wrote, if it can be read."""
    try:
        return int((state / RESTORE_LOCK).read_text().strip())
    except (OSError, ValueError):
        return None


def restore_report_identity(state: Path) -> tuple[int, int, int] | None:
    """Which report is there now (device, inode, mtime), if one is: a
    restore that waited compares it with the one before its wait."""
    try:
        st = os.stat(state / RESTORE_REPORT)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def keep_restore_report(state: Path, report: Mapping[str, object]) -> None:
    """Leave ``report`` (as JSON) for a restore that waits: whole or not at
    all, since it may read it the moment the lock is free. OSError if it
    cannot be written (which costs only the waiter's copy)."""
    write_whole(state / RESTORE_REPORT, json.dumps(report).encode())


def read_restore_report(state: Path) -> dict[str, Any] | None:
    """The report the last restore left, if there is one that reads as
    one (an object with a list of sessions)."""
    try:
        with open(state / RESTORE_REPORT) as f:
            out = json.load(f)
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) and isinstance(out.get("sessions"), list) else None
