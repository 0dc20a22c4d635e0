"""The adopter's pure policy: what is an orphan, what is stale, what is
unresponsive, and what an adopted session is called. No I/O.

    socket file ──owner/mode checks fail──────────────> refused (never connected)
        │
        ├─ connect refused, lock free ────────────────> stale: unlink socket + lock
        ├─ connect refused, lock held ────────────────> unresponsive (starting or exiting)
        ├─ connected, no hello within the bound ──────> unresponsive: try next sweep
        └─ hello ─────────────────────────────────────> live: adopt its orphans
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Literal

from multiserver import ChildInfo, escaped
from restore import Arrangement

SocketState = Literal["live", "stale", "unresponsive", "refused"]
# A report row is about a socket, or about a late arrival of a restore.
RowState = Literal["live", "stale", "unresponsive", "refused", "late"]
ORPHAN_WINDOW = "orphans"
ORPHAN_NOTICE = (
    "\x1b[0m[multiserver: this process was running but its session was not restored, "
    "so its earlier output was not saved]\r\n"
)


def classify(*, connected: bool, answered: bool, lock_held: bool) -> SocketState:
    """The state of a socket that passed the ownership checks."""
    if connected:
        return "live" if answered else "unresponsive"
    return "unresponsive" if lock_held else "stale"


def norm_socket(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.fspath(path))


def referenced(arrangement: Arrangement) -> set[tuple[str, str, int]]:
    """(socket, daemon instance, child id) of every leaf's child."""
    return {
        (norm_socket(leaf.ref.socket), leaf.ref.instance_id, leaf.ref.child_id)
        for leaf in arrangement.leaves()
        if leaf.ref is not None
    }


def orphans(
    children: Iterable[ChildInfo],
    socket: str,
    instance_id: str,
    refs: AbstractSet[tuple[str, str, int]],
) -> list[ChildInfo]:
    """Children (running or exited) that nobody holds and no leaf references
    (``refs``: ``referenced(arrangement)``, computed once per sweep)."""
    sock = norm_socket(socket)
    return [c for c in children if not c.held and (sock, instance_id, c.id) not in refs]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def command_line(argv: list[str]) -> str:
    """``argv`` for a person (a title, a report's detail): bytes that are
    not UTF-8 escaped (``caf\\xe9``), so any report can print it."""
    return " ".join(map(escaped, argv))


def orphan_name(argv: list[str], taken: Iterable[str]) -> str:
    """``orphan-<command>-N`` with the smallest N not taken."""
    base = os.path.basename(argv[0]) if argv else "process"
    base = _UNSAFE.sub("_", base).strip("._-")[:40] or "process"
    used = set(taken)
    n = 1
    while f"orphan-{base}-{n}" in used:
        n += 1
    return f"orphan-{base}-{n}"
