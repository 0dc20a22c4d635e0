"""The command line's saved sessions (``_saved``, ``_state``) with thousands saved: a
command about one session finds, adds, closes and takes the notice of that
session by its own rows. One session's row is damaged in the store these
tests make: every call about another one works all the same, and a call
that reads them all is the one that finds the damage (and, from the
command line, moves the file aside)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from multiserver import ChildInfo
from multiserver.internal import state_dir
from multiserver_cli import _saved, _state
from restore import (
    Arrangement,
    ArrangementStore,
    RestorationRef,
    SessionLeaf,
    StoreCorrupt,
    Tab,
    Window,
    read_saved,
)
from tests.conftest import MsDirs

MANY = 2000
SOCK = Path("/run/ms/multiserver-daemon-1.socket")


def child(i: int, name: str) -> ChildInfo:
    return ChildInfo(
        i, 1000 + i, name, ["sleep", "1000"], "/", "/dev/pts/1", 24, 80, "running", None,
        False, 0, 0, 1.7e9, None, None,
    )  # fmt: skip


def ref(i: int) -> RestorationRef:
    return RestorationRef(str(SOCK), "inst-1", i, 1000 + i)


@pytest.fixture
def store_path(ms_dirs: MsDirs) -> Path:
    """MANY sessions saved, "s7" with a notice waiting, "bad" damaged."""
    path = ArrangementStore.default_path()
    leaves = [SessionLeaf(f"s{i}", ["sh"], "/", ref=ref(i)) for i in range(MANY)]
    leaves[7] = SessionLeaf("s7", ["sh"], "/", ref=ref(7), notice=b"relaunched")
    with ArrangementStore.open() as store:
        store.save(Arrangement([Window("main", [Tab(x) for x in leaves])]))
        store.add_session(SessionLeaf("bad", ["sh"], "/"))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE sessions SET leaf = '[' WHERE name = 'bad'")
    finally:
        conn.close()
    return path


def test_one_session_is_found_added_and_closed_by_its_rows(store_path: Path) -> None:
    with _saved.open_saved() as saved:
        found = saved.find("s5")
        assert found is not None and found.ref is not None and found.ref.child_id == 5
        assert saved.find("nope") is None
        _saved.record_new(saved, child(90000, "fresh"), SOCK, "inst-1", "main")
        assert _saved.take_notice(saved, "s7") == b"relaunched"
        assert _saved.take_notice(saved, "s7") == b""  # taken once
        store = saved.store()
        staged = _state.stage_close(store, SOCK, "inst-1", child(9, "s9"))
        assert staged is not None and staged.name == "s9"
        _state.complete_close(store, staged.name, staged.ref)
        assert _state.stage_close(store, SOCK, "inst-0", child(10, "s10")) is None  # another run
    [fresh] = read_saved(state_dir(), names=["fresh"]) or []
    assert fresh.ref is not None and fresh.ref.child_id == 90000
    assert read_saved(state_dir(), names=["s9"]) == []
    with ArrangementStore.open() as store, pytest.raises(StoreCorrupt, match="session 'bad'"):
        store.load()


def test_the_whole_read_finds_the_damage_and_moves_the_file_aside(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _saved.open_saved() as saved:
        names = [leaf.name for leaf in saved.leaves()]
    assert names == [f"s{i}" for i in range(MANY)]  # all but the damaged one, kept
    said = capsys.readouterr().err
    assert "session 'bad'" in said and "moved it to" in said
    aside = [p for p in store_path.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1


def test_a_newer_store_is_read_as_far_as_it_can_be(
    ms_dirs: MsDirs, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newer file whose layout this multiserver cannot read: a session is
    still found by name; the whole read says why not, once, and finds no
    session; nothing is moved aside."""
    with ArrangementStore.open() as store:
        store.add_session(SessionLeaf("a", ["sh"], "/"))
    conn = sqlite3.connect(ArrangementStore.default_path(), isolation_level=None)
    try:
        conn.execute("UPDATE meta SET value = 9 WHERE key = 'schema_version'")
        conn.execute("DROP TABLE tabs")
    finally:
        conn.close()
    with _saved.open_saved() as saved:
        found = saved.find("a")
        assert found is not None and found.argv == ["sh"]
        assert saved.leaves() == []
    [said] = capsys.readouterr().err.splitlines()
    assert "saved arrangement unavailable" in said and "newer" in said
    assert not [p for p in state_dir().iterdir() if ".corrupt-" in p.name]


def test_what_bears_on_one_name_is_read_by_its_rows(store_path: Path) -> None:
    """A command about one session (``_sessions.survey_about``) reads the
    sessions whose names begin with its name's family, the other hosts'
    names, the sockets referred to, and the sessions that refer to the
    children its daemons reported: rows and columns, never the damaged
    session's row, never the other 2,000."""
    with ArrangementStore.open() as store:
        store.add_session(SessionLeaf("h:s12", ["sh"], "/", host="h"))
        store.add_session(SessionLeaf("h:zz", ["sh"], "/", host="h"))
    with _saved.open_saved() as saved:
        about = [leaf.name for leaf in saved.about("s12", "s12")]
        family = [f"s{i}" for i in range(MANY) if f"s{i}".startswith("s12")]
        assert len(family) == 111 and sorted(about) == sorted(["h:s12", *family])
        assert saved.ref_sockets() == [str(SOCK)]
        referring = saved.referring([(str(SOCK), "inst-1", 5), (str(SOCK), "inst-0", 6)])
        assert [leaf.name for leaf in referring] == ["s5"]
        assert saved.referring([]) == []
        assert saved._leaves is None  # nothing read them all
