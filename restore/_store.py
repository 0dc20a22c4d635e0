"""The saved arrangement on disk: one SQLite file, ``<state dir>/arrangement.sqlite3``.

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

Transactions. The file is in WAL mode and every change is one
``BEGIN IMMEDIATE ... COMMIT`` that reads the document, changes it and writes
it back, so two processes changing it at once both land: the second waits for
the first (busy timeout ``BUSY_TIMEOUT``) and then reads what the first wrote.
Reads run in one read transaction, so they see one committed state.

Versions. A file of an older schema version is migrated when opened, in one
transaction (``_MIGRATIONS``). A file of a newer version is read as far as this
code understands it (unknown tables, columns and JSON fields are ignored,
missing optional fields take their defaults) and is never written:
``read_only`` is True and every change raises ``StoreTooNew``, so a newer
multiserver's data is not cut down to what this one knows. Unknown JSON fields
are ignored at every version; missing optional ones take their defaults.

Corruption. A file that is not SQLite, lacks one of the tables, has no usable
``schema_version``, or holds JSON that does not parse or does not structure
raises ``StoreCorrupt`` (one line). ``open`` checks all of that except the
``leaf_bytes`` rows (reading every saved scrollback on each open would cost
more than it finds), so ``load`` can still raise it for a damaged page there.
A file without the SQLite header is refused before SQLite opens it: closing a
connection to a file it cannot read still makes SQLite delete the ``-wal`` and
``-shm`` beside it. ``open_or_quarantine`` moves a corrupt file, with its
``-wal`` and ``-shm``, aside to ``arrangement.sqlite3.corrupt-<UTC time>``
(never deletes it) and starts an empty store. Errors that say nothing
about the file (busy past the timeout, I/O, permissions) raise ``StoreError``
and never move anything. A newer-version file that cannot be read raises
``StoreTooNew``, not ``StoreCorrupt``: it is someone else's format, not rubbish.

Durable close (stage, kill, complete): ``stage_close`` records a pending close
and removes the leaf in one transaction: that is the commit point. The caller
then kills the child and calls ``complete_close``. A crash or a failed kill in
between leaves the pending close, which ``pending_closes`` lists for the next
run to finish.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.strategies import configure_tagged_union

from multiserver._errors import MultiserverError
from multiserver._paths import ensure_private_dir, state_dir
from restore._model import Arrangement, RestorationRef, SessionLeaf, Split

SCHEMA_VERSION = 1
FILE_NAME = "arrangement.sqlite3"
BUSY_TIMEOUT = 5.0  # seconds a change waits for another process's transaction

_T = TypeVar("_T")

# _MIGRATIONS[n] turns a version-n file into a version-(n + 1) one, inside the
# transaction that opens it. Version 1 is the first, so there are none yet.
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}

_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLES = ("meta", "arrangement", "leaf_bytes", "pending_closes")
# The bytes fields of SessionLeaf, kept in leaf_bytes rather than in the document.
_BYTES_FIELDS = ("scrollback", "notice")
_CREATE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE arrangement (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL)",
    "CREATE TABLE leaf_bytes (name TEXT NOT NULL, field TEXT NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (name, field))",
    "CREATE TABLE pending_closes (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL, ref TEXT, staged_at REAL NOT NULL)",
)

# Primary SQLite result codes that mean "this file is not what we wrote": a
# generic SQL error on our fixed statements (no such table or column), a
# malformed image, not a database, a type or constraint our schema would not
# produce. Anything else (busy, locked, I/O, read-only, full...) is about the
# moment or the machine, and must never get a file moved aside.
_CORRUPT_CODES = frozenset(
    {
        sqlite3.SQLITE_ERROR,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_CONSTRAINT,
        sqlite3.SQLITE_MISMATCH,
        sqlite3.SQLITE_FORMAT,
        sqlite3.SQLITE_NOTADB,
    }
)


class StoreError(MultiserverError):
    """The store cannot be used now (busy past the timeout, I/O, permissions).
    The file is left as it is."""


class StoreCorrupt(StoreError):
    """The file is not a store this code can read; move it aside."""


class StoreTooNew(StoreError):
    """The file was written by a newer multiserver: readable as far as this
    one understands it, never written by it."""


@attrs.frozen
class PendingClose:
    """A close that was staged and not yet completed: the child behind ``ref``
    may still be running."""

    name: str
    ref: RestorationRef | None
    staged_at: float  # unix time


# --- the store's own converter ----------------------------------------------------


def _exact(kind: type) -> Callable[[Any, Any], Any]:
    # Not the wire codec's checks: saved state must take back the lone
    # surrogates that a surrogateescape-decoded path or argv holds.
    def check(value: Any, _type: Any) -> Any:
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return check


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


# --- errors, at one boundary ------------------------------------------------------


@contextlib.contextmanager
def _translated(path: Path) -> Iterator[None]:
    """sqlite3 and OS errors -> StoreCorrupt or StoreError, naming the file."""
    try:
        yield
    except StoreError as exc:
        if str(path) in str(exc):
            raise
        raise type(exc)(f"{path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        cls = StoreCorrupt if code in _CORRUPT_CODES else StoreError
        raise cls(f"{path}: {exc}") from exc
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from exc


def _check_magic(path: Path) -> None:
    """StoreCorrupt if the file is neither empty nor SQLite. Checked before
    SQLite sees the file: closing a connection to a file it cannot read still
    makes SQLite delete the -wal and -shm beside it."""
    with open(path, "rb") as f:
        head = f.read(len(_SQLITE_MAGIC))
    if head and head != _SQLITE_MAGIC:
        raise StoreCorrupt("file is not a database (no SQLite header)")


def _create_private(path: Path) -> None:
    """Create the file 0600 if missing, so SQLite (which gives -wal and -shm
    the main file's mode) never makes it readable by others."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)


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


def _utc_stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


# --- the store ----------------------------------------------------------------------


@attrs.define
class ArrangementStore:
    """One open arrangement file. Build it with ``open`` or
    ``open_or_quarantine``; ``close`` it (or use it as a context manager).

    Calls are blocking (SQLite, and up to ``BUSY_TIMEOUT`` waiting for another
    process); an async caller runs them in a thread. One store object may be
    used from several threads: its calls take turns.
    """

    _path: Path
    _conn: sqlite3.Connection
    _schema_version: int
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    @staticmethod
    def default_path() -> Path:
        """``<state dir>/arrangement.sqlite3``; no I/O."""
        return state_dir() / FILE_NAME

    @classmethod
    def open(cls, path: Path | None = None) -> ArrangementStore:
        """Open (creating if missing) the store at ``path``, by default in the
        state dir (created 0700). Checks the schema and that the arrangement and
        pending closes structure; raises StoreCorrupt, StoreTooNew or StoreError.
        """
        if path is None:
            path = ensure_private_dir(state_dir()) / FILE_NAME
        with _translated(path):
            _create_private(path)
            _check_magic(path)
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        try:
            with _translated(path):
                version = _prepare(conn)
            store = cls(path, conn, version)
            store._read(lambda c: (_read_doc(c), _read_pending(c)))
        except BaseException:
            conn.close()
            raise
        return store

    @classmethod
    def open_or_quarantine(cls, path: Path | None = None) -> tuple[ArrangementStore, str | None]:
        """Open the store; if it is corrupt, move it aside (see ``quarantine``)
        and open a fresh, empty one. Returns (store, None), or (store, a
        one-line warning saying what was wrong and where the old file went).
        """
        if path is None:
            path = ensure_private_dir(state_dir()) / FILE_NAME
        try:
            return cls.open(path), None
        except StoreCorrupt as exc:
            moved = cls.quarantine(path)
            store = cls.open(path)
            warning = f"{exc}; moved it to {moved} and started an empty arrangement"
            return store, warning

    @staticmethod
    def quarantine(path: Path) -> Path:
        """Move ``path`` and its ``-wal`` and ``-shm`` aside to
        ``<name>.corrupt-<UTC time>`` (same dir; ``-2``, ``-3``... if taken) and
        return the new path. Nothing is deleted. The -wal goes first: left
        beside a new file of the same name, SQLite would replay it into it.
        """
        base = path.with_name(f"{path.name}.corrupt-{_utc_stamp()}")
        dest, n = base, 1
        while any(Path(f"{dest}{s}").exists() for s in ("", "-wal", "-shm")):
            n += 1
            dest = base.with_name(f"{base.name}-{n}")
        with _translated(path):
            for suffix in ("-wal", "-shm", ""):
                src = Path(f"{path}{suffix}")
                if src.exists():
                    os.rename(src, f"{dest}{suffix}")
        return dest

    @property
    def path(self) -> Path:
        return self._path

    @property
    def schema_version(self) -> int:
        """The file's schema version (may be newer than ``SCHEMA_VERSION``)."""
        return self._schema_version

    @property
    def read_only(self) -> bool:
        """True for a file of a newer schema: changes raise StoreTooNew."""
        return self._schema_version > SCHEMA_VERSION

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ArrangementStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reads

    def load(self) -> Arrangement:
        """The arrangement, with saved scrollback and notices."""
        return self._read(lambda c: _with_bytes(c, _read_doc(c)))

    def pending_closes(self) -> list[PendingClose]:
        """Closes staged and not completed, oldest first."""
        return self._read(_read_pending)

    # --- changes, each one transaction

    def save(self, arr: Arrangement) -> None:
        """Replace the whole arrangement, bytes fields included."""

        def op(c: sqlite3.Connection) -> None:
            _write_doc(c, arr)
            c.execute("DELETE FROM leaf_bytes")
            for leaf in arr.leaves():
                _put_bytes(c, leaf)

        self._write(op)

    def modify(self, change: Callable[[Arrangement], Arrangement]) -> Arrangement:
        """Read, ``change``, write: one transaction. ``change`` sees the
        arrangement without its bytes fields; sessions it adds are saved with
        theirs, sessions it keeps keep their saved bytes, sessions it drops
        lose them. Returns the new arrangement (without bytes fields)."""

        def op(c: sqlite3.Connection) -> Arrangement:
            old = _read_doc(c)
            new = change(old)
            if new is old:
                return old
            before = {leaf.name for leaf in old.leaves()}
            after = {leaf.name: leaf for leaf in new.leaves()}
            _write_doc(c, new)
            for name in before - after.keys():
                _drop_bytes(c, name)
            for name in after.keys() - before:
                _put_bytes(c, after[name])
            return new

        return self._write(op)

    def add_session(self, leaf: SessionLeaf, window: str = "main") -> None:
        """Add ``leaf`` as a new tab of ``window`` (see ``Arrangement.with_session``);
        ValueError if the name is taken."""

        def op(c: sqlite3.Connection) -> None:
            _write_doc(c, _read_doc(c).with_session(leaf, window))
            _put_bytes(c, leaf)

        self._write(op)

    def remove_session(self, name: str) -> None:
        """Drop the leaf ``name`` (KeyError if none) and its bytes fields."""

        def op(c: sqlite3.Connection) -> None:
            _write_doc(c, _read_doc(c).without_session(name))
            _drop_bytes(c, name)

        self._write(op)

    def update_session(self, leaf: SessionLeaf) -> None:
        """Replace the leaf of the same name (KeyError if none), in place. Its
        saved bytes fields become the leaf's (None removes one)."""

        def op(c: sqlite3.Connection) -> None:
            _write_doc(c, _read_doc(c).replace_session(leaf))
            _put_bytes(c, leaf)

        self._write(op)

    def stage_close(self, name: str) -> SessionLeaf:
        """The commit point of a durable close: in one transaction, record a
        pending close for ``name`` and remove its leaf. Returns the leaf as it
        was (with its bytes fields); KeyError if there is none."""

        def op(c: sqlite3.Connection) -> SessionLeaf:
            arr = _read_doc(c)
            found = arr.find(name)
            if found is None:
                raise KeyError(name)
            leaf = _filled(found, _saved_bytes(c, name))
            _write_doc(c, arr.without_session(name))
            _drop_bytes(c, name)
            ref = None if leaf.ref is None else _dump(leaf.ref)
            c.execute(
                "INSERT INTO pending_closes (name, ref, staged_at) VALUES (?, ?, ?)",
                (name, ref, time.time()),
            )
            return leaf

        return self._write(op)

    def complete_close(self, name: str, ref: RestorationRef | None = None) -> None:
        """Forget the pending close of ``name`` once its child is gone. With
        ``ref``, only the close of that child (a name can be reused while an
        older close of it is still pending). Idempotent."""

        def op(c: sqlite3.Connection) -> None:
            if ref is None:
                c.execute("DELETE FROM pending_closes WHERE name = ?", (name,))
                return
            rows = c.execute("SELECT id, ref FROM pending_closes WHERE name = ?", (name,))
            for row_id, raw in rows.fetchall():
                if raw is not None and _structure(raw, RestorationRef, "a pending ref") == ref:
                    c.execute("DELETE FROM pending_closes WHERE id = ?", (row_id,))

        self._write(op)

    # --- transactions

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """Errors translated; a newer file's unreadable parts are StoreTooNew,
        never StoreCorrupt (it is not ours to move aside)."""
        try:
            with _translated(self._path):
                yield
        except StoreCorrupt as exc:
            if not self.read_only:
                raise
            raise StoreTooNew(
                f"{exc} (schema_version {self._schema_version} is newer than"
                f" {SCHEMA_VERSION}, which this multiserver knows)"
            ) from exc

    def _read(self, op: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock, self._guarded():
            self._conn.execute("BEGIN")
            try:
                result = op(self._conn)
                self._conn.execute("COMMIT")
            except BaseException:
                _rollback(self._conn)
                raise
            return result

    def _write(self, op: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock, self._guarded():
            self._check_writable(self._schema_version)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have upgraded the file since we opened it.
                self._check_writable(_version(self._conn))
                result = op(self._conn)
                self._conn.execute("COMMIT")
            except BaseException:
                _rollback(self._conn)
                raise
            return result

    def _check_writable(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreTooNew(
                f"{self._path}: schema_version {version} is newer than {SCHEMA_VERSION},"
                " which this multiserver knows; not changing it"
            )
