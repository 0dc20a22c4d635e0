"""Layouts: a terminal's windows, tabs and splits, read and opened. Pure.

Two directions, no I/O in either:

- **Opening** (``open_plan``): an ``Arrangement`` in, a list of terminal
  operations out. A terminal executor (``restore.layout._terminals``) runs them in
  order; an app can run them its own way. Each pane runs
  ``multiserver attach NAME`` (``PaneCommand``).
- **Reading** (``parse_tmux_layout``, ``kitty_pairs``): what a terminal
  reports of its splits, as a tree of its own pane ids with their shares.
  ``to_split`` turns it into the arrangement's ``Split`` tree once the
  caller knows which session, if any, each pane shows.

How a split tree is opened. A tab starts as one pane running the first
leaf of its tree (depth first). A pane standing for a ``Split`` of children
c1..cn is split n-1 times along the split's direction: the pane keeps c1,
the new pane stands for c2..cn and takes their share of the space
(``(s2 + ... + sn) / (s1 + ... + sn)``), and so on; then each child's pane
is opened the same way. Every terminal that splits a pane in two with a
given share for the new one (tmux ``split-window -l P%``, kitty ``launch
--location vsplit --bias P``, WezTerm ``split-pane --percent P``) builds
the same geometry from that plan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import attrs

from restore.store._model import Arrangement, Node, SessionLeaf, Split, Tab, Window

# The window adopted orphans live in: opened last, apart (as iTerm2 puts
# adopted sessions in a window of their own).
ORPHANS_WINDOW = "orphans"


# --- opening -------------------------------------------------------------


@attrs.frozen
class PaneCommand:
    """What a pane runs: ``multiserver attach NAME``, in the session's cwd."""

    session: str
    argv: tuple[str, ...]
    cwd: str


@attrs.frozen
class OpenTab:
    """A new tab (in a new window when ``new_window``) whose one pane,
    known from now on as ``pane``, runs ``command``."""

    window: str
    new_window: bool
    title: str
    pane: int
    command: PaneCommand


@attrs.frozen
class SplitPane:
    """Split ``target`` in two along ``vertical`` (a vertical divider: side
    by side); the new pane, ``pane``, comes right of or below it, takes
    ``percent`` of the space ``target`` had, and runs ``command``."""

    target: int
    pane: int
    vertical: bool
    percent: int
    command: PaneCommand


Op = OpenTab | SplitPane
AttachArgv = Callable[[SessionLeaf], tuple[str, ...]]


def open_plan(arrangement: Arrangement, attach_argv: AttachArgv) -> list[Op]:
    """The operations that open ``arrangement`` in a terminal: its windows
    in order (the orphans window last), each with its tabs in order, each
    tab's split tree as the module's docstring says. ``attach_argv`` gives
    the command of a leaf's pane. Leaves the caller wants left out (held
    elsewhere) are removed from the arrangement before."""
    ops: list[Op] = []
    handles = iter(range(1, 1 << 30))
    for window in _ordered(arrangement.windows):
        for i, tab in enumerate(window.tabs):
            pane = next(handles)
            first = _first_leaf(tab.root)
            ops.append(
                OpenTab(
                    window.name, i == 0, tab.title or first.name, pane, _command(first, attach_argv)
                )
            )
            ops.extend(_open_node(tab.root, pane, handles, attach_argv))
    return ops


def _ordered(windows: list[Window]) -> list[Window]:
    return [w for w in windows if w.name != ORPHANS_WINDOW] + [
        w for w in windows if w.name == ORPHANS_WINDOW
    ]


def _command(leaf: SessionLeaf, attach_argv: AttachArgv) -> PaneCommand:
    return PaneCommand(leaf.name, attach_argv(leaf), leaf.cwd)


def _first_leaf(node: Node) -> SessionLeaf:
    while isinstance(node, Split):
        node = node.children[0]
    return node


def _shares(split: Split) -> list[float]:
    if split.sizes is None or not all(s > 0 for s in split.sizes):
        return [1.0] * len(split.children)
    return list(split.sizes)


def _open_node(node: Node, pane: int, handles: Iterator[int], attach_argv: AttachArgv) -> list[Op]:
    """Operations that turn ``pane`` (running ``node``'s first leaf) into
    ``node``'s whole tree."""
    if isinstance(node, SessionLeaf):
        return []
    ops: list[Op] = []
    shares = _shares(node)
    panes = [pane]
    for i in range(1, len(node.children)):
        rest = sum(shares[i:]) / sum(shares[i - 1 :])
        new = next(handles)
        first = _first_leaf(node.children[i])
        ops.append(
            SplitPane(
                panes[-1],
                new,
                node.vertical,
                _percent(rest),
                _command(first, attach_argv),
            )
        )
        panes.append(new)
    for child, child_pane in zip(node.children, panes, strict=True):
        ops.extend(_open_node(child, child_pane, handles, attach_argv))
    return ops


