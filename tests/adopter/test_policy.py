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
    orphan_leaf,
    orphan_name,
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


# --- orphan_name -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["vim", "notes"], "orphan-vim-1"),
        (["/usr/bin/python3.11", "-m", "x"], "orphan-python3.11-1"),
        (["my prog!", "x"], "orphan-my_prog-1"),
        (["-bash"], "orphan-bash-1"),  # a login shell's argv[0]
        ([".hidden"], "orphan-hidden-1"),
        (["ünïcode"], "orphan-n_code-1"),
        (["$$$"], "orphan-process-1"),
        ([""], "orphan-process-1"),
        (["/usr/bin/"], "orphan-process-1"),
        ([], "orphan-process-1"),
        (["x" * 100], "orphan-" + "x" * 40 + "-1"),
    ],
)
def test_orphan_name_is_the_sanitized_command(argv: list[str], name: str) -> None:
    assert orphan_name(argv, []) == name
    check_session_name(name)


def test_orphan_name_takes_the_smallest_free_number() -> None:
    assert orphan_name(["vim"], ["orphan-vim-1"]) == "orphan-vim-2"
    assert orphan_name(["vim"], ["orphan-vim-1", "orphan-vim-3"]) == "orphan-vim-2"
    assert orphan_name(["vim"], ["orphan-vim-2", "orphan-sh-1", "vim"]) == "orphan-vim-1"
    # ``taken`` may be any iterable, read once.
    assert orphan_name(["vim"], (f"orphan-vim-{i}" for i in range(1, 5))) == "orphan-vim-5"


@settings(max_examples=100, deadline=None)
@given(
    argv=st.lists(st.text(max_size=60), max_size=3),
    taken=st.lists(
        st.one_of(
            st.from_regex(r"orphan-[a-z_]{1,3}-[1-3]", fullmatch=True),
            st.text(min_size=1, max_size=20),
        ),
        max_size=20,
    ),
)
def test_orphan_name_is_always_valid_and_never_collides(argv: list[str], taken: list[str]) -> None:
    name = orphan_name(argv, taken)
    check_session_name(name)
    assert name not in taken
    assert name.startswith("orphan-")


def test_orphan_names_never_collide_across_many_adoptions() -> None:
    sink = MemorySink(arranged(SessionLeaf("orphan-sh-2", ["sh"], "/")))
    for i in range(1, 8):
        sink.record(child(i, ["sh"] if i % 2 else ["/bin/sh"]), SOCK, INSTANCE)
    names = [x.name for x in sink.current.leaves()]
    assert len(names) == len(set(names)) == 8
    assert sorted(names) == sorted(
        ["orphan-sh-2"] + [f"orphan-sh-{n}" for n in (1, 3, 4, 5, 6, 7, 8)]
    )


# --- the adopted leaf --------------------------------------------------------------


def test_orphan_leaf_carries_notice_ref_and_what_to_run_again() -> None:
    c = child(7, ["vim", "notes.txt"], cwd="/src", rows=50, cols=132)
    got = orphan_leaf(Arrangement(), c, SOCK.replace("/multiserver/", "//multiserver/"), INSTANCE)
    assert got == SessionLeaf(
        name="orphan-vim-1",
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


def test_orphan_leaf_name_avoids_every_window() -> None:
    arr = Arrangement(
        [
            Window("main", [Tab(SessionLeaf("orphan-vim-1", ["vim"], "/"))]),
            Window("w2", [Tab(SessionLeaf("orphan-vim-2", ["vim"], "/"))]),
        ]
    )
    got = orphan_leaf(arr, child(1, ["vim"]), SOCK, INSTANCE)
    assert got is not None and got.name == "orphan-vim-3"


def test_memory_sink_records_into_the_orphans_window_once() -> None:
    main = leaf("editor", child_id=1)
    sink = MemorySink(arranged(main))
    first = sink.record(child(2, ["top"]), SOCK, INSTANCE)
    assert first is not None and first.name == "orphan-top-1"
    assert sink.record(child(2, ["top"]), SOCK, INSTANCE) is None  # already referenced
    assert sink.record(child(1), SOCK, INSTANCE) is None  # a saved session's child
    second = sink.record(child(3, ["top"]), SOCK, INSTANCE)
    assert second is not None and second.name == "orphan-top-2"
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
