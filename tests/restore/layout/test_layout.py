"""The pure layout layer: a tree opened as split operations, tmux layout
strings and kitty split pairs read back as trees."""

from __future__ import annotations

import attrs
import pytest

from restore.layout._layout import (
    LayoutError,
    OpenTab,
    PaneNode,
    SeenTab,
    SplitNode,
    SplitPane,
    kitty_pairs,
    merge_layout,
    open_plan,
    panes_of,
    parse_tmux_layout,
    tab_size,
    tmux_checksum,
    to_split,
    without_sessions,
)
from restore.store._model import Arrangement, SessionLeaf, Split, Tab, Window


def leaf(name: str) -> SessionLeaf:
    return SessionLeaf(name, ["sh"], f"/home/{name}")


def argv(leaf: SessionLeaf) -> tuple[str, ...]:
    return ("multiserver", "attach", leaf.name)


def geometry(ops: list[OpenTab | SplitPane], width: float = 1.0) -> dict[str, float]:
    """Each session's width share, replaying vertical splits of one tab."""
    share: dict[int, float] = {}
    names: dict[int, str] = {}
    for op in ops:
        if isinstance(op, OpenTab):
            share[op.pane] = width
        else:
            assert op.vertical
            total = share[op.target]
            share[op.pane] = total * op.percent / 100
            share[op.target] = total - share[op.pane]
        names[op.pane] = op.command.session
    return {names[p]: s for p, s in share.items()}


def test_a_single_session_is_one_tab_with_its_command() -> None:
    arr = Arrangement([Window("main", [Tab(leaf("a"), "edit")])])
    (op,) = open_plan(arr, argv)
    assert op == OpenTab("main", True, "edit", 1, op.command)
    assert op.command.argv == ("multiserver", "attach", "a")
    assert op.command.cwd == "/home/a"


def test_an_n_way_split_keeps_its_shares() -> None:
    root = Split(True, [leaf("a"), leaf("b"), leaf("c")], [0.5, 0.3, 0.2])
    ops = open_plan(Arrangement([Window("main", [Tab(root)])]), argv)
    assert [type(op) for op in ops] == [OpenTab, SplitPane, SplitPane]
    # The new pane takes the share of everything after the one kept.
    assert [op.percent for op in ops if isinstance(op, SplitPane)] == [50, 40]
    shares = geometry(ops)
    assert shares == pytest.approx({"a": 0.5, "b": 0.3, "c": 0.2})


def test_nested_splits_open_each_pane_for_its_subtree() -> None:
    inner = Split(False, [leaf("b"), leaf("c")], [1, 3])
    root = Split(True, [leaf("a"), inner], [2, 1])
    ops = open_plan(Arrangement([Window("main", [Tab(root, "t")])]), argv)
    first, outer, nested = ops
    assert isinstance(first, OpenTab) and first.command.session == "a"
    assert isinstance(outer, SplitPane) and outer.vertical and outer.percent == 33
    assert outer.command.session == "b"  # the first leaf of the subtree
    assert isinstance(nested, SplitPane) and not nested.vertical
    assert nested.target == outer.pane and nested.percent == 75
    assert nested.command.session == "c"


def test_windows_open_in_order_with_orphans_last() -> None:
    arr = Arrangement(
        [
            Window("orphans", [Tab(leaf("o"))]),
            Window("main", [Tab(leaf("a")), Tab(leaf("b"))]),
            Window("work", [Tab(leaf("w"))]),
        ]
    )
    ops = open_plan(arr, argv)
    assert all(isinstance(op, OpenTab) for op in ops)
    assert [(op.window, op.new_window, op.command.session) for op in ops] == [
        ("main", True, "a"),
        ("main", False, "b"),
        ("work", True, "w"),
        ("orphans", True, "o"),
    ]
    assert len({op.pane for op in ops}) == 4


def test_leaving_out_held_sessions_closes_the_split_up() -> None:
    root = Split(True, [leaf("a"), leaf("b"), leaf("c")], [0.5, 0.3, 0.2])
    arr = Arrangement([Window("main", [Tab(root)]), Window("w", [Tab(leaf("d"))])])
    kept = without_sessions(arr, {"b", "d", "nobody"})
    assert [x.name for x in kept.leaves()] == ["a", "c"]
    assert [w.name for w in kept.windows] == ["main"]


def _layout(body: str) -> str:
    return f"{tmux_checksum(body):04x},{body}"


