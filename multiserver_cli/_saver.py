"""``multiserver save`` without ``--from``: the saved arrangement brought
up to date with the sessions now, each live session's cwd and title (its
foreground process's), in one pass.

Nothing runs in the background for it: what a session shows, and where
its program is, each daemon keeps on disk as it comes (one file a child,
``multiserver.DurableOutput``; the attach client while it holds one), and
a restore reads them (``restore._kept``). A pass asks the daemons that
the saved sessions name (the arrangement's refs), each at once (a thread
each, bounded by SCAN_TIMEOUT), and writes what moved in one
transaction. Blocking calls only: no trio.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from multiserver import ChildInfo, DaemonPaths, SyncClient
from multiserver.internal import escaped
from multiserver_cli._sessions import ask_daemon, at_once
from restore import Arrangement, ArrangementStore, SessionLeaf, ref_key

Key = tuple[str, str, int]  # a child: daemon socket, instance, child id (ref_key)


@attrs.frozen
class _Answer:
    """One daemon's answer: its saved sessions' children."""

    socket: str
    instance_id: str
    children: list[ChildInfo]


@attrs.frozen
class PassReport:
    """What one pass did."""

    total: int  # saved sessions
    live: int  # of them, with a child that its daemon reported
    changed: int  # whose cwd or title moved on
    problems: list[str]  # one line each: daemons that did not answer


def _ask(socket: str, wanted: set[tuple[str, int]]) -> _Answer | str | None:
    """The children of one daemon that saved sessions refer to, with their
    foreground process; a line saying why not; None if no daemon runs there."""

    def children_of(client: SyncClient) -> _Answer:
        instance = client.instance_id
        children = [c for c in client.list(foreground=True) if (instance, c.id) in wanted]
        return _Answer(socket, instance, children)

    return ask_daemon(Path(socket), children_of)


def _refreshed(leaf: SessionLeaf, child: ChildInfo) -> SessionLeaf:
    """``leaf`` with its cwd and title as its foreground process has them."""
    title = " ".join(map(escaped, child.fg_argv)) if child.fg_argv else None
    return attrs.evolve(leaf, cwd=child.fg_cwd or leaf.cwd, title=title or leaf.title)


@attrs.define
class Saver:
    """One pass over the saved sessions (see the module's docstring)."""

    number: int | None = None  # only daemon N's sessions (``--daemon N``)

    def run_pass(self, store: ArrangementStore) -> PassReport:
        """Ask, then write. A store that cannot take the write raises StoreError."""
        leaves = store.load_outline().leaves()
        wanted: dict[str, set[tuple[str, int]]] = {}
        for leaf in leaves:
            if leaf.ref is not None:
                socket, instance, child_id = ref_key(leaf.ref)
                wanted.setdefault(socket, set()).add((instance, child_id))
        if self.number is not None:
            only = os.path.normpath(DaemonPaths.for_number(self.number).socket)
            wanted = {s: w for s, w in wanted.items() if s == only}
        asked = list(wanted)
        answers = at_once(asked, lambda sock: _ask(sock, wanted[sock]))
        found: dict[Key, ChildInfo] = {}
        problems: list[str] = []
        for socket, answer in zip(asked, answers, strict=True):
            if isinstance(answer, str):
                problems.append(answer)
            elif answer is not None:
                found.update({(socket, answer.instance_id, c.id): c for c in answer.children})
        changed = _refresh(store, found)
        live = sum(1 for leaf in leaves if leaf.ref is not None and ref_key(leaf.ref) in found)
        return PassReport(len(leaves), live, changed, problems)


def _refresh(store: ArrangementStore, found: dict[Key, ChildInfo]) -> int:
    """Every saved session's cwd and title as its foreground process has
    them, in one transaction (none if nothing moved). Returns how many
    changed."""
    changed: list[str] = []

    def change(arr: Arrangement) -> Arrangement:
        changed.clear()

        def refresh(leaf: SessionLeaf) -> SessionLeaf:
            child = None if leaf.ref is None else found.get(ref_key(leaf.ref))
            new = leaf if child is None else _refreshed(leaf, child)
            if new != leaf:
                changed.append(leaf.name)
            return new

        new = arr.map_leaves(refresh)
        return new if changed else arr

    if found:
        store.modify(change)
    return len(changed)
