"""The arrangement store: SQLite file, transactions, tolerance, corruption,
durable close, concurrent writers. Every test works in its own tmp_path."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import restore.store._file as file_mod
import restore.store._rows as rows_mod
import restore.store._store as store_mod
from restore import (
    SCROLLBACK_LIMIT,
    Arrangement,
    ArrangementStore,
    PendingClose,
    RestorationRef,
    SavedOutput,
    SessionLeaf,
    Split,
    StoreCorrupt,
    StoreError,
    StoreTooNew,
    Tab,
    Window,
    ref_key,
)
from tests.restore.store._files import raw, set_doc

REPO = Path(__file__).resolve().parents[3]
REF = RestorationRef("/run/ms/multiserver-daemon-1.socket", "inst-1", 7, 4242)


def leaf(name: str, **kw: Any) -> SessionLeaf:
    return SessionLeaf(name, ["sh"], "/", **kw)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "arrangement.sqlite3"


@pytest.fixture
def store(path: Path) -> Iterator[ArrangementStore]:
    with ArrangementStore.open(path) as s:
        yield s


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- a fresh file ---------------------------------------------------------------------


def test_fresh_store_is_empty_private_and_wal(store: ArrangementStore, path: Path) -> None:
    assert store.load() == Arrangement()
    assert store.pending_closes() == []
    assert store.schema_version == 2 and not store.read_only
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert (
            conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == 2
        )
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert tables - {"sqlite_sequence"} == {
        "meta",
        "windows",
        "tabs",
        "sessions",
        "leaf_bytes",
        "pending_closes",
    }


def test_default_path_is_in_the_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state" / "multiserver"
    monkeypatch.setenv("MULTISERVER_STATE_DIR", str(state))
    assert ArrangementStore.default_path() == state / "arrangement.sqlite3"
    with ArrangementStore.open() as s:
        assert s.path == state / "arrangement.sqlite3"
        s.add_session(leaf("a"))
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    with ArrangementStore.open() as s:
        assert [x.name for x in s.load().leaves()] == ["a"]


# --- round trip and changes ----------------------------------------------------------------


def rich() -> Arrangement:
    return Arrangement(
        [
            Window(
                "main",
                [
                    Tab(
                        Split(
                            True,
                            [
                                SessionLeaf(
                                    "build",
                                    ["make", "-j8"],
                                    "/src/\udcffodd",  # surrogateescape'd path
                                    rows=50,
                                    cols=132,
                                    title="make ✓",
                                    scrollback=b"\x1b[32mok\x1b[0m\r\n\x00\xff",
                                    notice=b"[session expired, new shell started]\r\n",
                                    ref=REF,
                                    created_at=1700000000.5,
                                ),
                                Split(False, [leaf("b"), leaf("c", scrollback=b"")], [1.0, 2.0]),
                            ],
                            [0.25, 0.75],
                        ),
                        title="work",
                    ),
                    Tab(leaf("d")),
                ],
            ),
            Window("other", [Tab(leaf("e", ref=RestorationRef("/x", "i2", 1, 2)))]),
        ]
    )


def test_round_trip_through_a_reopen(store: ArrangementStore, path: Path) -> None:
    store.save(rich())
    assert store.load() == rich()
    store.close()
    with ArrangementStore.open(path) as again:
        assert again.load() == rich()


def test_an_argv_and_cwd_that_are_not_utf8_round_trip_byte_for_byte(
    store: ArrangementStore, path: Path
) -> None:
    argv = ["vim", os.fsdecode(b"caf\xe9.txt"), os.fsdecode(b"\xff\xfe")]
    cwd = os.fsdecode(b"/src/caf\xe9")
    store.add_session(SessionLeaf("latin", argv, cwd, title="vim caf\\xe9.txt"))
    store.close()
    with ArrangementStore.open(path) as again:
        [got] = again.load().leaves()
    assert [os.fsencode(a) for a in got.argv] == [b"vim", b"caf\xe9.txt", b"\xff\xfe"]
    assert os.fsencode(got.cwd) == b"/src/caf\xe9"
    with raw(path) as conn:
        [(row,)] = conn.execute("SELECT leaf FROM sessions").fetchall()
    assert row.isascii() and "caf\\udce9" in row  # \udcXX escapes: valid UTF-8 text


def test_an_unchanged_session_row_is_structured_once(
    store: ArrangementStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore loads the arrangement, then its sweep loads it again:
    only the rows that changed between are structured again."""
    store.save(Arrangement([Window("main", [Tab(leaf("a")), Tab(leaf("b"))])]))
    calls: list[str] = []
    real = rows_mod._structure

    def counting(raw: object, cls: Any, what: str) -> Any:
        calls.append(what)
        return real(raw, cls, what)

    monkeypatch.setattr(rows_mod, "_structure", counting)  # what _rows._leaf calls
    first = store.load()
    with ArrangementStore.open(path) as other:
        assert other.load() == first
    assert store.load() == first
    assert store.find("a") == leaf("a")
    assert calls == ["session 'a'", "session 'b'"]  # once each
    # Changed behind our back (another process): read afresh, never stale.
    with raw(path) as conn:
        conn.execute(
            "UPDATE sessions SET leaf = ? WHERE name = 'b'",
            (json.dumps({"name": "b", "argv": ["vim"], "cwd": "/"}),),
        )
    conn.close()
    assert store.load().leaves() == [leaf("a"), SessionLeaf("b", ["vim"], "/")]
    assert calls[2:] == ["session 'b'"]
    store.add_session(leaf("d"), "w")
    assert [x.name for x in store.load().leaves()] == ["a", "b", "d"]
    assert calls[2:] == ["session 'b'", "session 'd'"]