def _percent(share: float) -> int:
    """A share as the whole percentage terminals take, never 0 or 100: a
    pane keeps at least a sliver."""
    return min(99, max(1, round(share * 100)))


def without_sessions(arrangement: Arrangement, names: set[str]) -> Arrangement:
    """``arrangement`` without the leaves ``names`` (splits closed up)."""
    for name in names:
        if arrangement.find(name) is not None:
            arrangement = arrangement.without_session(name)
    return arrangement


# --- reading -------------------------------------------------------------


@attrs.frozen
class PaneNode:
    """A terminal's pane, by its own id (tmux ``%3`` as ``3``, a kitty
    window id)."""

    pane: int


@attrs.frozen
class SplitNode:
    """Panes side by side (``vertical``) or stacked, with each one's share
    of the space (in cells, or fractions: only their ratios count)."""

    vertical: bool
    children: tuple[PaneNode | SplitNode, ...]
    sizes: tuple[float, ...]


LayoutNode = PaneNode | SplitNode


class LayoutError(ValueError):
    """A layout description that cannot be read."""


_GEOMETRY = re.compile(r"(\d+)x(\d+),(\d+),(\d+)")


def parse_tmux_layout(text: str) -> LayoutNode:
    """A tmux window layout (``#{window_layout}``, e.g.
    ``b25d,80x24,0,0{40x24,0,0,1,39x24,41,0,2}``) as a tree. ``{}`` holds
    panes side by side, ``[]`` stacked ones; a share is a pane's width or
    height in cells. LayoutError if it cannot be read or its checksum is
    wrong."""
    checksum, sep, body = text.partition(",")
    if not sep or not re.fullmatch(r"[0-9a-f]{4}", checksum):
        raise LayoutError(f"not a tmux layout: {text[:60]!r}")
    if int(checksum, 16) != tmux_checksum(body):
        raise LayoutError(f"tmux layout checksum does not match: {text[:60]!r}")
    node, end, _size = _parse_cell(body, 0)
    if end != len(body):
        raise LayoutError(f"trailing text in tmux layout at {end}: {text[:60]!r}")
    return node


def tmux_checksum(body: str) -> int:
    """tmux's 16-bit checksum of a layout's body (rotate right, add)."""
    csum = 0
    for ch in body.encode():
        csum = (csum >> 1) + ((csum & 1) << 15)
        csum = (csum + ch) & 0xFFFF
    return csum


def _parse_cell(text: str, at: int) -> tuple[LayoutNode, int, tuple[int, int]]:
    m = _GEOMETRY.match(text, at)
    if m is None:
        raise LayoutError(f"expected WxH,X,Y at {at} in tmux layout {text[:60]!r}")
    size = (int(m.group(1)), int(m.group(2)))
    at = m.end()
    if text.startswith(",", at):
        m = re.compile(r",(\d+)").match(text, at)
        if m is None:
            raise LayoutError(f"expected a pane id at {at} in tmux layout {text[:60]!r}")
        return PaneNode(int(m.group(1))), m.end(), size
    if at < len(text) and text[at] in "{[":
        close = "}" if text[at] == "{" else "]"
        vertical = text[at] == "{"
        at += 1
        children: list[LayoutNode] = []
        sizes: list[float] = []
        while True:
            child, at, (w, h) = _parse_cell(text, at)
            children.append(child)
            sizes.append(w if vertical else h)
            if text.startswith(",", at):
                at += 1
                continue
            if text.startswith(close, at):
                return SplitNode(vertical, tuple(children), tuple(sizes)), at + 1, size
            raise LayoutError(f"expected ',' or {close!r} at {at} in tmux layout {text[:60]!r}")
    raise LayoutError(f"expected a pane id or a split at {at} in tmux layout {text[:60]!r}")


def kitty_pairs(state: object, windows: list[int]) -> LayoutNode:
    """A kitty tab's split tree from its ``layout_state`` (``kitty @ ls``,
    the ``splits`` layout: ``pairs`` of ``one``/``two``, each a window id
    or a nested pair, ``horizontal`` when side by side, ``bias`` the share
    of ``one``). Another layout (or none) is its windows side by side in
    equal shares, in ``windows`` order. LayoutError if it cannot be read."""
    pairs = state.get("pairs") if isinstance(state, dict) else None
    if pairs is None:
        if not windows:
            raise LayoutError("a kitty tab with no windows")
        if len(windows) == 1:
            return PaneNode(windows[0])
        return SplitNode(True, tuple(PaneNode(w) for w in windows), (1.0,) * len(windows))
    node = _kitty_pair(pairs)
    if node is None:
        raise LayoutError("a kitty tab whose split tree holds no window")
    return node


