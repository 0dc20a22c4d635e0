"""The store kept by session (schema version 2): a version-1 file migrated
exactly; one session found, added, changed or removed by reading and
writing its own rows only, however many are saved; every change the same
as the model's (``Arrangement``) on any arrangement. Every test works in
its own tmp_path."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import restore.store._outline as outline_mod
from restore import (
    Arrangement,
    ArrangementStore,
    LightSessionLeaf,
    PendingClose,
    PendingLaunch,
    RestorationRef,
    SavedOutput,
    SessionLeaf,
    Split,
    StoreCorrupt,
    Tab,
    Window,
    add_saved,
    read_saved,
    ref_key,
)
from restore.store._salvage import salvage
from restore.store._tree import parse_root, root_text, session_node
from tests.restore.store._files import raw, write_v1

SOCK = "/run/ms/multiserver-daemon-1.socket"


def leaf(name: str, **kw: Any) -> SessionLeaf:
    return SessionLeaf(**{"name": name, "argv": ["sh"], "cwd": "/", **kw})


def ref(child: int, socket: str = SOCK, instance: str = "inst-1") -> RestorationRef:
    return RestorationRef(socket, instance, child, 1000 + child)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "arrangement.sqlite3"


# --- arrangements of every shape -------------------------------------------------------

_text = st.text(max_size=6)
# Paths, argv and titles as Python holds what the OS gave: lone surrogates too.
_os = st.one_of(_text, st.binary(max_size=6).map(os.fsdecode))


@st.composite
def _leaf(draw: st.DrawFn, name: str) -> SessionLeaf:
    host = draw(st.none() | st.just("h1"))
    return SessionLeaf(
        name=f"{host}:{name}" if host else name,
        argv=draw(st.lists(_os, max_size=2)),
        cwd=draw(_os),
        rows=draw(st.integers(1, 99)),
        title=draw(_os),
        ref=draw(
            st.none()
            | st.builds(
                RestorationRef,
                st.sampled_from([SOCK, "/run/ms//x.socket", os.fsdecode(b"/r/\xff")]),
                st.sampled_from(["i1", "i2"]),
                st.integers(0, 5),
                st.integers(1, 9),
            )
        ),
        created_at=draw(st.floats(0, 2e9)),
        host=host,
        pending_launch=draw(st.none() | st.builds(PendingLaunch, _os, _text, st.floats(0, 9))),
        exit_code=draw(st.none() | st.integers(-9, 9)),
        scrollback=draw(st.none() | st.binary(max_size=8)),
        notice=draw(st.none() | st.binary(max_size=8)),
    )


@st.composite
def arrangements(draw: st.DrawFn) -> Arrangement:
    """Windows (names repeated, some empty), tabs, nested splits with and
    without sizes; names unique."""
    names = iter(f"s{i}" for i in range(1000))

    def tree(depth: int) -> Split | SessionLeaf:
        if depth == 0 or draw(st.booleans()):
            return draw(_leaf(next(names)))
        children = [tree(depth - 1) for _ in range(draw(st.integers(1, 3)))]
        sizes = draw(
            st.none() | st.lists(st.floats(0, 1), min_size=len(children), max_size=len(children))
        )
        return Split(draw(st.booleans()), children, sizes)

    windows = []
    for _ in range(draw(st.integers(0, 3))):
        tabs = [Tab(tree(2), draw(_os)) for _ in range(draw(st.integers(0, 3)))]
        name = draw(st.sampled_from(["main", "w2", os.fsdecode(b"w\xff")]))
        windows.append(Window(name, tabs))
    return Arrangement(windows)


def rich() -> Arrangement:
    """Many windows, tabs and splits, every field, bytes, odd text."""
    odd = os.fsdecode(b"caf\xe9")
    return Arrangement(
        [
            Window(
                "main",
                [
                    Tab(
                        Split(
                            True,
                            [
                                leaf("a", ref=ref(1), scrollback=b"A\x00\xff", notice=b"N"),
                                Split(False, [leaf("b"), leaf("c", scrollback=b"")], [1.0, 2.0]),
                                leaf(
                                    "d", ref=ref(2, socket="/run/ms/./multiserver-daemon-1.socket")
                                ),
                            ],
                            [0.2, 0.3, 0.5],
                        ),
                        title="work ✓",
                    ),
                    Tab(leaf("e", argv=["vim", odd], cwd=odd, title=odd)),
                ],
            ),
            Window("empty", []),
            Window(
                odd,
                [
                    Tab(Split(False, [leaf("f"), leaf("h1:g", host="h1", ref=ref(3, "/r"))])),
                    Tab(leaf("i", pending_launch=PendingLaunch(SOCK, "inst-2", 5.5)), odd),
                ],
            ),
            Window("main", [Tab(leaf("j", exit_code=-9, created_at=1.7e9))]),
        ]
        + [Window(f"w{n}", [Tab(leaf(f"k{n}-{t}")) for t in range(3)]) for n in range(5)]
    )


# --- migration from version 1 -----------------------------------------------------------


def test_a_version_1_file_is_migrated_exactly(path: Path) -> None:
    pending = [PendingClose("gone", ref(9), 12.5), PendingClose("never", None, 13.0)]
    write_v1(path, rich(), pending)
    assert read_saved(path.parent) is None  # the light read leaves the migration to the store
    with ArrangementStore.open(path) as store:
        assert store.schema_version == 2
        assert store.load() == rich()
        assert store.pending_closes() == pending
        assert store.find("a") == rich().find("a")
        assert store.sessions(refs=[ref_key(ref(2))]) == [attrs.evolve(rich().find("d"))]
    with raw(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "arrangement" not in tables  # a version-1 multiserver finds a newer file
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == 2
    conn.close()
    with ArrangementStore.open(path) as again:
        assert again.load() == rich()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arr=arrangements())
def test_any_version_1_file_is_migrated_exactly(
    tmp_path_factory: pytest.TempPathFactory, arr: Arrangement
) -> None:
    path = tmp_path_factory.mktemp("v1") / "arrangement.sqlite3"
    write_v1(path, arr)
    with ArrangementStore.open(path) as store:
        assert store.load() == arr


def test_a_version_1_file_that_does_not_structure_is_quarantined_and_salvaged(
    path: Path,
) -> None:
    write_v1(path, rich(), [PendingClose("gone", None, 1.0)])
    with raw(path) as conn:
        conn.execute("UPDATE arrangement SET doc = '{\"windows\": 5}'")
    conn.close()
    original = path.read_bytes()
    with pytest.raises(StoreCorrupt, match="does not fit Arrangement"):
        ArrangementStore.open(path)
    assert path.read_bytes() == original  # the failed migration changed nothing
    store, warning = ArrangementStore.open_or_quarantine(path)
    with store:
        assert warning is not None and "started an empty arrangement" in warning
        assert store.load() == Arrangement() and store.schema_version == 2
        assert [p.name for p in store.pending_closes()] == ["gone"]


def test_salvage_reads_version_1_files_too(path: Path) -> None:
    write_v1(path, rich())
    kept = salvage(path)
    assert kept.arrangement == rich() and kept.sessions_lost == 0


# --- one session, its rows only ------------------------------------------------------------

MANY = 2000


@pytest.fixture
def many(path: Path) -> Iterator[ArrangementStore]:
    """A store with MANY sessions, one of them ("x0") damaged, and "in-a"
    and "in-b" split side by side in one tab."""
    arr = Arrangement(
        [
            Window(
                "main",
                [Tab(leaf(f"s{i}", ref=ref(i), scrollback=b"S" * 100)) for i in range(MANY)]
                + [Tab(leaf("x0")), Tab(Split(True, [leaf("in-a"), leaf("in-b", ref=ref(-1))]))],
            )
        ]
    )
    with ArrangementStore.open(path) as store:
        store.save(arr)
    with raw(path) as conn:
        conn.execute("UPDATE sessions SET leaf = '{\"name\": ' WHERE name = 'x0'")
    conn.close()
    with ArrangementStore.open(path) as store:
        yield store


@pytest.fixture
def statements(many: ArrangementStore) -> list[str]:
    """The SQL the store runs from here on."""
    seen: list[str] = []
    many._conn.set_trace_callback(seen.append)
    return seen


def scans(path: Path, statements: list[str]) -> list[str]:
    """The statements among ``statements`` that read a whole table of the
    arrangement (pending closes are few, by design: not counted)."""
    conn = raw(path)
    out = []
    try:
        for sql in statements:
            if re.match(r"(BEGIN|COMMIT|ROLLBACK|PRAGMA)\b", sql):
                continue
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            if any(re.match(r"SCAN (windows|tabs|sessions|leaf_bytes)\b", p) for p in plan):
                out.append(f"{sql}: {plan}")
    finally:
        conn.close()
    return out


def test_one_session_is_read_and_changed_by_its_own_rows(
    many: ArrangementStore, statements: list[str], path: Path
) -> None:
    """With MANY sessions saved and one of them damaged, every call about
    one session works without reading the others, and none reads a whole
    table (by the query plan of each statement it ran); a whole read
    (``load``) finds the damage."""
    last = f"s{MANY - 1}"
    assert many.find(last) == leaf(last, ref=ref(MANY - 1), scrollback=b"S" * 100)
    assert many.find("nope") is None
    assert many.sessions(names=["s5", "nope"], refs=[ref_key(ref(7)), ref_key(ref(5))]) == [
        leaf("s5", ref=ref(5)),
        leaf("s7", ref=ref(7)),
    ]
    many.add_session(leaf("new", ref=ref(-5), scrollback=b"N"), window="other")
    many.add_session(leaf("new2"))
    many.update_session(leaf("s3", title="T", ref=ref(3), notice=b"hello"))
    assert many.update_sessions([leaf("s4", title="U"), leaf("nope")]) == ["nope"]
    assert many.save_outputs(
        [SavedOutput(SOCK, "inst-1", 6, b"screen", 3), SavedOutput(SOCK, "inst-0", 6, b"x")]
    ) == ["s6"]
    staged = many.stage_close("s8")
    assert staged == leaf("s8", ref=ref(8), scrollback=b"S" * 100)
    many.complete_close("s8", staged.ref)
    many.remove_session("in-a")  # its split goes: in-b is the tab's root now
    many.remove_session("new")  # and window "other" with its last tab
    assert scans(path, statements) == []
    with ArrangementStore.open(path) as other:
        # update_session: the saved bytes fields become the leaf's
        assert other.find("s3") == leaf("s3", title="T", ref=ref(3), notice=b"hello")
        assert other.find("s6") == leaf("s6", ref=ref(6), scrollback=b"screen", exit_code=3)
        assert other.find("s8") is None and other.pending_closes() == []
        with pytest.raises(StoreCorrupt, match="session 'x0' is not valid JSON"):
            other.load()
    with raw(path) as conn:
        conn.execute("DELETE FROM sessions WHERE name = 'x0'")
        conn.execute('DELETE FROM tabs WHERE root = \'{"kind":"session","name":"x0"}\'')
    conn.close()
    names = [x.name for x in many.load().leaves()]
    assert names == [f"s{i}" for i in range(MANY) if i != 8] + ["in-b", "new2"]
    assert many.load().windows[0].tabs[-2].root == leaf("in-b", ref=ref(-1))


def writes(statements: list[str]) -> list[str]:
    return [sql for sql in statements if re.match(r"(INSERT|UPDATE|DELETE)\b", sql)]


def test_modify_writes_the_rows_that_changed(
    many: ArrangementStore, statements: list[str], path: Path
) -> None:
    """Whole by nature (``change`` sees the whole arrangement), but a change
    to one session, or one session more, writes a row or two."""
    with raw(path) as conn:  # mended: modify reads every session
        conn.execute(
            "UPDATE sessions SET leaf = ? WHERE name = 'x0'",
            (json.dumps({"name": "x0", "argv": ["sh"], "cwd": "/"}),),
        )
    conn.close()
    many.modify(lambda arr: arr.replace_session(leaf("s5", title="T", ref=ref(5))))
    assert len(writes(statements)) == 1
    statements.clear()
    many.modify(lambda arr: arr.with_session(leaf("adopted"), "orphans"))
    assert len(writes(statements)) == 5  # window, tab, session, its two bytes fields
    statements.clear()
    many.modify(lambda arr: arr.with_session(leaf("adopted2"), "orphans"))
    assert len(writes(statements)) == 4
    statements.clear()
    many.modify(lambda arr: arr)
    assert writes(statements) == []
    with ArrangementStore.open(path) as other:
        assert other.find("s5") == leaf("s5", title="T", ref=ref(5), scrollback=b"S" * 100)
        assert [t.root for t in other.load_outline().window("orphans").tabs] == [  # type: ignore[union-attr]
            leaf("adopted"),
            leaf("adopted2"),
        ]


def test_opening_reads_no_session(path: Path, many: ArrangementStore) -> None:
    seen: list[str] = []
    real = sqlite3.connect

    def traced(*args: Any, **kw: Any) -> sqlite3.Connection:
        conn = real(*args, **kw)
        conn.set_trace_callback(seen.append)
        return conn

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sqlite3, "connect", traced)
        ArrangementStore.open(path).close()
    assert seen and scans(path, seen) == []
    assert not any("sessions" in sql for sql in seen)


def test_the_light_read_of_one_session_reads_its_rows_only(
    path: Path, many: ArrangementStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    connect = outline_mod._connect

    def traced(state: Path) -> sqlite3.Connection | None:
        conn = connect(state)
        if conn is not None:
            conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(outline_mod, "_connect", traced)
    state = path.parent
    [one] = read_saved(state, names=["s9"]) or []
    assert (one.name, one.scrollback) == ("s9", b"S" * 100)
    [one] = read_saved(state, refs=[ref_key(ref(10))]) or []
    assert one.name == "s10"
    assert add_saved(state, LightSessionLeaf("light", ["sh"], "/"), "main")
    assert scans(path, seen) == []
    assert read_saved(state) is None  # the whole read finds the damaged row: the store's


# --- the same as the model ----------------------------------------------------------------

Op = tuple[str, Any]


def _merged(arr: Arrangement, i: int, _new: SessionLeaf) -> Arrangement:
    """The first two tabs of a window side by side in one."""
    full = [w for w in arr.windows if len(w.tabs) > 1]
    if not full:
        return arr
    w = full[i % len(full)]
    first, second, *rest = w.tabs
    tab = Tab(Split(True, [first.root, second.root], [1.0, 2.0]), second.title)
    return Arrangement([attrs.evolve(x, tabs=[tab, *rest]) if x is w else x for x in arr.windows])


def _dropped(arr: Arrangement, i: int, _new: SessionLeaf) -> Arrangement:
    names = [x.name for x in arr.leaves()]
    return arr.without_session(names[i % len(names)]) if names else arr


def _added(arr: Arrangement, i: int, new: SessionLeaf) -> Arrangement:
    name = new.name.replace("new", f"m{i}")
    if arr.find(name) is not None:
        return arr
    return arr.with_session(attrs.evolve(new, name=name), ["main", "w2", "w9"][i % 3])


def _turned(arr: Arrangement, i: int, _new: SessionLeaf) -> Arrangement:
    return Arrangement(arr.windows[i % 2 :] + arr.windows[: i % 2][::-1])


# Changes to the layout, through modify.
_RESHAPES = (_merged, _dropped, _added, _turned)

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.tuples(_leaf("new"), st.sampled_from(["main", "w2", "w9"]))),
        st.tuples(st.just("remove"), st.integers(0, 50)),
        st.tuples(st.just("stage"), st.integers(0, 50)),
        st.tuples(st.just("update"), st.tuples(st.integers(0, 50), _os)),
        st.tuples(st.just("retitle"), _os),
        st.tuples(
            st.just("reshape"),
            st.tuples(st.sampled_from(_RESHAPES), st.integers(0, 50), _leaf("new")),
        ),
    ),
    max_size=8,
)


def _apply(n: int, op: Op, store: ArrangementStore, model: Arrangement) -> Arrangement:
    """``op`` (the ``n``th) done to the store and to the model; the model after it."""
    kind, arg = op
    names = [x.name for x in model.leaves()]
    if kind == "add":
        new, window = arg
        new = attrs.evolve(new, name=new.name.replace("new", f"n{n}"))
        store.add_session(new, window)
        return model.with_session(new, window)
    if kind == "reshape":
        how, i, new = arg

        def reshape(arr: Arrangement) -> Arrangement:
            return how(arr, i, new)  # type: ignore[no-any-return]

        store.modify(reshape)
        return reshape(model)
    if not names:
        return model
    if kind == "retitle":  # a change to every session, through modify

        def change(arr: Arrangement) -> Arrangement:
            return arr.map_leaves(lambda x: attrs.evolve(x, title=arg))

        store.modify(change)
        return change(model)
    name = names[arg[0] % len(names)] if kind == "update" else names[arg % len(names)]
    if kind == "remove":
        store.remove_session(name)
    elif kind == "stage":
        assert store.stage_close(name) == model.find(name)
        store.complete_close(name)
    else:
        changed = attrs.evolve(model.find(name), cwd=arg[1], notice=b"n")  # type: ignore[misc]
        store.update_session(changed)
        return model.replace_session(changed)
    return model.without_session(name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=arrangements(), ops=_OPS)
def test_every_change_is_the_models(
    tmp_path_factory: pytest.TempPathFactory, start: Arrangement, ops: list[Op]
) -> None:
    path = tmp_path_factory.mktemp("rows") / "arrangement.sqlite3"
    with ArrangementStore.open(path) as store:
        store.save(start)
        model = start
        assert store.load() == model
        for n, op in enumerate(ops):
            model = _apply(n, op, store, model)
            assert store.load() == model, op
    light = read_saved(path.parent)
    assert light is not None
    assert [x.name for x in light] == [x.name for x in model.leaves()]


def test_a_window_saved_empty_stays_when_another_empties() -> None:
    """The model's rule, which the store keeps by session: removing a
    session drops the tab and window it empties, and nothing else."""
    arr = Arrangement([Window("empty", []), Window("w", [Tab(leaf("a"))])])
    assert arr.without_session("a") == Arrangement([Window("empty", [])])


def test_sessions_found_by_ref_are_the_ones_it_names(path: Path) -> None:
    with ArrangementStore.open(path) as store:
        store.add_session(leaf("a", ref=ref(1)))
        store.add_session(leaf("b", ref=ref(1, instance="inst-0")))  # an earlier run
        store.add_session(leaf("c", ref=ref(1, socket="/other.socket")))
        store.add_session(leaf("d", ref=ref(1, socket=os.fsdecode(b"/r/\xff"))))
        spelled = ("/run/ms/./multiserver-daemon-1.socket", "inst-1", 1)
        assert [x.name for x in store.sessions(refs=[spelled])] == ["a"]
        assert [x.name for x in store.sessions(refs=[(os.fsdecode(b"/r/\xff"), "inst-1", 1)])] == [
            "d"
        ]
        assert store.sessions(refs=[(SOCK, "inst-1", 2)]) == []
        assert [x.name for x in store.sessions(names=["c", "a"], refs=[ref_key(ref(1))])] == [
            "c",
            "a",
        ]
    light = read_saved(path.parent, names=["c"], refs=[spelled])
    assert [x.name for x in light or []] == ["c", "a"]


def test_a_session_row_written_by_hand_is_looked_up_by_its_leaf(path: Path) -> None:
    """The ref columns are an index of the leaf's ref: a row whose columns
    say otherwise is not taken for the child they name."""
    with ArrangementStore.open(path) as store:
        store.add_session(leaf("a", ref=ref(1)))
    with raw(path) as conn:
        conn.execute(
            "UPDATE sessions SET leaf = ? WHERE name = 'a'",
            (json.dumps({"name": "a", "argv": [], "cwd": "/", "ref": attrs.asdict(ref(2))}),),
        )
    conn.close()
    with ArrangementStore.open(path) as store:
        assert store.sessions(refs=[ref_key(ref(1))]) == []
    assert read_saved(path.parent, refs=[ref_key(ref(1))]) == []


@given(name=st.text())
def test_a_tab_of_one_session_reads_as_json_reads_it(name: str) -> None:
    """The short way (a regular expression) and the JSON parser agree."""
    for text in (root_text(session_node(name)), json.dumps(session_node(name), ensure_ascii=False)):
        try:
            want = json.loads(text)["name"]
        except ValueError:
            continue
        assert parse_root(text, lambda n: n, lambda *_: "split") == want