def test_tmux_layout_reads_a_nested_tree() -> None:
    # A real layout printed by tmux 3.3a for: split-window -h, then -v.
    text = "d67e,80x24,0,0{40x24,0,0,0,39x24,41,0[39x12,41,0,1,39x11,41,13,2]}"
    node = parse_tmux_layout(text)
    assert node == SplitNode(
        True,
        (PaneNode(0), SplitNode(False, (PaneNode(1), PaneNode(2)), (12, 11))),
        (40, 39),
    )
    assert panes_of(node) == [0, 1, 2]
    assert parse_tmux_layout(_layout("80x24,0,0,7")) == PaneNode(7)


@pytest.mark.parametrize(
    "text",
    ["", "80x24,0,0,1", "zzzz,80x24,0,0,1", "0000,80x24,0,0,1", _layout("80x24,0,0{1}")],
)
def test_a_bad_tmux_layout_is_an_error(text: str) -> None:
    with pytest.raises(LayoutError):
        parse_tmux_layout(text)


def test_tmux_layout_truncated_or_trailing() -> None:
    for body in ["80x24,0,0{40x24,0,0,0,39x24,41,0,1", "80x24,0,0,1,extra"]:
        with pytest.raises(LayoutError):
            parse_tmux_layout(_layout(body))


def test_kitty_pairs_read_with_their_bias() -> None:
    state = {
        "pairs": {
            "horizontal": True,
            "bias": 0.6,
            "one": 1,
            "two": {"horizontal": False, "bias": 0.25, "one": 2, "two": 3},
        }
    }
    node = kitty_pairs(state, [1, 2, 3])
    assert node == SplitNode(
        True, (PaneNode(1), SplitNode(False, (PaneNode(2), PaneNode(3)), (0.25, 0.75))), (0.6, 0.4)
    )


def test_kitty_half_pair_and_other_layouts() -> None:
    # A tab with one window in the splits layout: a pair with no "two".
    assert kitty_pairs({"pairs": {"bias": 0.5, "horizontal": True, "one": 1}}, [1]) == PaneNode(1)
    assert kitty_pairs({}, [4, 5]) == SplitNode(True, (PaneNode(4), PaneNode(5)), (1.0, 1.0))
    with pytest.raises(LayoutError):
        kitty_pairs({"pairs": {"one": "x"}}, [1])
    with pytest.raises(LayoutError):
        kitty_pairs(None, [])


def test_panes_that_are_no_session_are_left_out() -> None:
    node = SplitNode(
        True, (PaneNode(1), SplitNode(False, (PaneNode(2), PaneNode(3)), (1, 3))), (1, 1)
    )
    leaves = {1: leaf("a"), 3: leaf("c")}
    root = to_split(node, leaves.get)
    assert isinstance(root, Split)
    assert root.children == [leaf("a"), leaf("c")]
    assert root.sizes == pytest.approx([0.5, 0.5])
    assert to_split(node, lambda _pane: None) is None


def test_a_read_tree_opens_with_the_same_shares() -> None:
    node = parse_tmux_layout(_layout("100x30,0,0{60x30,0,0,1,39x30,61,0,2}"))
    root = to_split(node, {1: leaf("a"), 2: leaf("b")}.get)
    assert root is not None
    ops = open_plan(Arrangement([Window("main", [Tab(root)])]), argv)
    assert geometry(ops) == pytest.approx({"a": 0.61, "b": 0.39}, abs=0.01)


def test_merge_places_sessions_as_the_terminal_shows_them() -> None:
    old = Arrangement(
        [
            Window("main", [Tab(leaf("a")), Tab(leaf("b")), Tab(leaf("c"))]),
            Window("orphans", [Tab(leaf("o"))]),
        ]
    )
    layout = parse_tmux_layout(_layout("81x24,0,0{40x24,0,0,1,40x24,41,0,2}"))
    seen = [
        SeenTab("work", "edit", layout, {1: "c", 2: "a"}, {1: (40, 24), 2: (40, 24)}),
        SeenTab("work", "shell", PaneNode(5), {}, {}, {5: leaf("new")}),
        SeenTab("work", "ghost", PaneNode(6), {6: "unknown"}),
    ]
    new = merge_layout(old, seen)
    assert [w.name for w in new.windows] == ["work", "main", "orphans"]
    work = new.windows[0]
    assert [t.title for t in work.tabs] == ["edit", "shell"]
    root = work.tabs[0].root
    assert isinstance(root, Split) and [x.name for x in root.children] == ["c", "a"]
    assert new.find("a") == attrs.evolve(leaf("a"), cols=40, rows=24)
    assert [x.name for x in new.leaves()] == ["c", "a", "new", "b", "o"]
    assert tab_size(root) == (81, 24)


def test_merge_of_nothing_seen_changes_nothing() -> None:
    old = Arrangement([Window("main", [Tab(leaf("a"))])])
    assert merge_layout(old, []) == old
