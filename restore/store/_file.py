"""The arrangement file as a file: checked before SQLite opens it, made
whole or not at all, and opened: its tables created, or an older schema
migrated (``_MIGRATIONS``), or a newer one found. The tables themselves
are ``_schema``'s.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from restore.store._errors import StoreCorrupt
from restore.store._rows import write_rows
from restore.store._rules import SCHEMA_VERSION as SCHEMA_VERSION, SQLITE_MAGIC as _SQLITE_MAGIC
from restore.store._schema import CREATE, CREATE_ROWS, TABLES, read_v1_document

_HEADER_SIZE = 100


def _v1_to_v2(conn: sqlite3.Connection) -> None:
    """The one document becomes rows, in the same order; the bytes fields and
    pending closes stay where they are. The ``arrangement`` table goes, so a
    multiserver that knows only version 1 never writes this file again."""
    arr = read_v1_document(conn)
    for stmt in CREATE_ROWS:
        conn.execute(stmt)
    write_rows(conn, arr)
    conn.execute("DROP TABLE arrangement")


# _MIGRATIONS[n] turns a version-n file into a version-(n + 1) one, inside the
# transaction that opens it.
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1_to_v2}


def _create_tables(conn: sqlite3.Connection) -> None:
    for stmt in (*CREATE, *CREATE_ROWS):
        conn.execute(stmt)
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))


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
            _create_tables(conn)
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
    missing = [t for t in TABLES if t not in _tables(conn)]
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
                _create_tables(conn)
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
