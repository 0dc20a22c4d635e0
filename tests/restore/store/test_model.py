"""The arrangement model: pure operations, invariants, the scrollback bound."""

from __future__ import annotations

import random

import attrs
import pytest
from hypothesis import given, strategies as st

from restore import (
    SCROLLBACK_LIMIT,
    Arrangement,
    RestorationRef,
    SessionLeaf,
    Split,
    Tab,
    Window,
    bounded_scrollback,
)


def leaf(name: str, **kw: object) -> SessionLeaf:
    return SessionLeaf(name, ["sh"], "/", **kw)  # type: ignore[arg-type]


def sample() -> Arrangement:
    """main: [tab a | tab (b | (c / d))], other: [tab e]"""
    inner = Split(False, [leaf("c"), leaf("d")], [0.5, 0.5])
    return Arrangement(
        [
            Window(
                "main",
                [Tab(leaf("a")), Tab(Split(True, [leaf("b"), inner], [0.3, 0.7]), "t2")],
            ),
            Window("other", [Tab(leaf("e"))]),
        ]
    )


def names(arr: Arrangement) -> list[str]:
    return [x.name for x in arr.leaves()]


# --- invariants --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A9", "x.y-z_1", "9" + "n" * 127])
def test_good_names(name: str) -> None:
    assert leaf(name).name == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "_a", "a b", "a/b", "a\n", "é", "a" * 129])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="bad session name"):
        leaf(name)


def test_leaf_defaults() -> None:
    x = leaf("a")
    assert (x.rows, x.cols, x.title, x.scrollback, x.ref, x.created_at) == (
        24,
        80,
        "",
        None,
        None,
        0.0,
    )


def test_split_needs_children_and_matching_sizes() -> None:
    with pytest.raises(ValueError, match="at least one child"):
        Split(True, [])
    with pytest.raises(ValueError, match="2 children but 1 sizes"):
        Split(True, [leaf("a"), leaf("b")], [1.0])


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="two sessions are named 'a'"):
        Arrangement([Window("w", [Tab(leaf("a"))]), Window("v", [Tab(leaf("a"))])])


def test_classes_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        leaf("a").name = "b"  # type: ignore[misc]


# --- queries -------------------------------------------------------------------------


def test_leaves_in_order_and_find() -> None:
    arr = sample()
    assert names(arr) == ["a", "b", "c", "d", "e"]
    assert arr.find("d") == leaf("d")
    assert arr.find("zz") is None
    assert Arrangement().leaves() == []


def test_window_by_name() -> None:
    arr = sample()
    other = arr.window("other")
    assert other is not None and other.name == "other"
    assert arr.window("nope") is None


# --- with_session ----------------------------------------------------------------------


def test_with_session_creates_main_then_appends_tabs() -> None:
    arr = Arrangement().with_session(leaf("a"))
    assert arr == Arrangement([Window("main", [Tab(leaf("a"))])])
    arr = arr.with_session(leaf("b"))
    assert arr == Arrangement([Window("main", [Tab(leaf("a")), Tab(leaf("b"))])])


def test_with_session_other_window() -> None:
    before = sample()
    after = before.with_session(leaf("f"), window="third").with_session(leaf("g"), "other")
    assert [w.name for w in after.windows] == ["main", "other", "third"]
    other = after.window("other")
    assert other is not None and [t.root for t in other.tabs] == [leaf("e"), leaf("g")]
    assert names(after) == ["a", "b", "c", "d", "e", "g", "f"]
    assert before == sample()  # nothing was mutated


def test_with_session_refuses_a_taken_name() -> None:
    with pytest.raises(ValueError, match="exists already"):
        sample().with_session(leaf("c", title="new"), window="elsewhere")


# --- without_session --------------------------------------------------------------------


def test_without_a_tab_leaf_drops_the_tab() -> None:
    after = sample().without_session("a")
    main = after.window("main")
    assert main is not None and len(main.tabs) == 1 and main.tabs[0].title == "t2"


def test_without_collapses_a_split_left_with_one_child() -> None:
    after = sample().without_session("d")
    tab = after.windows[0].tabs[1]
    assert tab.root == Split(True, [leaf("b"), leaf("c")], [0.3, 0.7])
    assert tab.title == "t2"


def test_without_keeps_sizes_of_the_rest() -> None:
    arr = Arrangement(
        [Window("w", [Tab(Split(True, [leaf("a"), leaf("b"), leaf("c")], [1, 2, 3]))])]
    )
    assert arr.without_session("b").windows[0].tabs[0].root == Split(
        True, [leaf("a"), leaf("c")], [1, 3]
    )
    no_sizes = Arrangement([Window("w", [Tab(Split(True, [leaf("a"), leaf("b"), leaf("c")]))])])
    assert no_sizes.without_session("a").windows[0].tabs[0].root == Split(
        True, [leaf("b"), leaf("c")]
    )


