"""The adopter's pure policy: what is an orphan, what is stale, what is
unresponsive, and what an adopted session is called. No I/O.

    socket file ──owner/mode checks fail──────────────> refused (never connected)
        │
        ├─ connect refused, lock free ────────────────> stale: unlink socket + lock
        ├─ connect refused, lock held ────────────────> unresponsive (starting or exiting)
        ├─ connected, no hello within the bound ──────> unresponsive: try next sweep
        └─ hello ─────────────────────────────────────> live: adopt its orphans

On another host (its answer to a restore, after its timeout: ``_late_host``)
an orphan is a running session there, not held, of the host's own daemons,
whose child no leaf references and whose name is no saved session's there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set as AbstractSet
from typing import Literal

from multiserver import ChildInfo
from multiserver.internal import escaped
from restore import Arrangement, HostChild, SessionLeaf, norm_socket, relaunch_of

SocketState = Literal["live", "stale", "unresponsive", "refused"]
# A report row is about a socket, or about a late arrival of a restore.
RowState = Literal["live", "stale", "unresponsive", "refused", "late"]
ORPHAN_WINDOW = "orphans"
ORPHAN_NOTICE = (
    "\x1b[0m[multiserver: this process was running but its session was not restored, "
    "so its earlier output was not saved]\r\n"
)


def late_notice(name: str) -> str:
    """What the first attach to the late original of ``name`` shows first."""
    return (
        f"\x1b[0m[multiserver: this process ran as {name} too, the name of another saved"
        f" session (most often: its daemon answered a restore too late, and {name} was"
        " started again); it is kept as it was]\r\n"
    )


def classify(*, connected: bool, answered: bool, lock_held: bool) -> SocketState:
    """The state of a socket that passed the ownership checks."""
    if connected:
        return "live" if answered else "unresponsive"
    return "unresponsive" if lock_held else "stale"


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
    ``by_name(arrangement)``; see ``restore.relaunch_of``)."""
    sock = norm_socket(socket)
    leaves = saved or {}
    return [
        c
        for c in children
        if not c.held
        and (sock, instance_id, c.id) not in refs
        and not relaunch_of(c, socket, instance_id, leaves.get(c.name))
    ]


def referenced_anywhere(arrangement: Arrangement) -> set[tuple[str, int]]:
    """(daemon instance, child id) of every leaf's child, whatever its host
    or socket: an instance id names one run of one daemon on any machine,
    so two host names for one machine still find the same child."""
    return {
        (leaf.ref.instance_id, leaf.ref.child_id)
        for leaf in arrangement.leaves()
        if leaf.ref is not None
    }


def host_relaunch_of(found: HostChild, host: str, arrangement: Arrangement) -> SessionLeaf | None:
    """The saved session on another host that ``found`` is, or may be, the
    relaunch of (as ``relaunch_of``, there): one of ``host`` named as it is
    (a daemon there has one child of a name: adopting it would make two
    sessions of one name), or one of any host named as it is whose child
    lived on the same daemon (another name for the same machine)."""
    for leaf in arrangement.leaves():
        there, sep, name = leaf.name.rpartition(":")
        if not sep or name != found.child.name:
            continue
        if there == host:
            return leaf
        if leaf.ref is not None and leaf.ref.instance_id == found.instance_id:
            return leaf
    return None


def host_orphan(found: HostChild, host: str, arrangement: Arrangement) -> str | None:
    """Why ``found``, a session of ``host``, is not an orphan to adopt
    (None: it is one): it ended (there is nothing to attach to), a client
    holds it (it belongs to its holder), it is its host's host's, a leaf
    references it, or it is a saved session's relaunch."""
    c = found.child
    if found.via is not None:
        return f"{c.name} is on {found.via}, a host of {host}"
    if c.state != "running":
        return f"{c.name} has ended"
    if c.held:
        return f"{c.name} is held by a client there"
    if (found.instance_id, c.id) in referenced_anywhere(arrangement):
        return f"{c.name} is a saved session already"
    leaf = host_relaunch_of(found, host, arrangement)
    if leaf is not None:
        return f"{c.name} is saved session {leaf.name}'s name there"
    return None


def command_line(argv: list[str]) -> str:
    """``argv`` for a person (a title, a report's detail): bytes that are
    not UTF-8 escaped (``caf\\xe9``), so any report can print it."""
    return " ".join(map(escaped, argv))
