"""The light read of the store (``read_saved``) against the whole store:
the same sessions, field for field, or None where it is not sure (and the
whole store then says what is wrong). The twins it reads into are what the
generator writes today."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from restore import (
    ArrangementStore,
    PendingLaunch,
    RestorationRef,
    SavedOutput,
    SessionLeaf,
    StoreCorrupt,
    read_about,
    read_saved,
    ref_key,
)
from restore.store import _light_model
from restore.store._outline import add_saved
from restore.store._rules import SCROLLBACK_LIMIT
from tools import store_lightgen


def fields(leaf: Any) -> dict[str, Any]:
    """A leaf, of either kind, as its fields."""
    if attrs.has(type(leaf)):
        return attrs.asdict(leaf, recurse=True)
    out = {}
    for name in type(leaf).__slots__:
        value = getattr(leaf, name)
        out[name] = fields(value) if hasattr(type(value), "__slots__") else value
    return out


def test_the_generated_twins_are_what_the_generator_writes() -> None:
    """Stale after a change to _model.py: run `make faces`."""
    assert store_lightgen.TARGET.read_text() == store_lightgen.module_text()


_names = st.from_regex(r"[a-z][a-z0-9_.-]{0,10}", fullmatch=True)
_text = st.text(max_size=8)
# Paths and argv as Python holds what the OS gave: lone surrogates too.
_os = st.one_of(_text, st.binary(max_size=8).map(os.fsdecode))


@st.composite
def _leaf(draw: st.DrawFn, name: str) -> SessionLeaf:
    host = draw(st.none() | st.sampled_from(["h1", "box.lan"]))
    return SessionLeaf(
        name=f"{host}:{name}" if host else name,
        argv=draw(st.lists(_os, max_size=3)),
        cwd=draw(_os),
        rows=draw(st.integers(1, 500)),
        cols=draw(st.integers(1, 500)),
        title=draw(_text),
        ref=draw(
            st.none()
            | st.builds(RestorationRef, _os, _text, st.integers(0, 2**31), st.integers(1, 2**22))
        ),
        created_at=draw(st.floats(0, 2e9)),
        host=host,
        pending_launch=draw(st.none() | st.builds(PendingLaunch, _os, _text, st.floats(0, 2e9))),
        exit_code=draw(st.none() | st.integers(-64, 255)),
        notice=draw(st.none() | st.binary(max_size=20)),
    )


@st.composite
def _sessions(draw: st.DrawFn) -> list[tuple[SessionLeaf, str]]:
    names = draw(st.lists(_names, max_size=6, unique=True))
    return [(draw(_leaf(n)), draw(st.sampled_from(["main", "w2"]))) for n in names]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=_sessions(), big=st.booleans())
def test_the_light_read_gives_what_the_store_loads(
    tmp_path_factory: pytest.TempPathFactory,
    sessions: list[tuple[SessionLeaf, str]],
    big: bool,
) -> None:
    state = tmp_path_factory.mktemp("state")
    store = ArrangementStore.open(state / "arrangement.sqlite3")
    try:
        for leaf, window in sessions:
            store.add_session(leaf, window=window)
        outputs = [
            SavedOutput(
                leaf.ref.socket,
                leaf.ref.instance_id,
                leaf.ref.child_id,
                b"x" * (SCROLLBACK_LIMIT + 5 if big else 10),
            )
            for leaf, _w in sessions
            if leaf.ref is not None
        ]
        store.save_outputs(outputs)
        whole = store.load().leaves()
    finally:
        store.close()
    light = read_saved(state)
    assert light is not None
    assert [fields(leaf) for leaf in light] == [fields(leaf) for leaf in whole]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=_sessions(), data=st.data())
def test_the_light_read_of_some_sessions_gives_what_the_store_finds(
    tmp_path_factory: pytest.TempPathFactory,
    sessions: list[tuple[SessionLeaf, str]],
    data: st.DataObject,
) -> None:
    """By name and by the child a session refers to: the store's
    ``sessions``, each with its bytes fields as ``find`` gives them."""
    state = tmp_path_factory.mktemp("state")
    names = [leaf.name for leaf, _w in sessions] + ["nope"]
    refs = [ref_key(leaf.ref) for leaf, _w in sessions if leaf.ref is not None]
    refs.append(("/nowhere", "i", 1))
    asked = data.draw(st.lists(st.sampled_from(names), max_size=4))
    referred = data.draw(st.lists(st.sampled_from(refs), max_size=4))
    store = ArrangementStore.open(state / "arrangement.sqlite3")
    try:
        for leaf, window in sessions:
            store.add_session(leaf, window=window)
        store.save_outputs(
            [SavedOutput(*ref_key(leaf.ref), b"out") for leaf, _w in sessions if leaf.ref]
        )
        found = store.sessions(asked, referred)
        whole = [store.find(leaf.name) for leaf in found]
        outline = {leaf.name: leaf for leaf in store.load_outline().leaves()}
    finally:
        store.close()
    assert found == [outline[leaf.name] for leaf in found]
    assert {leaf.name for leaf in found} == set(asked) & set(outline) | {
        name for name, leaf in outline.items() if leaf.ref and ref_key(leaf.ref) in referred
    }
    light = read_saved(state, names=asked, refs=referred)
    assert light is not None
    assert [fields(leaf) for leaf in light] == [fields(leaf) for leaf in whole]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=_sessions(), data=st.data())
def test_what_a_command_about_one_name_reads_is_what_the_store_holds_of_it(
    tmp_path_factory: pytest.TempPathFactory,
    sessions: list[tuple[SessionLeaf, str]],
    data: st.DataObject,
) -> None:
    """``read_about``: the sessions whose names begin with the prefix and
    the other hosts' sessions of that bare name, as the store finds them,
    and every socket this host's sessions refer to, normalised."""
    state = tmp_path_factory.mktemp("state")
    bare = [leaf.name.partition(":")[2] or leaf.name for leaf, _w in sessions] + ["nope"]
    name = data.draw(st.sampled_from(bare))
    prefix = data.draw(st.sampled_from(["", name, name[:1], name[:2]]))
    store = ArrangementStore.open(state / "arrangement.sqlite3")
    try:
        for leaf, window in sessions:
            store.add_session(leaf, window=window)
        every = store.load().leaves()
        wanted = [
            leaf.name
            for leaf in every
            if leaf.name.startswith(prefix)
            or (leaf.host is not None and leaf.name.partition(":")[2] == name)
        ]
        whole = {n: store.find(n) for n in wanted}
    finally:
        store.close()
    got = read_about(state, prefix, name)
    assert got is not None
    leaves, sockets = got
    assert sorted(leaf.name for leaf in leaves) == sorted(wanted)
    assert all(fields(leaf) == fields(whole[leaf.name]) for leaf in leaves)
    assert sorted(sockets) == sorted(
        {ref_key(leaf.ref)[0] for leaf in every if leaf.host is None and leaf.ref is not None}
    )