def test_without_the_last_leaf_drops_tab_and_window() -> None:
    after = sample().without_session("e")
    assert [w.name for w in after.windows] == ["main"]
    empty = after.without_session("a").without_session("b").without_session("c")
    assert names(empty) == ["d"]
    assert empty.windows[0].tabs[0].root == leaf("d")
    assert empty.without_session("d") == Arrangement()


def test_without_leaves_untouched_parts_as_they_were() -> None:
    before = sample()
    after = before.without_session("e")
    assert after.windows[0] is before.windows[0]


def test_without_an_unknown_name() -> None:
    with pytest.raises(KeyError):
        sample().without_session("zz")


# --- replace_session / map_leaves -------------------------------------------------------


def test_replace_session_in_place() -> None:
    new = SessionLeaf("c", ["sh"], "/tmp", title="T", ref=RestorationRef("/s", "i", 3, 99))
    after = sample().replace_session(new)
    assert names(after) == ["a", "b", "c", "d", "e"]
    assert after.find("c") == new
    assert after.without_session("c") == sample().without_session("c")


def test_replace_an_unknown_session() -> None:
    with pytest.raises(KeyError):
        sample().replace_session(leaf("zz"))


def test_map_leaves_keeps_the_shape() -> None:
    after = sample().map_leaves(lambda x: attrs.evolve(x, title=x.name.upper()))
    assert [x.title for x in after.leaves()] == ["A", "B", "C", "D", "E"]
    assert after.map_leaves(lambda x: attrs.evolve(x, title="")) == sample()


# --- scrollback bound ---------------------------------------------------------------------


def test_small_scrollback_is_kept_whole() -> None:
    data = b"hello\x1b[31m red\n"
    assert bounded_scrollback(data) == data
    assert bounded_scrollback(b"x" * SCROLLBACK_LIMIT) == b"x" * SCROLLBACK_LIMIT


def test_big_scrollback_keeps_the_newest_bytes_from_a_line_start() -> None:
    lines = b"".join(b"line %06d \x1b[1mbold\x1b[0m\n" % i for i in range(20_000))
    assert len(lines) > SCROLLBACK_LIMIT
    kept = bounded_scrollback(lines)
    assert len(kept) <= SCROLLBACK_LIMIT
    assert lines.endswith(kept)
    assert kept.startswith(b"line ")
    assert len(kept) > SCROLLBACK_LIMIT - 100


def test_big_scrollback_never_starts_inside_a_utf8_sequence() -> None:
    data = "é".encode() * SCROLLBACK_LIMIT  # no newline anywhere
    kept = bounded_scrollback(data)
    assert len(kept) <= SCROLLBACK_LIMIT
    kept.decode()  # would raise if cut inside a character


def test_leaf_bounds_its_scrollback() -> None:
    x = leaf("a", scrollback=b"y" * (SCROLLBACK_LIMIT + 10))
    assert x.scrollback == b"y" * SCROLLBACK_LIMIT
    assert leaf("b", notice=b"n" * (SCROLLBACK_LIMIT + 1) + b"marker").notice == (
        b"n" * (SCROLLBACK_LIMIT - 6) + b"marker"
    )
    assert attrs.evolve(x, scrollback=b"z" * (3 * SCROLLBACK_LIMIT)).scrollback == (
        b"z" * SCROLLBACK_LIMIT
    )


# --- property: adding and removing in any order ---------------------------------------------


@given(
    st.lists(
        st.tuples(st.sampled_from(["main", "w2", "w3"]), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_add_then_remove_in_any_order(plan: list[tuple[str, bool]], rnd: random.Random) -> None:
    arr = Arrangement()
    for i, (window, split) in enumerate(plan):
        new = leaf(f"s{i}")
        if split and arr.leaves():
            # Split the last tab of the window holding s0 with the new leaf.
            tab = arr.windows[0].tabs[-1]
            merged = Tab(Split(i % 2 == 0, [tab.root, new], [1.0, 1.0]))
            w = arr.windows[0]
            arr = Arrangement([attrs.evolve(w, tabs=[*w.tabs[:-1], merged]), *arr.windows[1:]])
        else:
            arr = arr.with_session(new, window)
    order = names(arr)
    assert sorted(order) == sorted(f"s{i}" for i in range(len(plan)))
    remaining = list(order)
    for name in rnd.sample(order, len(order)):
        arr = arr.without_session(name)
        remaining.remove(name)
        assert names(arr) == remaining  # relative order survives every removal
        for w in arr.windows:
            assert w.tabs
            for t in w.tabs:
                _check_no_single_child_splits(t.root)
    assert arr == Arrangement()


def _check_no_single_child_splits(node: Split | SessionLeaf) -> None:
    if isinstance(node, Split):
        assert len(node.children) >= 2
        for child in node.children:
            _check_no_single_child_splits(child)
