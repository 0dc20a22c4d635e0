"""The saved arrangement on disk: one SQLite file, ``<state dir>/arrangement.sqlite3``,
opened, read and changed through ``ArrangementStore``: its transactions, its
versions, quarantine of a corrupt file, and the durable close. The file's
format (tables, the JSON in them and its converter) is in ``_schema``; the
arrangement's rows are read and written by ``_rows``; the file is checked,
made and migrated by ``_file``; the errors, and the one boundary translating
sqlite3 and OS errors into them, are in ``_errors``.

By session. The arrangement is kept a row per session (``_schema``), so a
call about one session (``find``, ``sessions``, ``add_session``,
``remove_session``, ``update_session``, ``stage_close``, ``save_outputs``)
reads and writes that session's rows, its tab's and at most its window's,
by their indexes: it costs the same with one session saved or thousands.
``load``, ``save`` and ``modify`` are about the whole arrangement and read
(or write) all of it; ``modify`` writes only the rows that changed.

Transactions. The file is in WAL mode and every change is one
``BEGIN IMMEDIATE ... COMMIT`` that reads the rows it changes and writes them
back, so two processes changing it at once both land: the second waits for
the first (busy timeout ``BUSY_TIMEOUT``) and then reads what the first wrote.
Reads run in one read transaction, so they see one committed state.

Versions. A file of an older schema version is migrated when opened, in one
transaction (``_file._MIGRATIONS``). A file of a newer version is read as far
as this code understands it (unknown tables, columns and JSON fields are
ignored, missing optional fields take their defaults) and is never written:
``read_only`` is True and every change raises ``StoreTooNew``, so a newer
multiserver's data is not cut down to what this one knows.

Corruption. A file that is not SQLite, lacks one of the tables, has no usable
``schema_version``, holds JSON that does not parse or does not structure, or
rows that do not hold together (a tab naming a session saved elsewhere, say)
raises ``StoreCorrupt`` (one line). ``open`` checks the file, its tables,
version and pending closes; a session's rows and bytes are checked by the
first call that reads them (reading every session on each open would make
every command cost what the number of sessions saved costs), and ``load``
reads them all.
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
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import attrs

from multiserver.internal import ensure_private_dir, state_dir
from restore.store._errors import StoreCorrupt, StoreTooNew, _translated
from restore.store._file import (
    SCHEMA_VERSION,
    _check_file,
    _create_fresh,
    _fresh_file,
    _prepare,
    _rollback,
    _version,
)
from restore.store._model import Arrangement, RestorationRef, SavedOutput, SessionLeaf
from restore.store._rows import (
    Key,
    add_row,
    clear_rows,
    drop_row,
    find_row,
    modify_rows,
    read_rows,
    rows_named_or_referred,
    update_row,
    write_rows,
)
from restore.store._rules import FILE_NAME as FILE_NAME
from restore.store._salvage import salvage
from restore.store._schema import (
    PendingClose,
    _drop_bytes,
    _filled,
    _insert_pending,
    _put_bytes,
    _put_scrollback,
    _read_pending,
    _saved_bytes,
    _scrollback,
    _structure,
    _with_bytes,
)

BUSY_TIMEOUT = 5.0  # seconds a change waits for another process's transaction

_T = TypeVar("_T")


def _utc_stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


# --- the store ----------------------------------------------------------------------


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` names now (device, inode); None if none."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _connect(path: Path) -> tuple[sqlite3.Connection, int, tuple[int, int] | None]:
    """A connection to the store at ``path`` (made if missing), its schema
    version and which file it is."""
    with _translated(path):
        if not os.path.lexists(path):
            _create_fresh(path)
        _check_file(path)
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
    try:
        with _translated(path):
            version = _prepare(conn)
    except BaseException:
        conn.close()
        raise
    return conn, version, _identity(path)


def _replace_damaged(path: Path, damage: StoreCorrupt, was: tuple[int, int] | None) -> str:
    """Move the damaged file ``path`` aside and put a fresh one in its
    place, holding what could be read of it (``_salvage``); returns the
    one-line warning. ``was``: the file found damaged; if ``path`` names
    another by now, someone else replaced it already and it is left alone."""
    kept = salvage(path)
    with _translated(path):
        if _identity(path) != was:
            return f"{damage}; another multiserver has moved it aside meanwhile"
        # Built before the move and linked in right after it, so no other
        # process finds the path missing and makes an empty store there.
        with _fresh_file(path, kept.fill):
            moved = ArrangementStore.quarantine(path)
    return f"{damage}; moved it to {moved}; {kept.describe()}"


@attrs.define
class ArrangementStore:
    """One open arrangement file. Build it with ``open`` or
    ``open_or_quarantine``; ``close`` it (or use it as a context manager).

    Calls are blocking (SQLite, and up to ``BUSY_TIMEOUT`` waiting for another
    process); an async caller runs them in a thread. One store object may be
    used from several threads: its calls take turns.

    A store from ``open_or_quarantine`` mends itself: a call that finds the
    file damaged (a session's row, or a page of ``leaf_bytes``, which
    ``open`` does not read) moves it aside, starts a fresh file with what
    could be read of it, says so to ``on_warning`` (one line), and is run
    again on the fresh file.
    """

    _path: Path
    _conn: sqlite3.Connection
    _schema_version: int
    _file: tuple[int, int] | None = None  # which file _conn has open
    _mends: bool = False
    _on_warning: Callable[[str], None] | None = None
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    @staticmethod
    def default_path() -> Path:
        """``<state dir>/arrangement.sqlite3``; no I/O."""
        return state_dir() / FILE_NAME

    @classmethod
    def open(cls, path: Path | None = None) -> ArrangementStore:
        """Open (creating if missing) the store at ``path``, by default in the
        state dir (created 0700). Checks the file (empty, cut short, not
        SQLite), the schema and its tables, and that the pending closes
        structure, reading no session; raises StoreCorrupt, StoreTooNew or
        StoreError.
        """
        if path is None:
            path = ensure_private_dir(state_dir()) / FILE_NAME
        conn, version, file = _connect(path)
        try:
            store = cls(path, conn, version, file)
            store._read(_read_pending)
        except BaseException:
            conn.close()
            raise
        return store

    @classmethod
    def open_or_quarantine(
        cls, path: Path | None = None, *, on_warning: Callable[[str], None] | None = None
    ) -> tuple[ArrangementStore, str | None]:
        """Open the store; if it is damaged, move it aside (see
        ``quarantine``) and open a fresh one holding what could be read of it
        (the sessions, if only saved scrollback was hit). Returns (store,
        None), or (store, a one-line warning saying what was wrong, where
        the old file went and what was kept). The store mends itself the
        same way later, telling ``on_warning``.
        """
        if path is None:
            path = ensure_private_dir(state_dir()) / FILE_NAME
        warning = None
        was = _identity(path)
        try:
            store = cls.open(path)
        except StoreCorrupt as exc:
            warning = _replace_damaged(path, exc, was)
            store = cls.open(path)
        store._mends, store._on_warning = True, on_warning
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
        return self._read(lambda c: _with_bytes(c, read_rows(c).arrangement))

    def load_outline(self) -> Arrangement:
        """The arrangement without its bytes fields (``scrollback`` and
        ``notice`` None): for a caller that asks who is where, often, and
        would otherwise read every saved scrollback each time."""
        return self._read(lambda c: read_rows(c).arrangement)

    def find(self, name: str) -> SessionLeaf | None:
        """The saved session ``name``, with its bytes fields; None if there
        is none. Reads its rows only."""

        def op(c: sqlite3.Connection) -> SessionLeaf | None:
            leaf = find_row(c, name)
            return None if leaf is None else _filled(leaf, _saved_bytes(c, name))

        return self._read(op)

    def sessions(self, names: Iterable[str] = (), refs: Iterable[Key] = ()) -> list[SessionLeaf]:
        """The saved sessions called one of ``names`` (in that order), then
        those whose ref names one of the children ``refs`` (each as
        ``ref_key`` gives it), each once, without their bytes fields. Names
        and refs no session has are left out. Reads their rows only."""
        names, refs = list(names), list(refs)
        return self._read(lambda c: rows_named_or_referred(c, names, refs))

    def pending_closes(self) -> list[PendingClose]:
        """Closes staged and not completed, oldest first."""
        return self._read(_read_pending)

    # --- changes, each one transaction

    def save(self, arr: Arrangement) -> None:
        """Replace the whole arrangement, bytes fields included."""

        def op(c: sqlite3.Connection) -> None:
            clear_rows(c)
            c.execute("DELETE FROM leaf_bytes")
            write_rows(c, arr)
            for leaf in arr.leaves():
                _put_bytes(c, leaf)

        self._write(op)

    def modify(self, change: Callable[[Arrangement], Arrangement]) -> Arrangement:
        """Read, ``change``, write: one transaction. ``change`` sees the
        arrangement without its bytes fields; sessions it adds are saved with
        theirs, sessions it keeps keep their saved bytes, sessions it drops
        lose them. Only the rows that changed are written. Returns the new
        arrangement (without bytes fields)."""
        return self._write(lambda c: modify_rows(c, change))

    def add_session(self, leaf: SessionLeaf, window: str = "main") -> None:
        """Add ``leaf`` as a new tab of ``window`` (see ``Arrangement.with_session``);
        ValueError if the name is taken."""

        def op(c: sqlite3.Connection) -> None:
            add_row(c, leaf, window)
            _put_bytes(c, leaf)

        self._write(op)

    def remove_session(self, name: str) -> None:
        """Drop the leaf ``name`` (KeyError if none) and its bytes fields
        (see ``Arrangement.without_session``)."""

        def op(c: sqlite3.Connection) -> None:
            drop_row(c, name)
            _drop_bytes(c, name)

        self._write(op)

    def update_session(self, leaf: SessionLeaf) -> None:
        """Replace the leaf of the same name (KeyError if none), in place. Its
        saved bytes fields become the leaf's (None removes one)."""
        if self.update_sessions([leaf]):
            raise KeyError(leaf.name)

    def update_sessions(self, leaves: Sequence[SessionLeaf]) -> list[str]:
        """``update_session`` for many leaves in one transaction (a restore
        records its relaunches so). Returns the names that are not saved;
        nothing is written for those."""
        by_name = {leaf.name: leaf for leaf in leaves}
        if not by_name:
            return []

        def op(c: sqlite3.Connection) -> list[str]:
            missing = []
            for leaf in by_name.values():
                if update_row(c, leaf):
                    _put_bytes(c, leaf)
                else:
                    missing.append(leaf.name)
            return missing

        return self._write(op)

    def save_outputs(self, outputs: Sequence[SavedOutput]) -> list[str]:
        """Keep what sessions showed as their leaves' scrollback, all in one
        transaction. Each output goes to the leaf whose ref names its child
        (another child under the same name, e.g. relaunched meanwhile, is not
        touched; an output no leaf refers to is dropped), with its
        ``exit_code``; the leaf is found by its ref, without reading the
        others. A scrollback equal to the saved one is not written again, so
        saving an idle session costs the disk nothing. Returns the names of
        the leaves the outputs went to, changed or not."""
        if not outputs:
            return []
        by_child = {o.key: o for o in outputs}

        def op(c: sqlite3.Connection) -> list[str]:
            found: list[str] = []
            for key, out in by_child.items():
                for leaf in rows_named_or_referred(c, (), [key]):
                    found.append(leaf.name)
                    if leaf.exit_code != out.exit_code:
                        update_row(c, attrs.evolve(leaf, exit_code=out.exit_code))
                    if _scrollback(c, leaf.name) != out.output:
                        _put_scrollback(c, leaf.name, out.output)
            return found

        return self._write(op)

    def stage_close(self, name: str) -> SessionLeaf:
        """The commit point of a durable close: in one transaction, record a
        pending close for ``name`` and remove its leaf. Returns the leaf as it
        was (with its bytes fields); KeyError if there is none."""

        def op(c: sqlite3.Connection) -> SessionLeaf:
            saved = _saved_bytes(c, name)
            leaf = _filled(drop_row(c, name), saved)
            _drop_bytes(c, name)
            _insert_pending(c, name, leaf.ref, time.time())
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
        return self._run(op, write=False)

    def _write(self, op: Callable[[sqlite3.Connection], _T]) -> _T:
        return self._run(op, write=True)

    def _run(self, op: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        with self._lock:
            try:
                return self._once(op, write)
            except StoreCorrupt as exc:
                if not self._mends:
                    raise
                self._mend(exc)
            return self._once(op, write)

    def _once(self, op: Callable[[sqlite3.Connection], _T], write: bool) -> _T:
        with self._guarded():
            if write:
                self._check_writable(self._schema_version)
            self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                if write:
                    # Another process may have upgraded the file since we opened it.
                    self._check_writable(_version(self._conn))
                result = op(self._conn)
                self._conn.execute("COMMIT")
            except BaseException:
                _rollback(self._conn)
                raise
            return result

    def _mend(self, damage: StoreCorrupt) -> None:
        """The file is damaged: replace it (``_replace_damaged``), reopen."""
        self._conn.close()
        warning = _replace_damaged(self._path, damage, self._file)
        self._conn, self._schema_version, self._file = _connect(self._path)
        if self._on_warning is not None:
            self._on_warning(warning)

    def _check_writable(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreTooNew(
                f"{self._path}: schema_version {version} is newer than {SCHEMA_VERSION},"
                " which this multiserver knows; not changing it"
            )
