"""Adoption: an orphaned child becomes a session of the ``orphans`` window.

Exactly once, even with two sweeps (or a sweep and a late restore) at once:
the child is claimed first (the daemon hands it to one claimer only; the loser
gets EBUSY), and the leaf is recorded in one transaction that refuses a child
some leaf already references. Only then is the claim released (or kept, by an
app that shows the session).
"""

from __future__ import annotations

from typing import Protocol

import attrs

from adopter._policy import (
    ORPHAN_NOTICE,
    ORPHAN_WINDOW,
    command_line,
    norm_socket,
    orphan_name,
    referenced,
    relaunch_of,
)
from multiserver import ChildInfo
from restore import Arrangement, ArrangementStore, RestorationRef, SessionLeaf


class OrphanSink(Protocol):
    """Where adopted sessions are recorded."""

    def arrangement(self) -> Arrangement: ...

    def record(self, child: ChildInfo, socket: str, instance_id: str) -> SessionLeaf | None:
        """Add a leaf for ``child`` in the orphans window, unless a leaf
        references it already (then None). Atomic."""
        ...


def orphan_leaf(
    arrangement: Arrangement, child: ChildInfo, socket: str, instance_id: str
) -> SessionLeaf | None:
    """The leaf to add for ``child``, or None if it is not an orphan (a leaf
    references it, or it is a saved session's lost relaunch: see ``orphans``)."""
    if (norm_socket(socket), instance_id, child.id) in referenced(arrangement):
        return None
    if relaunch_of(child, socket, instance_id, arrangement.find(child.name)):
        return None
    name = orphan_name(child.argv, (leaf.name for leaf in arrangement.leaves()))
    return SessionLeaf(
        name=name,
        argv=list(child.argv),
        cwd=child.cwd,
        rows=child.rows,
        cols=child.cols,
        title=command_line(child.argv),
        ref=RestorationRef(norm_socket(socket), instance_id, child.id, child.pid),
        created_at=child.started_at,
        notice=ORPHAN_NOTICE.encode(),
    )


@attrs.define
class MemorySink:
    """An in-memory arrangement (apps that keep their own state; tests)."""

    current: Arrangement = attrs.Factory(Arrangement)

    def arrangement(self) -> Arrangement:
        return self.current

    def record(self, child: ChildInfo, socket: str, instance_id: str) -> SessionLeaf | None:
        leaf = orphan_leaf(self.current, child, socket, instance_id)
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
        added: list[SessionLeaf] = []

        def change(arr: Arrangement) -> Arrangement:
            added.clear()
            leaf = orphan_leaf(arr, child, socket, instance_id)
            if leaf is None:
                return arr
            added.append(leaf)
            return arr.with_session(leaf, ORPHAN_WINDOW)

        self.store.modify(change)
        return added[0] if added else None