def _kitty_pair(pair: object) -> LayoutNode | None:
    if pair is None:  # the empty half of a tab's only pair
        return None
    if isinstance(pair, int) and not isinstance(pair, bool):
        return PaneNode(pair)
    if not isinstance(pair, dict):
        raise LayoutError(f"not a kitty split pair: {str(pair)[:60]!r}")
    one = _kitty_pair(pair.get("one"))
    two = _kitty_pair(pair.get("two"))
    if one is None or two is None:
        return one or two
    bias = pair.get("bias", 0.5)
    if not isinstance(bias, int | float) or not 0 < bias < 1:
        bias = 0.5
    horizontal = pair.get("horizontal", True)
    return SplitNode(bool(horizontal), (one, two), (float(bias), 1.0 - float(bias)))


def panes_of(node: LayoutNode) -> list[int]:
    """The pane ids of ``node``, depth first."""
    if isinstance(node, PaneNode):
        return [node.pane]
    return [p for child in node.children for p in panes_of(child)]


def to_split(node: LayoutNode, leaf_of: Callable[[int], SessionLeaf | None]) -> Node | None:
    """``node`` as the arrangement's tree: each pane is ``leaf_of(pane)``; a
    pane that is no session is left out and the splits close up over it (its
    share goes with it). None if no pane is a session."""
    if isinstance(node, PaneNode):
        return leaf_of(node.pane)
    children: list[Node] = []
    sizes: list[float] = []
    for child, size in zip(node.children, node.sizes, strict=True):
        kept = to_split(child, leaf_of)
        if kept is not None:
            children.append(kept)
            sizes.append(size)
    if not children:
        return None
    if len(children) == 1:
        return children[0]
    total = sum(sizes)
    return Split(node.vertical, children, [s / total for s in sizes])


def tab_of(
    node: LayoutNode, title: str, leaf_of: Callable[[int], SessionLeaf | None]
) -> Tab | None:
    """A tab of the arrangement from a terminal's tab, or None if none of
    its panes is a session."""
    root = to_split(node, leaf_of)
    return None if root is None else Tab(root, title)


@attrs.frozen
class SeenTab:
    """A terminal's tab as read, with what each pane shows: ``sessions``
    (pane -> the session attached there), ``sizes`` (pane -> (cols, rows)),
    ``adopted`` (pane -> a new session to start there at the next restore)."""

    window: str
    title: str
    layout: LayoutNode
    sessions: dict[int, str] = attrs.Factory(dict)
    sizes: dict[int, tuple[int, int]] = attrs.Factory(dict)
    adopted: dict[int, SessionLeaf] = attrs.Factory(dict)


def merge_layout(old: Arrangement, seen: list[SeenTab]) -> Arrangement:
    """``old`` rearranged as a terminal shows it: a window for each of the
    terminal's (in its order), a tab for each tab that shows a session,
    their split trees with each pane's size; the sessions the terminal does
    not show stay where they were, after (tabs of a window of the same name
    go at its end). A session shown twice counts where it is seen first; a
    name the arrangement does not know is left out (adopted panes bring
    their own leaves)."""
    placed: set[str] = set()
    windows: dict[str, list[Tab]] = {}
    for tab in seen:

        def leaf_of(pane: int, tab: SeenTab = tab) -> SessionLeaf | None:
            name = tab.sessions.get(pane)
            found = old.find(name) if name is not None else tab.adopted.get(pane)
            if name is None and found is not None and old.find(found.name) is not None:
                found = None  # an adopted pane's name taken meanwhile
            if found is None or found.name in placed:
                return None
            placed.add(found.name)
            if pane in tab.sizes:
                cols, rows = tab.sizes[pane]
                found = attrs.evolve(found, cols=cols, rows=rows)
            return found

        made = tab_of(tab.layout, tab.title, leaf_of)
        windows.setdefault(tab.window, [])
        if made is not None:
            windows[tab.window].append(made)
    rest = without_sessions(old, placed)
    for w in rest.windows:
        windows.setdefault(w.name, []).extend(w.tabs)
    return Arrangement([Window(name, tabs) for name, tabs in windows.items() if tabs])


def tab_size(node: Node) -> tuple[int, int]:
    """A tab's size in cells (cols, rows) from its leaves' sizes, with a
    one-cell divider between panes (as tmux draws them)."""
    if isinstance(node, SessionLeaf):
        return node.cols, node.rows
    sizes = [tab_size(c) for c in node.children]
    dividers = len(sizes) - 1
    if node.vertical:
        return sum(c for c, _ in sizes) + dividers, max(r for _, r in sizes)
    return max(c for c, _ in sizes), sum(r for _, r in sizes) + dividers