def test_no_store_is_no_session_saved(tmp_path: Path) -> None:
    assert read_saved(tmp_path) == []


def test_a_directory_in_the_stores_place_is_the_whole_stores_to_tell(tmp_path: Path) -> None:
    """The light reads are not sure of it (the store says why, in one
    line), and leave it as it is."""
    tmp_path.chmod(0o700)
    (tmp_path / "arrangement.sqlite3").mkdir()
    assert read_saved(tmp_path) is None
    assert read_saved(tmp_path, names=["a"]) is None
    assert read_about(tmp_path, "a", "a") is None
    assert not add_saved(tmp_path, _light_model.SessionLeaf("a", ["sh"], "/"))
    assert (tmp_path / "arrangement.sqlite3").is_dir()


def _store_with(tmp_path: Path, *names: str) -> Path:
    store = ArrangementStore.open(tmp_path / "arrangement.sqlite3")
    for name in names:
        store.add_session(SessionLeaf(name, ["sh"], "/"))
    store.close()
    return tmp_path / "arrangement.sqlite3"


def _sql(path: Path, statement: str, *args: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement, args)
    finally:
        conn.close()


_TWO_IN_A_SPLIT = (
    '{"kind":"split","vertical":true,"children":'
    '[{"kind":"session","name":"a"},{"kind":"session","name":"b"}]}'
)


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("a newer schema", ("UPDATE meta SET value = 3 WHERE key = 'schema_version'",)),
        ("a close pending", ("INSERT INTO pending_closes VALUES (NULL, 'a', NULL, 0)",)),
        ("a session that is not JSON", ("UPDATE sessions SET leaf = '{' WHERE name = 'a'",)),
        ("a layout that is not JSON", ("UPDATE tabs SET root = '{' WHERE id = 1",)),
        (
            "an unknown kind of node",
            ('UPDATE tabs SET root = \'{"kind":"pane"}\' WHERE id = 1',),
        ),
        (
            "a session named by two tabs",
            ('UPDATE tabs SET root = \'{"kind":"session","name":"a"}\' WHERE id = 2',),
        ),
        ("a session in no tab", ("DELETE FROM tabs WHERE id = 2",)),
        ("a tab in no window", ("UPDATE tabs SET window = 9 WHERE id = 2",)),
        ("a garbled tab title", ("UPDATE tabs SET title = x'ff' WHERE id = 2",)),
        (
            "a bad name",
            (
                "UPDATE sessions SET leaf = ? WHERE name = 'a'",
                '{"name":"-a","argv":[],"cwd":"/"}',
            ),
        ),
        (
            "a row under another name",
            ("UPDATE sessions SET leaf = ? WHERE name = 'a'", '{"name":"b","argv":[],"cwd":"/"}'),
        ),
        (
            "a number for a string",
            ("UPDATE sessions SET leaf = ? WHERE name = 'a'", '{"name":"a","argv":[],"cwd":5}'),
        ),
        (
            "sizes that do not fit",
            (
                "UPDATE tabs SET root = ? WHERE id = 1",
                _TWO_IN_A_SPLIT.replace('"children"', '"sizes":[1],"children"'),
            ),
        ),
    ],
)
def test_what_the_light_read_is_not_sure_of_is_the_whole_stores(
    tmp_path: Path, what: str, change: tuple[Any, ...]
) -> None:
    """None, and the whole store says what is wrong: finishes the closes,
    refuses to write a newer file, or finds it damaged. (A version-1 file,
    which the store migrates: ``test_rows``.)"""
    path = _store_with(tmp_path, "a", "b")
    _sql(path, *change)
    assert read_saved(tmp_path) is None, what
    store = ArrangementStore.open(path)
    try:
        if what in ("a close pending", "a newer schema"):
            assert store.read_only == (what == "a newer schema")
        else:
            with pytest.raises(StoreCorrupt):
                store.load()
    finally:
        store.close()


