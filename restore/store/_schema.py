"""The format of the arrangement file: its tables, the JSON document in one of
them with the store's one cattrs converter for it, and the SQL that creates,
migrates, checks, reads and writes them. ``ArrangementStore`` (``_store``)
calls these inside its transactions (``_prepare`` runs its own, on opening).
They raise ``StoreCorrupt`` for what is not what we wrote and let sqlite3 and
OS errors through to the store's one translation boundary (``_errors``).

Schema, version 1::

    meta(key TEXT PRIMARY KEY, value)          -- ('schema_version', 1)
    arrangement(id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL)
    leaf_bytes(name TEXT NOT NULL, field TEXT NOT NULL, data BLOB NOT NULL,
               PRIMARY KEY (name, field))
    pending_closes(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
                   ref TEXT, staged_at REAL NOT NULL)

``arrangement.doc`` is the whole ``Arrangement`` as one JSON document, leaves
without their bytes fields; nodes of the split tree carry ``"kind": "split"`` or
``"kind": "session"``. A leaf's bytes fields (``scrollback``, ``notice``) live
in ``leaf_bytes``, one BLOB per (session name, field), because each is up to
256 KiB a session against a few hundred bytes of everything else: kept in the
document (base64) they would be decoded, re-encoded and rewritten by every
``add_session``, a third bigger, for data that change did not touch.
``pending_closes.ref`` is a ``RestorationRef`` as JSON (NULL for a session that
never had a child).

Unknown JSON fields are ignored at every version; missing optional ones take
their defaults.

A file of an older schema version is migrated when opened, in one transaction
(``_MIGRATIONS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.strategies import configure_tagged_union

from restore.store._errors import StoreCorrupt
from restore.store._model import Arrangement, RestorationRef, SessionLeaf, Split
from restore.store._rules import (
    BYTES_FIELDS as _BYTES_FIELDS,
    SCHEMA_VERSION as SCHEMA_VERSION,
    SQLITE_MAGIC as _SQLITE_MAGIC,
    exact,
)

_T = TypeVar("_T")

# _MIGRATIONS[n] turns a version-n file into a version-(n + 1) one, inside the
# transaction that opens it. Version 1 is the first, so there are none yet.
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}

_HEADER_SIZE = 100
_TABLES = ("meta", "arrangement", "leaf_bytes", "pending_closes")
_CREATE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE arrangement (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL)",
    "CREATE TABLE leaf_bytes (name TEXT NOT NULL, field TEXT NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (name, field))",
    "CREATE TABLE pending_closes (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL, ref TEXT, staged_at REAL NOT NULL)",
)

# --- the store's own converter ----------------------------------------------------


def _exact(kind: type) -> Callable[[Any, Any], Any]:
    check = exact(kind)  # the light read's too (_outline)
    return lambda value, _type: check(value)


def _make_converter() -> cattrs.Converter:
    # Unknown keys are ignored (a newer multiserver may add fields); missing
    # optional ones take their defaults. Values are not coerced: "argv": "sh"
    # must not become ["s", "h"], nor 5 become "5".
    conv = cattrs.Converter(forbid_extra_keys=False)
    for kind in (int, float, str, bool):
        conv.register_structure_hook(kind, _exact(kind))

    def is_list(t: Any) -> bool:
        return getattr(t, "__origin__", None) is list

    def list_hook(t: Any) -> Any:
        items = list_structure_factory(t, conv)  # cattrs' own: errors name the index

        def structure(value: Any, t: Any) -> list[Any]:
            if not isinstance(value, list):
                raise TypeError(f"expected list, got {type(value).__name__}")
            result: list[Any] = items(value, t)
            return result

        return structure

    conv.register_structure_hook_factory(is_list, list_hook)
    # Bytes fields (_BYTES_FIELDS) live in their own table, never in the document.
    omit = override(omit=True)
    conv.register_unstructure_hook(
        SessionLeaf, make_dict_unstructure_fn(SessionLeaf, conv, scrollback=omit, notice=omit)
    )
    conv.register_structure_hook(
        SessionLeaf, make_dict_structure_fn(SessionLeaf, conv, scrollback=omit, notice=omit)
    )
    configure_tagged_union(
        Split | SessionLeaf,
        conv,
        tag_name="kind",
        tag_generator=lambda cl: "split" if cl is Split else "session",
    )
    return conv


_converter = _make_converter()


def _dump(value: Any) -> str:
    # ensure_ascii: a path or argv decoded with surrogateescape holds lone
    # surrogates, which SQLite's UTF-8 text cannot carry; \udcxx escapes can.
    return json.dumps(_converter.unstructure(value), separators=(",", ":"))


def _say(exc: BaseException, type_: type | None) -> str:
    # Our hooks' and validators' own words ("expected list, got str", "two
    # sessions are named 'a'") say more than cattrs' generic "invalid value".
    if isinstance(exc, KeyError):  # a missing field, or a tag no class has
        return f"missing field or unknown kind {exc.args[0]!r}"
    return str(exc) or cattrs.v.format_exception(exc, type_)


def _structure(raw: object, cls: type[_T], what: str) -> _T:
    """JSON text from the file -> ``cls``; StoreCorrupt (one line) if it will not."""
    if not isinstance(raw, str | bytes):
        raise StoreCorrupt(f"{what} is {type(raw).__name__}, not JSON text")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise StoreCorrupt(f"{what} is not valid JSON ({exc})") from None
    try:
        return _converter.structure(data, cls)
    except Exception as exc:
        errors = cattrs.transform_error(exc, path="$", format_exception=_say)
        line = " ".join("; ".join(errors).split())
        raise StoreCorrupt(f"{what} does not fit {cls.__name__}: {line}") from None


@attrs.frozen
class PendingClose:
    """A close that was staged and not yet completed: the child behind ``ref``
    may still be running."""

    name: str
    ref: RestorationRef | None
    staged_at: float  # unix time


def _read_pending(conn: sqlite3.Connection) -> list[PendingClose]:
    out = []
    for name, ref, staged_at in conn.execute(
        "SELECT name, ref, staged_at FROM pending_closes ORDER BY id"
    ):
        if not isinstance(name, str) or not isinstance(staged_at, int | float):
            raise StoreCorrupt(f"pending close {name!r} has a garbled row")
        what = f"the ref of pending close {name!r}"
        parsed = None if ref is None else _structure(ref, RestorationRef, what)
        out.append(PendingClose(name, parsed, float(staged_at)))
    return out


def _insert_pending(
    conn: sqlite3.Connection, name: str, ref: RestorationRef | None, at: float
) -> None:
    conn.execute(
        "INSERT INTO pending_closes (name, ref, staged_at) VALUES (?, ?, ?)",
        (name, None if ref is None else _dump(ref), at),
    )


# --- the file and its tables ------------------------------------------------------


def _wal_has_data(path: Path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False


def _check_file(path: Path) -> None:
    """StoreCorrupt for a file whose data is plainly gone, or that is not
    SQLite: empty (this store never leaves an empty file: ``_create_fresh``),
    shorter than its own header says, or without the SQLite header. Checked
    before SQLite sees the file: closing a connection to a file it cannot
    read still makes SQLite delete the -wal and -shm beside it. A file with
    a -wal that holds data is left to SQLite: its pages may be there."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        head = f.read(_HEADER_SIZE)
        size = os.fstat(fd).st_size
    in_wal = _wal_has_data(path)
    if not head:
        if in_wal:
            return
        raise StoreCorrupt("the file is empty (0 bytes): the sessions saved in it are gone")
    if head[: len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise StoreCorrupt("file is not a database (no SQLite header)")
    if in_wal:
        return
    if len(head) < _HEADER_SIZE:
        raise StoreCorrupt(f"the file is cut short ({size} bytes): the data saved in it is gone")
    page_size = int.from_bytes(head[16:18], "big")
    pages = int.from_bytes(head[28:32], "big")
    # The page count is valid when the change counter matches "version valid for".
    if pages and head[24:28] == head[92:96]:
        want = (65536 if page_size == 1 else page_size) * pages
        if size < want:
            raise StoreCorrupt(
                f"the file is cut short ({size} of {want} bytes): part of the data saved in it"
                " is gone"
            )


def _create_fresh(path: Path) -> None:
    """Make a new, empty store at ``path`` unless a file is there by then."""
    with _fresh_file(path):
        pass


@contextlib.contextmanager
def _fresh_file(
    path: Path, fill: Callable[[sqlite3.Connection], None] | None = None
) -> Iterator[None]:
    """Build a new store (0600, in a dir made 0700) aside, with ``fill`` run
    in its first transaction; on leaving the block, link it into place at
    ``path`` unless a file is there by then. Whole or not at all, so no
    crash leaves ``path`` empty or half made: an empty file is always one
    whose data was lost."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.new-{os.getpid()}-{threading.get_ident()}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for stmt in _CREATE:
                conn.execute(stmt)
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            conn.execute("INSERT INTO arrangement VALUES (1, ?)", (_dump(Arrangement()),))
            if fill is not None:
                fill(conn)
            conn.execute("COMMIT")
        finally:
            _rollback(conn)
            conn.close()
        yield
        with contextlib.suppress(FileExistsError):  # another process made one first
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {str(r[0]) for r in rows}


def _version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise StoreCorrupt("meta has no schema_version")
    value = row[0]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or value < 1:
        raise StoreCorrupt(f"schema_version {value!r} is not a version this store writes")
    return value


def _check_tables(conn: sqlite3.Connection) -> None:
    missing = [t for t in _TABLES if t not in _tables(conn)]
    if missing:
        raise StoreCorrupt(f"missing table(s): {', '.join(missing)}")


def _prepare(conn: sqlite3.Connection) -> int:
    """Create the tables of an empty file or migrate an older one; return the
    file's schema version. Looks first in a read transaction and takes the write
    lock only when there is something to write."""
    conn.execute("PRAGMA journal_mode = WAL")
    for lock in ("BEGIN", "BEGIN IMMEDIATE"):
        conn.execute(lock)
        try:
            tables = _tables(conn)
            version = SCHEMA_VERSION if not tables else _version_of(conn, tables)
            if version > SCHEMA_VERSION:
                conn.execute("COMMIT")
                return version
            if tables and version == SCHEMA_VERSION:
                _check_tables(conn)
                conn.execute("COMMIT")
                return version
            if lock == "BEGIN":
                conn.execute("ROLLBACK")
                continue  # again, holding the write lock: someone may have beaten us
            if not tables:
                for stmt in _CREATE:
                    conn.execute(stmt)
                conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
                conn.execute("INSERT INTO arrangement VALUES (1, ?)", (_dump(Arrangement()),))
            else:
                for v in range(version, SCHEMA_VERSION):
                    _MIGRATIONS[v](conn)
                conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,)
                )
                _check_tables(conn)
            conn.execute("COMMIT")
            return SCHEMA_VERSION
        except BaseException:
            _rollback(conn)
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _version_of(conn: sqlite3.Connection, tables: set[str]) -> int:
    if "meta" not in tables:
        raise StoreCorrupt(f"not an arrangement store (tables: {', '.join(sorted(tables))})")
    version = _version(conn)
    missing = [v for v in range(version, SCHEMA_VERSION) if v not in _MIGRATIONS]
    if missing:
        raise StoreCorrupt(f"no migration from schema_version {missing[0]}")
    return version


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


# The last document read and what it structures to. Opening a
# store checks the document, `restore` then loads it and the closing sweep
# loads it again: with 1,000 sessions each structuring costs 30-40 ms. The
# model's values are immutable (frozen classes, never changed in place), so
# one of them can be handed out again while the text is the same.
_last_doc: tuple[object, Arrangement] | None = None


def _read_doc(conn: sqlite3.Connection) -> Arrangement:
    global _last_doc
    row = conn.execute("SELECT doc FROM arrangement WHERE id = 1").fetchone()
    if row is None:
        raise StoreCorrupt("the arrangement row is missing")
    raw = row[0]
    last = _last_doc
    if last is not None and type(last[0]) is type(raw) and last[0] == raw:
        return last[1]
    arr = _structure(raw, Arrangement, "the arrangement")
    _last_doc = (raw, arr)
    return arr


def _write_doc(conn: sqlite3.Connection, arr: Arrangement) -> None:
    conn.execute("UPDATE arrangement SET doc = ? WHERE id = 1", (_dump(arr),))


def _put_bytes(conn: sqlite3.Connection, leaf: SessionLeaf) -> None:
    """Make leaf_bytes hold exactly ``leaf``'s bytes fields."""
    for field in _BYTES_FIELDS:
        data = getattr(leaf, field)
        if data is None:
            conn.execute("DELETE FROM leaf_bytes WHERE name = ? AND field = ?", (leaf.name, field))
        else:
            conn.execute(
                "INSERT OR REPLACE INTO leaf_bytes VALUES (?, ?, ?)", (leaf.name, field, data)
            )


def _drop_bytes(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("DELETE FROM leaf_bytes WHERE name = ?", (name,))


def _saved_bytes(conn: sqlite3.Connection, name: str | None = None) -> dict[str, dict[str, bytes]]:
    """name -> field -> bytes, for every leaf or only ``name``."""
    query = "SELECT name, field, data FROM leaf_bytes"
    rows = conn.execute(query) if name is None else conn.execute(f"{query} WHERE name = ?", (name,))
    saved: dict[str, dict[str, bytes]] = {}
    for leaf_name, field, data in rows:
        # Rows of fields we do not know (a newer multiserver) or of a type we
        # did not write are skipped, not fatal: the arrangement is what matters.
        if isinstance(leaf_name, str) and field in _BYTES_FIELDS and isinstance(data, bytes):
            saved.setdefault(leaf_name, {})[field] = data
    return saved


def _filled(leaf: SessionLeaf, saved: dict[str, dict[str, bytes]]) -> SessionLeaf:
    found = saved.get(leaf.name)
    if found is None:
        return leaf
    return attrs.evolve(
        leaf,
        scrollback=found.get("scrollback", leaf.scrollback),
        notice=found.get("notice", leaf.notice),
    )


def _with_bytes(conn: sqlite3.Connection, arr: Arrangement) -> Arrangement:
    saved = _saved_bytes(conn)
    return arr.map_leaves(lambda leaf: _filled(leaf, saved)) if saved else arr


def _scrollback(conn: sqlite3.Connection, name: str) -> bytes | None:
    """The saved scrollback of ``name``, or None."""
    row = conn.execute(
        "SELECT data FROM leaf_bytes WHERE name = ? AND field = 'scrollback'", (name,)
    ).fetchone()
    return row[0] if row is not None and isinstance(row[0], bytes) else None


def _put_scrollback(conn: sqlite3.Connection, name: str, data: bytes) -> None:
    conn.execute("INSERT OR REPLACE INTO leaf_bytes VALUES (?, 'scrollback', ?)", (name, data))
