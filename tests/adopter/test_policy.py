"""The adopter's pure policy (``adopter/_policy.py``) and the adopted leaf
(``adopter/_adopt.py``): no daemon, no trio."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from adopter import (
    ORPHAN_NOTICE,
    ORPHAN_WINDOW,
    MemorySink,
    StoreSink,
    classify,
    late_notice,
    orphan_leaf,
    orphans,
    referenced,
)
from multiserver import ChildInfo
from restore import Arrangement, ArrangementStore, RestorationRef, SessionLeaf, Tab, Window
from restore.store._model import check_session_name

SOCK = "/run/user/1000/multiserver/multiserver-daemon-1.socket"
OTHER_SOCK = "/run/user/1000/multiserver/multiserver-daemon-2.socket"
INSTANCE = "inst-a"


def child(
    id: int, argv: list[str] | None = None, *, state: str = "running", held: bool = False, **kw: Any
) -> ChildInfo:
    fields: dict[str, Any] = {
        "id": id,
        "pid": 1000 + id,
        "name": f"c{id}",
        "argv": ["sh"] if argv is None else argv,
        "cwd": "/home/me",
        "tty": f"/dev/pts/{id}",
        "rows": 24,
        "cols": 80,
        "state": state,
        "exit_code": 3 if state == "exited" else None,
        "held": held,
        "buffered_bytes": 0,
        "dropped_bytes": 0,
        "started_at": 1700000000.0 + id,
        "exited_at": 1700000100.0 if state == "exited" else None,
        "linger": None,
    }
    fields.update(kw)
    return ChildInfo(**fields)


def leaf(name: str, socket: str = SOCK, instance: str = INSTANCE, child_id: int = 1) -> SessionLeaf:
    return SessionLeaf(name, ["sh"], "/", ref=RestorationRef(socket, instance, child_id, 42))


def arranged(*leaves: SessionLeaf, window: str = "main") -> Arrangement:
    return Arrangement([Window(window, [Tab(x) for x in leaves])]) if leaves else Arrangement()


# --- classify ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("connected", "answered", "lock_held", "state"),
    [
        # Connected: the lock says nothing more, the answer decides.
        (True, True, True, "live"),
        (True, True, False, "live"),
        (True, False, True, "unresponsive"),
        (True, False, False, "unresponsive"),
        # Refused: the lock decides (held: starting or exiting, leave it).
        (False, False, True, "unresponsive"),
        (False, False, False, "stale"),
        # An answer without a connection cannot happen; the lock decides, and
        # a free lock is the only case that ever removes anything.
        (False, True, True, "unresponsive"),
        (False, True, False, "stale"),
    ],
)
def test_classify_every_combination(
    connected: bool, answered: bool, lock_held: bool, state: str
) -> None:
    assert classify(connected=connected, answered=answered, lock_held=lock_held) == state


def test_only_a_refused_socket_with_a_free_lock_is_stale() -> None:
    stale = [
        combo
        for combo in itertools.product([False, True], repeat=3)
        if classify(connected=combo[0], answered=combo[1], lock_held=combo[2]) == "stale"
    ]
    assert all(not connected and not lock_held for connected, _, lock_held in stale)


# --- orphans -----------------------------------------------------------------------


def test_unreferenced_running_and_exited_children_are_orphans() -> None:
    kids = [child(1), child(2, state="exited")]
    assert orphans(kids, SOCK, INSTANCE, referenced(Arrangement())) == kids


def test_held_children_are_not_orphans() -> None:
    kids = [child(1, held=True), child(2, state="exited", held=True), child(3)]
    assert [c.id for c in orphans(kids, SOCK, INSTANCE, referenced(Arrangement()))] == [3]


def test_referenced_children_are_not_orphans_in_any_window() -> None:
    kids = [child(1), child(2, state="exited"), child(3)]
    arr = Arrangement(
        [
            Window("main", [Tab(leaf("a", child_id=1))]),
            Window(ORPHAN_WINDOW, [Tab(leaf("b", child_id=2))]),
        ]
    )
    assert [c.id for c in orphans(kids, SOCK, INSTANCE, referenced(arr))] == [3]


@pytest.mark.parametrize(
    ("ref_socket", "ref_instance", "ref_child", "orphaned"),
    [
        (SOCK, INSTANCE, 1, False),  # the very child
        (OTHER_SOCK, INSTANCE, 1, True),  # same id on another daemon
        (SOCK, "inst-before", 1, True),  # same id in an earlier run of the daemon
        (SOCK, INSTANCE, 2, True),  # another child of this daemon
        # The same socket spelled differently is the same socket.
        ("/run/user/1000//multiserver/./multiserver-daemon-1.socket", INSTANCE, 1, False),
    ],
    ids=["same", "other-socket", "other-instance", "other-child", "same-socket-unnormalized"],
)
def test_matching_is_by_socket_instance_and_child_id(
    ref_socket: str, ref_instance: str, ref_child: int, orphaned: bool
) -> None:
    arr = arranged(leaf("s", ref_socket, ref_instance, ref_child))
    # The pid is never part of the match: the leaf's pid is 42, the child's 1001.
    assert bool(orphans([child(1)], SOCK, INSTANCE, referenced(arr))) == orphaned


def test_the_daemon_socket_is_normalized_too() -> None:
    arr = arranged(leaf("s", SOCK, INSTANCE, 1))
    assert (
        orphans(
            [child(1)], SOCK.replace("/multiserver/", "/multiserver//"), INSTANCE, referenced(arr)
        )
        == []
    )


def test_a_leaf_without_a_ref_references_nothing() -> None:
    arr = arranged(SessionLeaf("fresh", ["sh"], "/"))
    assert orphans([child(1)], SOCK, INSTANCE, referenced(arr)) == [child(1)]


# --- the adopted name ---------------------------------------------------------------


def test_an_orphan_keeps_its_name_and_a_late_original_is_name_late() -> None:
    """Adopted under the name its daemon knows it by (the one the person
    gave it: after a store lost, every session comes back under its own
    name); a saved session's name, it is not: that session's late
    original is NAME-late, then -late2..."""
    arr = Arrangement(
        [
            Window("main", [Tab(SessionLeaf("c1", ["vim"], "/"))]),
            Window("w2", [Tab(SessionLeaf("c1-late", ["vim"], "/"))]),
        ]
    )
    free = orphan_leaf(arr, child(2, ["vim"]), SOCK, INSTANCE)
    assert free is not None and (free.name, free.notice) == ("c2", ORPHAN_NOTICE.encode())
    late = orphan_leaf(arr, child(1, ["vim"]), OTHER_SOCK, INSTANCE)
    assert late is not None and late.name == "c1-late2"
    assert late.notice == late_notice("c1").encode() and b"c1" in late.notice


@settings(max_examples=100, deadline=None)
@given(
    names=st.lists(st.from_regex(r"[a-c]{1,2}(-late[2-3]?)?", fullmatch=True), max_size=12),
    taken=st.lists(st.from_regex(r"[a-c]{1,2}(-late[2-3]?)?", fullmatch=True), max_size=8),
)
def test_adopted_names_are_valid_and_never_collide(names: list[str], taken: list[str]) -> None:
    sink = MemorySink(arranged(*(SessionLeaf(n, ["sh"], "/") for n in dict.fromkeys(taken))))
    for i, name in enumerate(names, 1):  # a daemon each: a daemon has one child of a name
        sink.record(child(i, name=name), OTHER_SOCK.replace("-2.", f"-{i + 2}."), INSTANCE)
    got = [x.name for x in sink.current.leaves()]
    assert len(got) == len(set(got)) == len(set(taken)) + len(names)
    for name in got:
        check_session_name(name)


# --- the adopted leaf --------------------------------------------------------------


def test_orphan_leaf_carries_notice_ref_and_what_to_run_again() -> None:
    c = child(7, ["vim", "notes.txt"], cwd="/src", rows=50, cols=132)
    got = orphan_leaf(Arrangement(), c, SOCK.replace("/multiserver/", "//multiserver/"), INSTANCE)
    assert got == SessionLeaf(
        name="c7",
        argv=["vim", "notes.txt"],
        cwd="/src",
        rows=50,
        cols=132,
        title="vim notes.txt",
        ref=RestorationRef(SOCK, INSTANCE, 7, c.pid),  # socket normalized
        created_at=c.started_at,
        notice=ORPHAN_NOTICE.encode(),
    )
    assert got.scrollback is None  # its earlier output was never saved
    assert b"was not restored" in got.notice and b"not saved" in got.notice


def test_orphan_leaf_is_none_for_a_referenced_child() -> None:
    arr = arranged(leaf("mine", child_id=7))
    assert orphan_leaf(arr, child(7), SOCK, INSTANCE) is None
    assert orphan_leaf(arr, child(7), SOCK, "inst-b") is not None


def test_memory_sink_records_into_the_orphans_window_once() -> None:
    main = leaf("editor", child_id=1)
    sink = MemorySink(arranged(main))
    first = sink.record(child(2, ["top"]), SOCK, INSTANCE)
    assert first is not None and first.name == "c2"
    assert sink.record(child(2, ["top"]), SOCK, INSTANCE) is None  # already referenced
    assert sink.record(child(1), SOCK, INSTANCE) is None  # a saved session's child
    second = sink.record(child(3, ["top"]), SOCK, INSTANCE)
    assert second is not None and second.name == "c3"
    main_window, orphan_window = sink.current.windows
    assert main_window == Window("main", [Tab(main)])
    assert orphan_window == Window(ORPHAN_WINDOW, [Tab(first), Tab(second)])


def test_store_sink_records_once_durably_with_the_notice(tmp_path: Path) -> None:
    path = tmp_path / "arrangement.sqlite3"
    with ArrangementStore.open(path) as a, ArrangementStore.open(path) as b:
        a.save(arranged(leaf("editor", child_id=1)))
        got = StoreSink(a).record(child(2, ["top"]), SOCK, INSTANCE)
        assert got is not None
        # Another store on the same file (another process) sees it committed
        # and refuses the same child: one transaction checks and adds.
        assert StoreSink(b).record(child(2, ["top"]), SOCK, INSTANCE) is None
        assert StoreSink(b).record(child(1), SOCK, INSTANCE) is None
    with ArrangementStore.open(path) as store:
        saved = store.load()
    assert [w.name for w in saved.windows] == ["main", ORPHAN_WINDOW]
    # The leaf comes back whole, its notice (a bytes field, kept beside the
    # document) included.
    assert saved.windows[1] == Window(ORPHAN_WINDOW, [Tab(got)])
    assert got.notice == ORPHAN_NOTICE.encode()
