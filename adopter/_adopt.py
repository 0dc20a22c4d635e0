"""Adoption: an orphaned child becomes a session of the ``orphans`` window.

Exactly once, even with two sweeps (or a sweep and a late restore) at once:
the child is claimed first (the daemon hands it to one claimer only; the loser
gets EBUSY), and the leaf is recorded in one transaction that refuses a child
some leaf already references. Only then is the claim released (or kept, by an
app that shows the session).

A session on another host (a host's late answer to restore) is claimed by
nobody here: that transaction is its only guard, and it compares daemon
instance and child id over every leaf, so two names for one host never
save one session twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs

from adopter._policy import (
    ORPHAN_NOTICE,
    ORPHAN_WINDOW,
    command_line,
    host_orphan,
    late_notice,
    referenced,
)
from multiserver import ChildInfo
from restore import (
    Arrangement,
    ArrangementStore,
    HostChild,
    RestorationRef,
    SessionLeaf,
    late_name,
    norm_socket,
    relaunch_of,
)


class OrphanSink(Protocol):
    """Where adopted sessions are recorded."""

    def arrangement(self) -> Arrangement: ...

    def record(self, child: ChildInfo, socket: str, instance_id: str) -> SessionLeaf | None:
        """Add a leaf for ``child`` in the orphans window, unless a leaf
        references it already (then None). Atomic."""
        ...

    def record_host(self, host: str, found: HostChild) -> SessionLeaf | None:
        """As ``record``, for a session of another host."""
        ...

    def update_session(self, leaf: SessionLeaf) -> None:
        """Replace the saved session of ``leaf``'s name (a late host's
        session started again there); KeyError if there is none."""
        ...


def orphan_leaf(
    arrangement: Arrangement, child: ChildInfo, socket: str, instance_id: str
) -> SessionLeaf | None:
    """The leaf to add for ``child``, or None if it is not an orphan (a leaf
    references it, or it is a saved session's lost relaunch: see ``orphans``)."""
    if (norm_socket(socket), instance_id, child.id) in referenced(arrangement):
        return None
    namesake = arrangement.find(child.name)
    if relaunch_of(child, socket, instance_id, namesake):
        return None
    if namesake is not None:  # the late original of a session started again
        taken = [leaf.name for leaf in arrangement.leaves()]
        name, notice = late_name(child.name, taken), late_notice(child.name)
    else:  # its own name: the one the person gave it (a store lost, say)
        name, notice = child.name, ORPHAN_NOTICE
    return SessionLeaf(
        name=name,
        argv=list(child.argv),
        cwd=child.cwd,
        rows=child.rows,
        cols=child.cols,
        title=command_line(child.argv),
        ref=RestorationRef(norm_socket(socket), instance_id, child.id, child.pid),
        created_at=child.started_at,
        notice=notice.encode(),
    )


def host_orphan_leaf(arrangement: Arrangement, host: str, found: HostChild) -> SessionLeaf | None:
    """The leaf to add for ``found``, a session of ``host`` that is an
    orphan (``host_orphan``), or None if it is not: ``HOST:NAME`` (the
    name ``attach`` takes for it), its ref the child there."""
    if host_orphan(found, host, arrangement) is not None:
        return None
    c = found.child
    return SessionLeaf(
        name=f"{host}:{c.name}",
        argv=list(c.argv),
        cwd=c.cwd,
        title=command_line(c.argv),
        ref=RestorationRef(found.socket, found.instance_id, c.id, c.pid),
        created_at=c.started_at,
        notice=ORPHAN_NOTICE.encode(),
        host=host,
    )


# What an adoption adds to an arrangement: a leaf, or None (not an orphan).
_Adoption = Callable[[Arrangement], SessionLeaf | None]


@attrs.define
class MemorySink:
    """An in-memory arrangement (apps that keep their own state; tests)."""

    current: Arrangement = attrs.Factory(Arrangement)

    def arrangement(self) -> Arrangement:
        return self.current

    def record(self, child: ChildInfo, socket: str, instance_id: str) -> SessionLeaf | None:
        return self._add(lambda arr: orphan_leaf(arr, child, socket, instance_id))

    def record_host(self, host: str, found: HostChild) -> SessionLeaf | None:
        return self._add(lambda arr: host_orphan_leaf(arr, host, found))

    def update_session(self, leaf: SessionLeaf) -> None:
        self.current = self.current.replace_session(leaf)

    def _add(self, adoption: _Adoption) -> SessionLeaf | None:
        leaf = adoption(self.current)
        if leaf is not None:
            self.current = self.current.with_session(leaf, ORPHAN_WINDOW)
        return leaf


@attrs.define
class StoreSink:
    """The saved arrangement: each adoption is one SQLite transaction."""

    store: ArrangementStore

    def arrangement(self) -> Arrangement:
        return self.store.load()

    def record(self, child: ChildInfo, socket: str, instance_id: str) -> SessionLeaf | None:
        return self._add(lambda arr: orphan_leaf(arr, child, socket, instance_id))

    def record_host(self, host: str, found: HostChild) -> SessionLeaf | None:
        return self._add(lambda arr: host_orphan_leaf(arr, host, found))

    def update_session(self, leaf: SessionLeaf) -> None:
        self.store.update_session(leaf)

    def _add(self, adoption: _Adoption) -> SessionLeaf | None:
        """One transaction: the arrangement read again, the leaf added
        unless it is no orphan by then."""
        added: list[SessionLeaf] = []

        def change(arr: Arrangement) -> Arrangement:
            added.clear()
            leaf = adoption(arr)
            if leaf is None:
                return arr
            added.append(leaf)
            return arr.with_session(leaf, ORPHAN_WINDOW)

        self.store.modify(change)
        return added[0] if added else None