def test_bytes_fields_live_in_their_own_table(store: ArrangementStore, path: Path) -> None:
    store.save(rich())
    with raw(path) as conn:
        texts = [r[0] for r in conn.execute("SELECT leaf FROM sessions")]
        rows = {(n, f): d for n, f, d in conn.execute("SELECT name, field, data FROM leaf_bytes")}
    conn.close()
    assert len(texts) == 5
    assert not any("scrollback" in text or "notice" in text for text in texts)
    assert rows == {
        ("build", "scrollback"): b"\x1b[32mok\x1b[0m\r\n\x00\xff",
        ("build", "notice"): b"[session expired, new shell started]\r\n",
        ("c", "scrollback"): b"",
    }
    store.save(Arrangement([Window("w", [Tab(leaf("b"))])]))
    with raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM leaf_bytes").fetchone()[0] == 0
    conn.close()


def test_bytes_rows_we_do_not_know_are_skipped(store: ArrangementStore, path: Path) -> None:
    store.add_session(leaf("a", scrollback=b"S"))
    with raw(path) as conn:
        conn.execute("INSERT INTO leaf_bytes VALUES ('a', 'thumbnail', x'00')")  # newer field
        conn.execute("INSERT INTO leaf_bytes VALUES ('a', 'notice', 'text, not bytes')")
        conn.execute("INSERT INTO leaf_bytes VALUES ('gone', 'scrollback', x'00')")  # no leaf
    conn.close()
    assert store.load().find("a") == leaf("a", scrollback=b"S")


def test_add_remove_update(store: ArrangementStore, path: Path) -> None:
    store.add_session(leaf("a", scrollback=b"A"))
    store.add_session(leaf("b"), window="w2")
    store.add_session(leaf("c"))
    arr = store.load()
    assert [(w.name, [t.root.name for t in w.tabs]) for w in arr.windows] == [  # type: ignore[union-attr]
        ("main", ["a", "c"]),
        ("w2", ["b"]),
    ]
    assert arr.find("a") == leaf("a", scrollback=b"A")

    store.update_session(leaf("c", title="T", scrollback=b"C", notice=b"N", ref=REF))
    assert store.load().find("c") == leaf("c", title="T", scrollback=b"C", notice=b"N", ref=REF)
    store.update_session(leaf("c", title="T", scrollback=b"C", ref=REF))  # notice shown
    assert store.load().find("c") == leaf("c", title="T", scrollback=b"C", ref=REF)
    store.update_session(leaf("a"))  # scrollback None: the saved one goes
    assert store.load().find("a") == leaf("a")

    store.remove_session("c")
    assert [x.name for x in store.load().leaves()] == ["a", "b"]
    with raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM leaf_bytes").fetchone()[0] == 0
    conn.close()


