"""The saved arrangement: windows, tabs, a split tree and its session leaves.

Pure data, no I/O. Every class is frozen; every operation returns a new
``Arrangement`` and leaves the old one as it was, so a store can read, change
and write it inside one transaction without sharing state with anyone.

Shape::

    Arrangement -> [Window] -> [Tab] -> root: Split | SessionLeaf
    Split -> [Split | SessionLeaf] (with optional relative sizes)

Invariants checked on construction (``ValueError`` otherwise): a leaf's name
matches ``NAME_RE``; session names are unique across the arrangement; a split
has at least one child and, when given, one size per child. Saved scrollback
and a pending notice are cut to the newest ``SCROLLBACK_LIMIT`` bytes, starting
at a safe boundary, and so is a ``SavedOutput`` (what a session showed, on its
way to becoming its leaf's scrollback).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from restore.store._rules import (
    HOST_RE as HOST_RE,
    SCROLLBACK_LIMIT as SCROLLBACK_LIMIT,
    bounded_scrollback as bounded_scrollback,
    check_leaf_host,
    check_leaf_name,
    check_session_name as check_session_name,
    child_key,
)


def _bounded_or_none(data: bytes | None) -> bytes | None:
    return None if data is None else bounded_scrollback(data)


def _valid_name(inst: SessionLeaf, _attr: attrs.Attribute[str], value: str) -> None:
    check_leaf_name(value)


@attrs.frozen
class RestorationRef:
    """Where a session's child lived: daemon socket, which run of that daemon
    (``instance_id``), the daemon's id for the child, and its pid."""

    socket: str
    instance_id: str
    child_id: int
    pid: int


@attrs.frozen
class PendingLaunch:
    """A relaunch asked of a daemon and not yet recorded: the intent, written
    before the Launch. The daemon knows the child by the session's name, so
    the next restore finds it there (``instance_id``: that run of the daemon)
    and records it, instead of starting it twice."""

    socket: str
    instance_id: str
    asked_at: float = 0.0  # unix time


@attrs.frozen
class SessionLeaf:
    """One session: what to run, where, and how to find its child again."""

    name: str = attrs.field(validator=_valid_name)
    argv: list[str]
    cwd: str
    rows: int = 24
    cols: int = 80
    title: str = ""
    scrollback: bytes | None = attrs.field(default=None, converter=_bounded_or_none)
    ref: RestorationRef | None = None
    created_at: float = 0.0  # unix time
    # Bytes to show before the first attach of this session (a relaunch's saved
    # scrollback and its marker line); cleared once shown. Bounded like
    # scrollback, keeping the newest bytes, so the marker line survives.
    notice: bytes | None = attrs.field(default=None, converter=_bounded_or_none)
    # The host it lives on (``multiserver host add``), for a session named
    # HOST:NAME; its ``ref`` is then the remote daemon's. None: this machine.
    host: str | None = None
    # Set while a relaunch of this session is asked and not yet recorded
    # (see PendingLaunch); cleared with the record of its new ``ref``.
    pending_launch: PendingLaunch | None = None
    # Its program had exited (``ChildInfo.exit_code``: negative for a signal)
    # when its output was last saved, and nobody has seen that yet: restore
    # reports it and starts nothing, even once its daemon is gone. None: it
    # was running.
    exit_code: int | None = None

    def __attrs_post_init__(self) -> None:
        check_leaf_host(self.name, self.host)


@attrs.frozen
class SavedOutput:
    """What a session showed, to keep as its leaf's ``scrollback``: the leaf
    is the one whose ``ref`` names this child (daemon socket, instance, child
    id; the pid is not compared). ``exit_code``: the program had exited
    (None: it runs). ``output`` is bounded like scrollback."""

    socket: str
    instance_id: str
    child_id: int
    output: bytes = attrs.field(converter=bounded_scrollback)
    exit_code: int | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        """Its child, as ``ref_key`` gives a leaf's."""
        return child_key(self.socket, self.instance_id, self.child_id)


def ref_key(ref: RestorationRef) -> tuple[str, str, int]:
    """The child a ref names (the pid is never trusted): daemon socket,
    instance, child id."""
    return child_key(ref.socket, ref.instance_id, ref.child_id)


@attrs.frozen
class Split:
    """Panes side by side (``vertical``: a vertical divider) or stacked."""

    vertical: bool
    children: list[Split | SessionLeaf] = attrs.field()
    sizes: list[float] | None = attrs.field(default=None)

    @children.validator
    def _check_children(self, _attr: attrs.Attribute[list[Node]], value: list[Node]) -> None:
        if not value:
            raise ValueError("a split needs at least one child")

    @sizes.validator
    def _check_sizes(
        self, _attr: attrs.Attribute[list[float] | None], value: list[float] | None
    ) -> None:
        if value is not None and len(value) != len(self.children):
            raise ValueError(f"split has {len(self.children)} children but {len(value)} sizes")