def test_sessions_in_a_split_are_read_in_the_stores_order(tmp_path: Path) -> None:
    path = _store_with(tmp_path, "a", "b")
    _sql(path, "UPDATE tabs SET root = ? WHERE id = 1", _TWO_IN_A_SPLIT)
    _sql(path, "DELETE FROM tabs WHERE id = 2")
    _sql(path, "UPDATE sessions SET tab = 1")
    assert [leaf.name for leaf in read_saved(tmp_path) or []] == ["a", "b"]
    with ArrangementStore.open(path) as store:
        assert [leaf.name for leaf in store.load().leaves()] == ["a", "b"]


def test_a_file_that_is_not_sqlite_is_the_whole_stores(tmp_path: Path) -> None:
    (tmp_path / "arrangement.sqlite3").write_bytes(b"not a database at all")
    assert read_saved(tmp_path) is None
    (tmp_path / "arrangement.sqlite3").write_bytes(b"")
    assert read_saved(tmp_path) is None


def test_fields_a_newer_multiserver_wrote_are_ignored_as_the_store_ignores_them(
    tmp_path: Path,
) -> None:
    path = _store_with(tmp_path, "a")
    _sql(
        path, "UPDATE sessions SET leaf = ?", '{"name":"a","argv":["sh"],"cwd":"/","colour":"red"}'
    )
    _sql(path, "UPDATE tabs SET root = ?", '{"kind":"session","name":"a","future":1}')
    _sql(path, "ALTER TABLE sessions ADD COLUMN later TEXT")
    [light] = read_saved(tmp_path) or []
    store = ArrangementStore.open(path)
    try:
        [whole] = store.load().leaves()
    finally:
        store.close()
    assert fields(light) == fields(whole)


def twin_of(leaf: SessionLeaf) -> Any:
    """The light twin of an attrs leaf (its records too)."""

    def twin(value: Any) -> Any:
        if attrs.has(type(value)):
            cls = getattr(_light_model, type(value).__name__)
            return cls(**{f.name: twin(getattr(value, f.name)) for f in attrs.fields(type(value))})
        return value

    return twin(leaf)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sessions=_sessions(),
    new=_names.flatmap(_leaf),
    window=st.sampled_from(["main", "w2", "w3"]),
)
def test_a_session_added_lightly_is_what_the_store_would_have_added(
    tmp_path_factory: pytest.TempPathFactory,
    sessions: list[tuple[SessionLeaf, str]],
    new: SessionLeaf,
    window: str,
) -> None:
    new = attrs.evolve(new, notice=None)
    loaded = []
    for light in (False, True):
        state = tmp_path_factory.mktemp("state")
        store = ArrangementStore.open(state / "arrangement.sqlite3")
        try:
            for leaf, w in sessions:
                store.add_session(leaf, window=w)
            taken = store.load().find(new.name) is not None
            if light:
                store.close()
                assert add_saved(state, twin_of(new), window) is not taken
                store = ArrangementStore.open(state / "arrangement.sqlite3")
            elif not taken:
                store.add_session(new, window=window)
            loaded.append(store.load())
        finally:
            store.close()
    assert loaded[0] == loaded[1]


def test_a_session_is_not_added_lightly_to_a_file_it_is_not_sure_of(tmp_path: Path) -> None:
    path = _store_with(tmp_path, "a")
    for version in (1, 3):  # older: the store migrates it; newer: nobody writes it
        _sql(path, "UPDATE meta SET value = ? WHERE key = 'schema_version'", version)
        assert not add_saved(tmp_path, twin_of(SessionLeaf("b", ["sh"], "/")))
    _sql(path, "UPDATE meta SET value = 2 WHERE key = 'schema_version'")
    assert not add_saved(tmp_path, twin_of(SessionLeaf("a", ["sh"], "/")))  # taken
    assert add_saved(tmp_path, twin_of(SessionLeaf("b", ["sh"], "/")))
    assert [leaf.name for leaf in read_saved(tmp_path) or []] == ["a", "b"]
    assert not add_saved(tmp_path / "nowhere", twin_of(SessionLeaf("c", ["sh"], "/")))
