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
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Literal

from multiserver import ChildInfo, escaped
from restore import Arrangement, SessionLeaf

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


def by_name(arrangement: Arrangement) -> dict[str, SessionLeaf]:
    """The saved sessions by name."""
    return {leaf.name: leaf for leaf in arrangement.leaves()}


def relaunch_of(child: ChildInfo, socket: str, instance_id: str, leaf: SessionLeaf | None) -> bool:
    """Whether ``child`` is the saved session ``leaf``'s own relaunch whose
    record was lost (a crash, a store that could not be written): its
    daemon calls it by the session's name, and the session was relaunched
    there (its intent names this run of the daemon) or lived on this daemon
    (its ref: a daemon has one child of a name, so the session's own child
    would be this one). Restore takes such a child back as the session;
    adopted, it would run twice under two names. A child of that name on
    another daemon (a late arrival of a session relaunched elsewhere) is
    an orphan."""
    if leaf is None or leaf.name != child.name:
        return False
    sock = norm_socket(socket)
    intent = leaf.pending_launch
    if intent is not None and (norm_socket(intent.socket), intent.instance_id) == (
        sock,
        instance_id,
    ):
        return True
    return leaf.ref is not None and norm_socket(leaf.ref.socket) == sock


def orphans(
    children: Iterable[ChildInfo],
    socket: str,
    instance_id: str,
    refs: AbstractSet[tuple[str, str, int]],
    saved: Mapping[str, SessionLeaf] | None = None,
) -> list[ChildInfo]:
    """Children (running or exited) that nobody holds and no leaf references
    (``refs``: ``referenced(arrangement)``, computed once per sweep), and
    that are no saved session's lost relaunch (``saved``:
    ``by_name(arrangement)``; see ``relaunch_of``)."""
    sock = norm_socket(socket)
    leaves = saved or {}
    return [
        c
        for c in children
        if not c.held
        and (sock, instance_id, c.id) not in refs
        and not relaunch_of(c, socket, instance_id, leaves.get(c.name))
    ]


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