def test_update_sessions_changes_many_in_one_transaction(
    store: ArrangementStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a restore records its relaunches with: each leaf replaced as
    ``update_session`` would, in one transaction for all of them; a name
    no longer saved is returned and nothing is written for it."""
    store.add_session(leaf("a", scrollback=b"A"))
    store.add_session(leaf("b", scrollback=b"B"), window="w2")
    store.add_session(leaf("c"))
    changes: list[object] = []
    write = ArrangementStore._write  # every change's one transaction

    def counted(self: ArrangementStore, op: Any) -> Any:
        changes.append(op)
        return write(self, op)

    monkeypatch.setattr(ArrangementStore, "_write", counted)
    missing = store.update_sessions(
        [
            leaf("a", ref=REF, notice=b"N"),  # scrollback None: the saved one goes
            leaf("nope", scrollback=b"x"),
            leaf("c", title="T", scrollback=b"C"),
        ]
    )
    assert missing == ["nope"] and len(changes) == 1
    arr = store.load()
    assert arr.leaves() == [
        leaf("a", ref=REF, notice=b"N"),
        leaf("c", title="T", scrollback=b"C"),
        leaf("b", scrollback=b"B"),
    ]
    assert store.update_sessions([]) == []
    assert store.update_sessions([leaf("x"), leaf("y", scrollback=b"Y")]) == ["x", "y"]
    assert store.load() == arr
    with raw(path) as conn:
        assert (
            conn.execute("SELECT name FROM leaf_bytes WHERE name IN ('nope', 'y')").fetchall() == []
        )
    conn.close()


def test_failed_changes_change_nothing(store: ArrangementStore) -> None:
    store.add_session(leaf("a", scrollback=b"A"))
    before = store.load()
    with pytest.raises(ValueError, match="exists already"):
        store.add_session(leaf("a", scrollback=b"other"), window="w")
    with pytest.raises(KeyError):
        store.remove_session("nope")
    with pytest.raises(KeyError):
        store.update_session(leaf("nope", scrollback=b"x"))
    with pytest.raises(KeyError):
        store.stage_close("nope")
    assert store.load() == before
    assert store.pending_closes() == []


def test_scrollback_is_bounded_in_the_store(store: ArrangementStore, path: Path) -> None:
    big = b"".join(b"%08d\n" % i for i in range(100_000))  # ~900 KiB
    store.add_session(leaf("a", scrollback=big, notice=big + b"[marker]\r\n"))
    with raw(path) as conn:
        stored = dict(conn.execute("SELECT field, data FROM leaf_bytes"))
        # A blob written past the bound by someone else is cut when loaded.
        conn.execute("UPDATE leaf_bytes SET data = ? WHERE field = 'scrollback'", (big,))
    conn.close()
    assert len(stored["scrollback"]) <= SCROLLBACK_LIMIT and big.endswith(stored["scrollback"])
    assert len(stored["notice"]) <= SCROLLBACK_LIMIT and stored["notice"].endswith(b"[marker]\r\n")
    loaded = store.load().find("a")
    assert loaded is not None and loaded.scrollback is not None
    assert len(loaded.scrollback) <= SCROLLBACK_LIMIT and big.endswith(loaded.scrollback)


# --- what sessions showed (save_outputs) --------------------------------------------------


def out(ref: RestorationRef, output: bytes, exit_code: int | None = None) -> SavedOutput:
    return SavedOutput(ref.socket, ref.instance_id, ref.child_id, output, exit_code)


def bytes_rows(path: Path) -> int:
    """How many rows leaf_bytes holds."""
    with raw(path) as conn:
        n = conn.execute("SELECT count(*) FROM leaf_bytes").fetchone()[0]
    conn.close()
    return int(n)


def test_outputs_go_to_the_leaves_whose_ref_names_their_child(
    store: ArrangementStore, path: Path
) -> None:
    other = attrs.evolve(REF, child_id=8)
    store.add_session(leaf("a", ref=REF, notice=b"N"))
    store.add_session(leaf("b", ref=other, title="T"))
    store.add_session(leaf("c"))  # never started: no output is ever its own
    stale = attrs.evolve(REF, instance_id="inst-0")  # an earlier run of the daemon
    names = store.save_outputs(
        [
            out(REF, b"a's screen\r\n"),
            # The socket as another path to it names the same daemon.
            out(attrs.evolve(other, socket=other.socket.replace("/ms/", "/ms/./")), b"b", 4),
            out(stale, b"not a's"),
        ]
    )
    assert sorted(names) == ["a", "b"]
    saved = {x.name: x for x in ArrangementStore.open(path).load().leaves()}
    assert saved["a"] == leaf("a", ref=REF, notice=b"N", scrollback=b"a's screen\r\n")
    assert saved["b"] == leaf("b", ref=other, title="T", scrollback=b"b", exit_code=4)
    assert saved["c"] == leaf("c")
    assert store.save_outputs([]) == []


def test_an_unchanged_output_is_not_written_again(
    store: ArrangementStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add_session(leaf("a", ref=REF))
    assert store.save_outputs([out(REF, b"same")]) == ["a"]
    written: list[bytes] = []
    put = store_mod._put_scrollback
    monkeypatch.setattr(
        store_mod, "_put_scrollback", lambda c, n, d: (written.append(d), put(c, n, d))
    )
    assert store.save_outputs([out(REF, b"same")]) == ["a"]
    assert written == []
    store.save_outputs([out(REF, b"more")])
    assert written == [b"more"]
    assert bytes_rows(path) == 1


def test_a_saved_output_is_bounded_and_says_when_its_program_ended(
    store: ArrangementStore,
) -> None:
    big = b"".join(b"%08d\n" % i for i in range(100_000))
    store.add_session(leaf("a", ref=REF))
    store.save_outputs([out(REF, big, exit_code=-1)])
    a = store.load().find("a")
    assert a is not None and a.scrollback is not None and a.exit_code == -1
    assert len(a.scrollback) <= SCROLLBACK_LIMIT and big.endswith(a.scrollback)
    # The same child running again cannot be; a leaf relaunched gets a new ref.
    store.update_session(leaf("a", ref=attrs.evolve(REF, child_id=9)))
    store.save_outputs([out(REF, b"old child")])
    assert store.load().find("a") == leaf("a", ref=attrs.evolve(REF, child_id=9))


def test_saving_outputs_into_a_newer_schema_is_refused(store: ArrangementStore, path: Path) -> None:
    store.add_session(leaf("a", ref=REF))
    with raw(path) as conn:
        conn.execute("UPDATE meta SET value = 9 WHERE key = 'schema_version'")
    conn.close()
    with ArrangementStore.open(path) as newer, pytest.raises(StoreTooNew):
        newer.save_outputs([out(REF, b"x")])


# --- tolerance ------------------------------------------------------------------------------


def test_unknown_fields_are_ignored_and_missing_optional_ones_default(
    store: ArrangementStore, path: Path
) -> None:
    set_doc(
        path,
        {
            "windows": [
                {
                    "name": "main",
                    "frame": [0, 0, 800, 600],
                    "tabs": [
                        {
                            "root": {
                                "kind": "split",
                                "vertical": True,
                                "divider": "thin",
                                "children": [
                                    {"kind": "session", "name": "a", "argv": ["sh"], "cwd": "/"},
                                    {
                                        "kind": "session",
                                        "name": "b",
                                        "argv": ["vim"],
                                        "cwd": "/etc",
                                        "rows": 40,
                                        "profile": "Dark",
                                        "ref": {
                                            "socket": "/s",
                                            "instance_id": "i",
                                            "child_id": 3,
                                            "pid": 9,
                                            "started_at": 1.5,
                                        },
                                    },
                                ],
                            },
                            "color": "red",
                        }
                    ],
                }
            ],
            "hotkey": {"key": "F12"},
        },
    )
    with raw(path) as conn:
        conn.execute(
            "INSERT INTO pending_closes (name, ref, staged_at) VALUES ('z', ?, 5)",
            (json.dumps({"socket": "/s", "instance_id": "i", "child_id": 1, "pid": 2, "x": 0}),),
        )
        conn.execute("INSERT INTO pending_closes (name, ref, staged_at) VALUES ('y', NULL, 6)")
    conn.close()
    assert store.load() == Arrangement(
        [
            Window(
                "main",
                [
                    Tab(
                        Split(
                            True,
                            [
                                leaf("a"),
                                SessionLeaf(
                                    "b",
                                    ["vim"],
                                    "/etc",
                                    rows=40,
                                    ref=RestorationRef("/s", "i", 3, 9),
                                ),
                            ],
                        )
                    )
                ],
            )
        ]
    )
    assert store.pending_closes() == [
        PendingClose("z", RestorationRef("/s", "i", 1, 2), 5.0),
        PendingClose("y", None, 6.0),
    ]
    store.add_session(leaf("c"))  # and it can still be changed
    assert [x.name for x in store.load().leaves()] == ["a", "b", "c"]


def test_extra_tables_and_columns_are_ignored(store: ArrangementStore, path: Path) -> None:
    with raw(path) as conn:
        conn.execute("CREATE TABLE later_feature (x)")
        conn.execute("ALTER TABLE pending_closes ADD COLUMN reason TEXT")
        conn.execute("INSERT INTO meta VALUES ('written_by', 'multiserver 9')")
    conn.close()
    store.add_session(leaf("a", ref=REF))
    store.stage_close("a")
    store.close()
    with ArrangementStore.open(path) as again:
        assert [p.name for p in again.pending_closes()] == ["a"]


def test_values_are_not_coerced(store: ArrangementStore, path: Path) -> None:
    store.close()
    set_doc(
        path,
        {
            "windows": [
                {
                    "name": "w",
                    "tabs": [{"root": {"kind": "session", "name": "a", "argv": "sh", "cwd": "/"}}],
                }
            ]
        },
    )
    with ArrangementStore.open(path) as again, pytest.raises(StoreCorrupt, match="argv"):
        again.load()


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the arrangement's tables, to see that nothing changed."""
    with raw(path) as conn:
        out = {
            t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
            for t in ("meta", "windows", "tabs", "sessions", "leaf_bytes", "pending_closes")
        }
    conn.close()
    return out


def test_a_newer_schema_loads_what_it_can_and_is_never_written(
    store: ArrangementStore, path: Path
) -> None:
    store.add_session(leaf("a", ref=REF, scrollback=b"S"))
    store.close()
    set_doc(
        path,
        {
            "windows": [
                {
                    "name": "main",
                    "tabs": [
                        {
                            "root": {
                                "kind": "session",
                                "name": "a",
                                "argv": ["sh"],
                                "cwd": "/",
                                "ref": attrs.asdict(REF),
                                "v9_field": {"deep": [1]},
                            }
                        }
                    ],
                }
            ],
        },
    )
    with raw(path) as conn:
        conn.execute("UPDATE meta SET value = 9 WHERE key = 'schema_version'")
        conn.execute("ALTER TABLE sessions ADD COLUMN v9_column TEXT")
    conn.close()
    before = rows(path)
    with ArrangementStore.open(path) as newer:
        assert newer.read_only and newer.schema_version == 9
        assert newer.load().leaves() == [leaf("a", ref=REF, scrollback=b"S")]
        assert newer.find("a") == leaf("a", ref=REF, scrollback=b"S")
        assert newer.sessions(refs=[ref_key(REF)]) == [leaf("a", ref=REF)]
        for change in (
            lambda: newer.add_session(leaf("b")),
            lambda: newer.remove_session("a"),
            lambda: newer.update_session(leaf("a")),
            lambda: newer.stage_close("a"),
            lambda: newer.save(Arrangement()),
            lambda: newer.modify(lambda arr: arr.without_session("a")),
            lambda: newer.save_outputs([out(REF, b"x")]),
        ):
            with pytest.raises(StoreTooNew, match="schema_version 9 is newer than 2"):
                change()
    assert rows(path) == before


def test_a_newer_schema_we_cannot_read_is_not_quarantined(
    store: ArrangementStore, path: Path
) -> None:
    store.add_session(leaf("a"))
    store.close()
    with raw(path) as conn:
        conn.execute("UPDATE meta SET value = 9 WHERE key = 'schema_version'")
        conn.execute("DROP TABLE sessions")
    conn.close()
    with ArrangementStore.open(path) as newer, pytest.raises(StoreTooNew, match="newer"):
        newer.load()
    newer, warning = ArrangementStore.open_or_quarantine(path)
    with newer:
        assert warning is None
        with pytest.raises(StoreTooNew):
            newer.load()
        with pytest.raises(StoreTooNew):
            newer.find("a")
    assert [p.name for p in path.parent.iterdir() if "corrupt" in p.name] == []


def test_a_file_upgraded_under_us_is_not_written(store: ArrangementStore, path: Path) -> None:
    with raw(path) as conn:
        conn.execute("UPDATE meta SET value = 3 WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(StoreTooNew):
        store.add_session(leaf("a"))
    assert store.load() == Arrangement()


def test_an_older_schema_is_migrated_once(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ArrangementStore.open(path).close()  # a version-2 file
    calls: list[int] = []

    def two_to_three(conn: sqlite3.Connection) -> None:
        calls.append(2)
        conn.execute("CREATE TABLE added_in_three (x)")

    monkeypatch.setattr(file_mod, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(file_mod, "_MIGRATIONS", {**file_mod._MIGRATIONS, 2: two_to_three})
    with ArrangementStore.open(path) as s:
        assert s.schema_version == 3 and not s.read_only
        s.add_session(leaf("a"))
    with ArrangementStore.open(path) as s:
        assert [x.name for x in s.load().leaves()] == ["a"]
    assert calls == [2]
    with raw(path) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM added_in_three").fetchone()[0] == 0
    conn.close()


def test_a_failed_migration_leaves_the_file_as_it_was(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ArrangementStore.open(path) as s:
        s.add_session(leaf("a"))

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(file_mod, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(file_mod, "_MIGRATIONS", {**file_mod._MIGRATIONS, 2: broken})
    with pytest.raises(RuntimeError):
        ArrangementStore.open(path)
    monkeypatch.undo()
    with ArrangementStore.open(path) as s:
        assert s.schema_version == 2 and [x.name for x in s.load().leaves()] == ["a"]
    with raw(path) as conn:
        assert "half_done" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()


# --- corruption --------------------------------------------------------------------------------


def _valid_bytes(tmp_path: Path) -> bytes:
    src = tmp_path / "src.sqlite3"
    with ArrangementStore.open(src) as s:
        for i in range(20):
            s.add_session(leaf(f"s{i}", scrollback=bytes(range(256)) * 40))
    return src.read_bytes()


def _garbage(path: Path, tmp_path: Path) -> None:
    path.write_bytes(b"this is not a database, " * 200)


def _truncated(path: Path, tmp_path: Path) -> None:
    data = _valid_bytes(tmp_path)
    path.write_bytes(data[: len(data) // 2])


def _header_only(path: Path, tmp_path: Path) -> None:
    path.write_bytes(_valid_bytes(tmp_path)[:100])


def _tampered(sql: str, *args: object) -> Any:
    """A store holding "a" and "b", each in a tab of its own, then ``sql``."""

    def make(path: Path, tmp_path: Path) -> None:
        with ArrangementStore.open(path) as s:
            s.add_session(leaf("a"))
            s.add_session(leaf("b"))
        with raw(path) as conn:
            conn.execute(sql, args)
        conn.close()

    return make


CORRUPTIONS = {
    "garbage bytes": (_garbage, "not a database"),
    "truncated sqlite": (_truncated, "cut short"),
    "sqlite header only": (_header_only, "cut short"),
    "bad json": (
        _tampered("UPDATE sessions SET leaf = '{\"name\": ' WHERE name = 'a'"),
        "session 'a' is not valid JSON",
    ),
    "json of the wrong shape": (
        _tampered("UPDATE sessions SET leaf = '[1]' WHERE name = 'a'"),
        "session 'a' does not fit SessionLeaf",
    ),
    "a number for a string": (
        _tampered(
            "UPDATE sessions SET leaf = ? WHERE name = 'a'",
            '{"name": "a", "argv": ["sh"], "cwd": 5}',
        ),
        "cwd",
    ),
    "a session row under another name": (
        _tampered(
            "UPDATE sessions SET leaf = ? WHERE name = 'a'",
            '{"name": "b", "argv": ["sh"], "cwd": "/"}',
        ),
        "holds a session named 'b'",
    ),
    "unknown node kind": (
        _tampered('UPDATE tabs SET root = \'{"kind": "browser"}\''),
        "unknown kind 'browser'",
    ),
    "a layout that is not JSON": (_tampered("UPDATE tabs SET root = '{'"), "not valid JSON"),
    "sizes that do not fit": (
        _tampered(
            "UPDATE tabs SET root = ? WHERE id = 1",
            '{"kind": "split", "vertical": true, "sizes": [1], "children":'
            ' [{"kind": "session", "name": "a"}, {"kind": "session", "name": "b"}]}',
        ),
        "sizes do not fit",
    ),
    "a session named by two tabs": (
        _tampered('UPDATE tabs SET root = \'{"kind": "session", "name": "a"}\''),
        "names session 'a', which is saved in another tab",
    ),
    "a session in no tab": (_tampered("DELETE FROM tabs WHERE id = 2"), "'b' is in no tab"),
    "a tab in no window": (_tampered("UPDATE tabs SET window = 7"), "is in no window"),
    "a tab naming a session not saved": (
        _tampered("DELETE FROM sessions WHERE name = 'b'"),
        "names session 'b', which is not saved",
    ),
    "missing table": (_tampered("DROP TABLE pending_closes"), "missing table"),
    "missing sessions": (_tampered("DROP TABLE sessions"), "missing table"),
    "no schema version": (_tampered("DELETE FROM meta"), "no schema_version"),
    "garbled schema version": (
        _tampered("UPDATE meta SET value = 'one'"),
        "not a version",
    ),
    "garbled pending ref": (
        _tampered("INSERT INTO pending_closes (name, ref, staged_at) VALUES ('a', '[1]', 0)"),
        "pending close 'a'",
    ),
    "someone else's database": (_tampered("DROP TABLE meta"), "not an arrangement store"),
}
# What the fresh file keeps of a damaged one (salvage), where it is not everything.
KEPT = {
    "bad json": ["b"],  # the session whose row is damaged is lost, never the others
    "a session row under another name": ["b"],
    "a session in no tab": ["a", "b"],  # its own tab in window main
    "sizes that do not fit": ["b", "a"],
    "missing sessions": [],
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_file_is_refused_then_moved_aside(case: str, tmp_path: Path, path: Path) -> None:
    """Found when the file is opened, or, for a session's rows (which
    opening does not read, so that it costs the same however many are
    saved), by the first call that reads them: ``load`` reads them all."""
    make, message = CORRUPTIONS[case]
    make(path, tmp_path)
    original = path.read_bytes()
    with pytest.raises(StoreCorrupt, match=message) as info, ArrangementStore.open(path) as s:
        s.load()
    assert "\n" not in str(info.value) and str(path) in str(info.value)

    told: list[str] = []
    store, warning = ArrangementStore.open_or_quarantine(path, on_warning=told.append)
    with store:
        loaded = store.load()
        if warning is None:
            (warning,) = told
        else:
            assert told == []
        aside = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
        assert len(aside) == 1
        assert aside[0].name.startswith("arrangement.sqlite3.corrupt-")
        assert aside[0].read_bytes() == original  # moved, never deleted or rewritten
        assert "\n" not in warning and message.split()[0] in warning
        assert str(aside[0]) in warning
        if case == "truncated sqlite":  # the sessions' pages are in the half that is left
            assert [x.name for x in loaded.leaves()] == [f"s{i}" for i in range(20)]
            assert "kept its 20 saved sessions" in warning
            assert "saved scrollbacks and notices were unreadable" in warning
        if case in KEPT:
            assert [x.name for x in loaded.leaves()] == KEPT[case]
        store.save(Arrangement())
        assert store.load() == Arrangement()
        store.add_session(leaf("fresh"))
    with ArrangementStore.open(path) as again:
        assert [x.name for x in again.load().leaves()] == ["fresh"]


def test_quarantine_moves_wal_and_shm_and_never_overwrites(tmp_path: Path, path: Path) -> None:
    path.write_bytes(b"garbage" * 100)
    Path(f"{path}-wal").write_bytes(b"wal bytes")
    Path(f"{path}-shm").write_bytes(b"shm bytes")
    s, first = ArrangementStore.open_or_quarantine(path)
    s.close()
    assert first is not None
    ArrangementStore.open(path).close()
    path.write_bytes(b"garbage again" * 100)
    s, second = ArrangementStore.open_or_quarantine(path)  # same second, most likely
    s.close()
    assert second is not None and second != first
    aside = sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name)
    mains = [n for n in aside if not n.endswith(("-wal", "-shm"))]
    assert len(mains) == 2
    first_main = next(n for n in mains if n in first)
    assert (tmp_path / first_main).read_bytes() == b"garbage" * 100
    assert (tmp_path / f"{first_main}-wal").read_bytes() == b"wal bytes"
    assert (tmp_path / f"{first_main}-shm").read_bytes() == b"shm bytes"


def test_an_empty_file_is_one_whose_sessions_are_gone(path: Path) -> None:
    """The store never leaves an empty file (a new one is built aside and
    linked in whole), so an empty one lost its data: said, and moved aside."""
    path.touch()
    store, warning = ArrangementStore.open_or_quarantine(path)
    with store:
        assert store.load() == Arrangement()
    assert warning is not None and "\n" not in warning
    assert "the file is empty (0 bytes): the sessions saved in it are gone" in warning
    (aside,) = [p for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert aside.stat().st_size == 0 and str(aside) in warning


def test_a_new_store_is_linked_in_whole(path: Path) -> None:
    ArrangementStore.open(path).close()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    store, warning = ArrangementStore.open_or_quarantine(path)
    with store:
        assert warning is None and store.load() == Arrangement()


def test_busy_is_not_corrupt(
    store: ArrangementStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT", 0.05)
    with ArrangementStore.open(path) as impatient:
        holder = raw(path)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError) as info:
                impatient.add_session(leaf("a"))
            assert not isinstance(info.value, StoreCorrupt)
            assert "locked" in str(info.value)
            assert impatient.load() == Arrangement()  # WAL: readers are not blocked
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        impatient.add_session(leaf("a"))
    assert [p for p in path.parent.iterdir() if "corrupt" in p.name] == []


def test_a_directory_in_the_way_is_an_error_not_corruption(tmp_path: Path) -> None:
    target = tmp_path / "arrangement.sqlite3"
    target.mkdir()
    with pytest.raises(StoreError) as info:
        ArrangementStore.open_or_quarantine(target)
    assert not isinstance(info.value, StoreCorrupt)
    assert target.is_dir()


# --- durable close --------------------------------------------------------------------------------

STAGE_AND_CRASH = """
    import os, sys
    from pathlib import Path
    from restore import ArrangementStore
    store = ArrangementStore.open(Path(sys.argv[1]))
    leaf = store.stage_close("victim")
    print(leaf.ref.child_id, flush=True)
    os._exit(3)  # crash before killing the child and completing the close
"""


def test_stage_then_crash_leaves_a_pending_close(store: ArrangementStore, path: Path) -> None:
    store.add_session(leaf("keep"))
    store.add_session(leaf("victim", ref=REF, scrollback=b"bye"))
    store.close()

    crashed = run_python(STAGE_AND_CRASH, str(path))
    assert crashed.returncode == 3, crashed.stderr
    assert crashed.stdout.strip() == "7"

    with ArrangementStore.open(path) as after:
        (pending,) = after.pending_closes()
        assert pending.name == "victim" and pending.ref == REF and pending.staged_at > 0
        assert [x.name for x in after.load().leaves()] == ["keep"]
        after.complete_close("victim")
        assert after.pending_closes() == []
        after.complete_close("victim")  # idempotent: a retried completion is fine
    with ArrangementStore.open(path) as again:
        assert again.pending_closes() == []


def test_stage_close_returns_the_leaf_and_drops_its_scrollback(
    store: ArrangementStore, path: Path
) -> None:
    store.add_session(leaf("a", ref=REF, scrollback=b"tail"))
    assert store.stage_close("a") == leaf("a", ref=REF, scrollback=b"tail")
    assert store.load() == Arrangement()
    with raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM leaf_bytes").fetchone()[0] == 0
    conn.close()
    with pytest.raises(KeyError):
        store.stage_close("a")  # staged once only
    assert len(store.pending_closes()) == 1


def test_a_reused_name_keeps_each_pending_close(store: ArrangementStore) -> None:
    newer = RestorationRef(REF.socket, REF.instance_id, 8, 5151)
    store.add_session(leaf("a", ref=REF))
    store.stage_close("a")
    store.add_session(leaf("a", ref=newer))  # a new session of the same name
    store.stage_close("a")
    assert [p.ref for p in store.pending_closes()] == [REF, newer]
    store.complete_close("a", newer)
    assert [p.ref for p in store.pending_closes()] == [REF]
    store.complete_close("a")
    assert store.pending_closes() == []


def test_a_session_without_a_ref_can_be_closed(store: ArrangementStore) -> None:
    store.add_session(leaf("a"))
    store.stage_close("a")
    (pending,) = store.pending_closes()
    assert pending.ref is None
    store.complete_close("a", None)
    assert store.pending_closes() == []


# --- concurrent writers ------------------------------------------------------------------------

ADD_MANY = """
    import sys
    from pathlib import Path
    from restore import ArrangementStore, LightSessionLeaf, SessionLeaf, add_saved
    path, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    light = sys.argv[4] == "light"
    store = ArrangementStore.open(path)
    sys.stdin.read(1)  # wait for the go, so both writers run at once
    for i in range(count):
        name = f"{prefix}-{i}"
        # As a command adds: lightly, else (busy past the light read's
        # timeout) through the store.
        if not (light and add_saved(path.parent, LightSessionLeaf(name, ["sh"], "/"), prefix)):
            store.add_session(SessionLeaf(name, ["sh"], "/"), window=prefix)
    store.close()
"""


@pytest.mark.parametrize("q_adds", ["store", "light"])  # p adds through the store
def test_two_processes_adding_at_once_both_land(
    store: ArrangementStore, path: Path, q_adds: str
) -> None:
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(ADD_MANY), str(path), prefix, "50", how],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for prefix, how in (("p", "store"), ("q", q_adds))
    ]
    for w in writers:
        assert w.stdin is not None
        w.stdin.write("g")
        w.stdin.close()
    for w in writers:
        assert w.stderr is not None
        err = w.stderr.read()
        assert w.wait(timeout=60) == 0, err
    arr = store.load()
    expected = {f"{p}-{i}" for p in "pq" for i in range(50)}
    assert {x.name for x in arr.leaves()} == expected
    assert len(arr.leaves()) == 100
    for prefix in "pq":
        window = arr.window(prefix)
        assert window is not None
        assert [t.root.name for t in window.tabs] == [f"{prefix}-{i}" for i in range(50)]  # type: ignore[union-attr]


def test_one_store_from_many_threads(store: ArrangementStore) -> None:
    import threading

    def add(prefix: str) -> None:
        for i in range(25):
            store.add_session(leaf(f"{prefix}{i}"))

    threads = [threading.Thread(target=add, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.load().leaves()) == 100


def test_a_damaged_page_found_after_open_moves_the_file_aside_and_keeps_the_sessions(
    path: Path,
) -> None:
    """``open`` reads neither saved scrollback nor notices: a damaged page of
    ``leaf_bytes`` is found by a later call. That call moves the file aside,
    tells ``on_warning`` in one line, and is done again on a fresh file that
    holds every session (the scrollback on the damaged page is lost)."""
    with ArrangementStore.open(path) as s:
        for i in range(3):
            s.add_session(leaf(f"s{i}", scrollback=b"x" * 5000))
    with raw(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'leaf_bytes'"
        ).fetchone()
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)
    damaged = path.read_bytes()
    told: list[str] = []
    store, warning = ArrangementStore.open_or_quarantine(path, on_warning=told.append)
    with store:
        assert warning is None
        assert [x.name for x in store.load().leaves()] == ["s0", "s1", "s2"]
        (line,) = told
        assert "\n" not in line and "malformed" in line and "kept its 3 saved sessions" in line
        (aside,) = [p for p in path.parent.iterdir() if ".corrupt-" in p.name]
        assert aside.read_bytes() == damaged and str(aside) in line
        store.update_session(leaf("s1", scrollback=b"new"))
        assert store.load().find("s1") == leaf("s1", scrollback=b"new")
    assert len(told) == 1