Node = Split | SessionLeaf


@attrs.frozen
class Tab:
    root: Split | SessionLeaf
    title: str = ""


@attrs.frozen
class Window:
    name: str
    tabs: list[Tab]


@attrs.frozen
class Arrangement:
    """Everything a restoring client rebuilds."""

    windows: list[Window] = attrs.Factory(list)

    def __attrs_post_init__(self) -> None:
        seen: set[str] = set()
        for leaf in self.leaves():
            if leaf.name in seen:
                raise ValueError(f"two sessions are named {leaf.name!r}")
            seen.add(leaf.name)

    def leaves(self) -> list[SessionLeaf]:
        """Every leaf: windows, then tabs, then the split tree depth first."""
        return [leaf for w in self.windows for t in w.tabs for leaf in _walk(t.root)]

    def find(self, name: str) -> SessionLeaf | None:
        for leaf in self.leaves():
            if leaf.name == name:
                return leaf
        return None

    def window(self, name: str) -> Window | None:
        """The first window called ``name``."""
        for w in self.windows:
            if w.name == name:
                return w
        return None

    def with_session(self, leaf: SessionLeaf, window: str = "main") -> Arrangement:
        """A new tab holding ``leaf`` at the end of ``window`` (created at the
        end if missing). ValueError if a session of that name exists."""
        if self.find(leaf.name) is not None:
            raise ValueError(f"a session named {leaf.name!r} exists already")
        tab = Tab(leaf)
        target = self.window(window)
        if target is None:
            return Arrangement([*self.windows, Window(window, [tab])])
        windows = [attrs.evolve(w, tabs=[*w.tabs, tab]) if w is target else w for w in self.windows]
        return Arrangement(windows)

    def without_session(self, name: str) -> Arrangement:
        """Without the leaf called ``name`` (KeyError if none). A split left with
        one child is replaced by that child; a tab left empty goes, and so
        does the window that held it if that empties it (another window
        with no tabs stays as it was)."""
        if self.find(name) is None:
            raise KeyError(name)
        windows = []
        for w in self.windows:
            tabs = []
            for t in w.tabs:
                root = _without(t.root, name)
                if root is t.root:
                    tabs.append(t)
                elif root is not None:
                    tabs.append(attrs.evolve(t, root=root))
            if not tabs and w.tabs:
                continue
            same = all(a is b for a, b in zip(tabs, w.tabs, strict=False))
            windows.append(w if same and len(tabs) == len(w.tabs) else attrs.evolve(w, tabs=tabs))
        return Arrangement(windows)

    def replace_session(self, leaf: SessionLeaf) -> Arrangement:
        """With the leaf of the same name replaced by ``leaf``, in place
        (KeyError if none)."""
        if self.find(leaf.name) is None:
            raise KeyError(leaf.name)
        return self.map_leaves(lambda old: leaf if old.name == leaf.name else old)

    def map_leaves(self, fn: Callable[[SessionLeaf], SessionLeaf]) -> Arrangement:
        """Every leaf replaced by ``fn(leaf)`` in one pass; the shape is kept."""
        return Arrangement(
            [
                attrs.evolve(w, tabs=[attrs.evolve(t, root=_map(t.root, fn)) for t in w.tabs])
                for w in self.windows
            ]
        )


def _walk(node: Node) -> Iterator[SessionLeaf]:
    if isinstance(node, SessionLeaf):
        yield node
        return
    for child in node.children:
        yield from _walk(child)


def _without(node: Node, name: str) -> Node | None:
    """``node`` without the leaf ``name``: the same object if it held none,
    None if nothing is left."""
    if isinstance(node, SessionLeaf):
        return None if node.name == name else node
    children: list[Node] = []
    sizes: list[float] = []
    changed = False
    for i, child in enumerate(node.children):
        kept = _without(child, name)
        changed = changed or kept is not child
        if kept is not None:
            children.append(kept)
            if node.sizes is not None:
                sizes.append(node.sizes[i])
    if not changed:
        return node
    if not children:
        return None
    if len(children) == 1:
        return children[0]
    return Split(node.vertical, children, sizes if node.sizes is not None else None)


def _map(node: Node, fn: Callable[[SessionLeaf], SessionLeaf]) -> Node:
    if isinstance(node, SessionLeaf):
        return fn(node)
    return attrs.evolve(node, children=[_map(c, fn) for c in node.children])
