"""What can still be read of a damaged arrangement file, for the fresh file
that replaces it (``ArrangementStore`` moves the damaged one aside).

Each part is read on its own, so damage in one costs only that part: the
arrangement document (the sessions, their commands, cwds and layout), the
pending closes, and each saved scrollback or notice, one row at a time (by
the index, then by a scan of the table, as either may be the damaged part).
A page of ``leaf_bytes`` gone thus costs the scrollback whose row was on it,
never the sessions. Reads only: the file is opened read-only, and nothing
of it is changed or deleted.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path

import attrs

from restore.store._errors import StoreCorrupt
from restore.store._model import Arrangement
from restore.store._rules import BYTES_FIELDS as _BYTES_FIELDS, SQLITE_MAGIC as _SQLITE_MAGIC
from restore.store._schema import (
    PendingClose,
    _filled,
    _insert_pending,
    _put_bytes,
    _read_doc,
    _read_pending,
    _wal_has_data,
    _write_doc,
)

_UNREADABLE = (sqlite3.Error, StoreCorrupt)


@attrs.frozen
class Salvage:
    """What was read of a damaged file."""

    arrangement: Arrangement | None  # None: the document could not be read
    pending: tuple[PendingClose, ...] | None  # None: could not be read
    bytes_kept: int = 0  # saved scrollbacks and notices read whole
    bytes_lost: int = 0  # and those that could not be read

    def fill(self, conn: sqlite3.Connection) -> None:
        """Write it into a fresh file's first transaction."""
        if self.arrangement is not None:
            _write_doc(conn, self.arrangement)
            for leaf in self.arrangement.leaves():
                _put_bytes(conn, leaf)
        for p in self.pending or ():
            _insert_pending(conn, p.name, p.ref, p.staged_at)

    def describe(self) -> str:
        """What the user keeps, in words (part of one line)."""
        if self.arrangement is None:
            kept = "started an empty arrangement"
            if self.pending:
                kept += f" (with its {len(self.pending)} unfinished closes)"
            return kept
        n = len(self.arrangement.leaves())
        kept = f"kept its {n} saved session{'' if n == 1 else 's'}"
        total = self.bytes_kept + self.bytes_lost
        if self.bytes_lost:
            kept += f" ({self.bytes_lost} of {total} saved scrollbacks and notices were unreadable)"
        if self.pending is None:
            kept += "; its unfinished closes were unreadable"
        return kept


def salvage(path: Path) -> Salvage:
    """Read what can be read of ``path`` (nothing, if it is not SQLite)."""
    try:
        with open(path, "rb") as f:
            if f.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                return Salvage(None, ())
        # Without a -wal that holds data, immutable: SQLite then makes no
        # -wal or -shm beside a file that is about to be moved aside.
        still = "" if _wal_has_data(path) else "&immutable=1"
        conn = sqlite3.connect(
            f"file:{urllib.parse.quote(str(path))}?mode=ro{still}", uri=True, isolation_level=None
        )
    except (OSError, sqlite3.Error):
        return Salvage(None, ())
    try:
        # Reads pages that are there of a file shorter than its header says
        # (else SQLite refuses the whole file).
        conn.execute("PRAGMA writable_schema = ON")
        return _read_parts(conn)
    except sqlite3.Error:
        return Salvage(None, ())
    finally:
        conn.close()


def _read_parts(conn: sqlite3.Connection) -> Salvage:
    try:
        arrangement: Arrangement | None = _read_doc(conn)
    except _UNREADABLE:
        arrangement = None
    try:
        pending: tuple[PendingClose, ...] | None = tuple(_read_pending(conn))
    except _UNREADABLE:
        pending = None
    if arrangement is None:
        return Salvage(None, pending)
    kept = lost = 0
    saved: dict[str, dict[str, bytes]] = {}
    for leaf in arrangement.leaves():
        for field in _BYTES_FIELDS:
            readable, found = _read_row(conn, leaf.name, field)
            if not readable:
                lost += 1
            elif found is not None:
                saved.setdefault(leaf.name, {})[field] = found
                kept += 1
    return Salvage(arrangement.map_leaves(lambda leaf: _filled(leaf, saved)), pending, kept, lost)


def _read_row(conn: sqlite3.Connection, name: str, field: str) -> tuple[bool, bytes | None]:
    """One saved bytes field: (True, the bytes or None if there is none), or
    (False, None) if it could not be read (neither by the index nor by a scan)."""
    for table in ("leaf_bytes", "leaf_bytes NOT INDEXED"):
        try:
            row = conn.execute(
                f"SELECT data FROM {table} WHERE name = ? AND field = ?", (name, field)
            ).fetchone()
        except sqlite3.Error:
            continue
        if row is None or not isinstance(row[0], bytes):
            return True, None
        return True, row[0]
    return False, None
