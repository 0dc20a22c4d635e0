"""What can still be read of a damaged arrangement file, for the fresh file
that replaces it (``ArrangementStore`` moves the damaged one aside).

Each part is read on its own, so damage in one costs only that part: the
arrangement (the sessions, their commands, cwds and layout), the pending
closes, and each saved scrollback or notice, one row at a time (by the
index, then by a scan of the table, as either may be the damaged part). A
page of ``leaf_bytes`` gone thus costs the scrollback whose row was on it,
never the sessions. The arrangement of a version-2 file is read whole if
it can be; else window by window, tab by tab and session by session: a
session whose row cannot be read is lost, the rest keep their places (a
session whose tab or window is lost goes to a tab of its own in window
``main``). A version-1 file's one document is read whole or not at all.
Reads only: the file is opened read-only, and nothing of it is changed or
deleted.
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from pathlib import Path

import attrs

from restore.store._errors import StoreCorrupt
from restore.store._file import _wal_has_data
from restore.store._model import Arrangement, Node, SessionLeaf, Split, Tab, Window, _walk
from restore.store._rows import _leaf, read_rows, write_rows
from restore.store._rules import (
    BYTES_FIELDS as _BYTES_FIELDS,
    SQLITE_MAGIC as _SQLITE_MAGIC,
    from_column,
)
from restore.store._schema import (
    PendingClose,
    _filled,
    _insert_pending,
    _put_bytes,
    _read_pending,
    read_v1_document,
)
from restore.store._tree import parse_root

_UNREADABLE = (sqlite3.Error, StoreCorrupt)


@attrs.frozen
class Salvage:
    """What was read of a damaged file."""

    arrangement: Arrangement | None  # None: none of it could be read
    pending: tuple[PendingClose, ...] | None  # None: could not be read
    bytes_kept: int = 0  # saved scrollbacks and notices read whole
    bytes_lost: int = 0  # and those that could not be read
    sessions_lost: int = 0  # sessions named in the file whose rows could not be read

    def fill(self, conn: sqlite3.Connection) -> None:
        """Write it into a fresh file's first transaction."""
        if self.arrangement is not None:
            write_rows(conn, self.arrangement)
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
        if self.sessions_lost:
            kept += f" ({self.sessions_lost} more could not be read)"
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
    lost = 0
    try:
        arrangement: Arrangement | None
        arrangement, lost = _read_arrangement(conn)
    except _UNREADABLE:
        arrangement = None
    try:
        pending: tuple[PendingClose, ...] | None = tuple(_read_pending(conn))
    except _UNREADABLE:
        pending = None
    if arrangement is None:
        return Salvage(None, pending)
    kept = gone = 0
    saved: dict[str, dict[str, bytes]] = {}
    for leaf in arrangement.leaves():
        for field in _BYTES_FIELDS:
            readable, found = _read_row(conn, leaf.name, field)
            if not readable:
                gone += 1
            elif found is not None:
                saved.setdefault(leaf.name, {})[field] = found
                kept += 1
    filled = arrangement.map_leaves(lambda leaf: _filled(leaf, saved))
    return Salvage(filled, pending, kept, gone, lost)


def _read_arrangement(conn: sqlite3.Connection) -> tuple[Arrangement, int]:
    """The arrangement, and how many sessions named in the file could not be read."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "sessions" not in tables and "arrangement" in tables:  # version 1
        return read_v1_document(conn), 0
    try:
        return read_rows(conn).arrangement, 0
    except _UNREADABLE:
        return _read_piecewise(conn)


def _all(conn: sqlite3.Connection, query: str) -> list[tuple[object, ...]]:
    """The rows ``query`` (naming ``{table}`` where a table goes) reads by
    the index, else by a scan of the table; none if neither can."""
    for how in ("", " NOT INDEXED"):
        try:
            return conn.execute(query.replace(" {how}", how)).fetchall()
        except sqlite3.Error:
            continue
    return []


def _read_piecewise(conn: sqlite3.Connection) -> tuple[Arrangement, int]:
    """What can be read of a damaged version-2 arrangement, row by row."""
    windows = _all(conn, "SELECT id, name FROM windows {how} ORDER BY id")
    tabs = _all(conn, "SELECT id, window, title, root FROM tabs {how} ORDER BY window, id")
    names = {n for (n,) in _all(conn, "SELECT name FROM sessions {how}") if isinstance(n, str)}
    for _tab, _window, _title, text in tabs:
        with contextlib.suppress(ValueError):
            parse_root(text, names.add, lambda *_: None)
    leaves: dict[str, SessionLeaf] = {}
    for name in sorted(names):
        for how in ("", " NOT INDEXED"):
            try:
                row = conn.execute(
                    f"SELECT leaf FROM sessions{how} WHERE name = ?", (name,)
                ).fetchone()
                if row is not None:
                    leaves[name] = _leaf(name, row[0])
                break
            except _UNREADABLE:
                continue
    placed: set[str] = set()

    def session(name: str) -> Node | None:
        leaf = leaves.get(name)
        if leaf is None or name in placed:
            return None
        placed.add(name)
        return leaf

    def split(
        vertical: bool, children: list[Node | None], sizes: list[float] | None
    ) -> Node | None:
        kept = [(c, i) for i, c in enumerate(children) if c is not None]
        if len(kept) <= 1:
            return kept[0][0] if kept else None
        return Split(
            vertical, [c for c, _ in kept], None if sizes is None else [sizes[i] for _, i in kept]
        )

    by_window: dict[object, list[Tab]] = {}
    for _tab, window, title, text in tabs:
        try:
            root = parse_root(text, session, split)
        except ValueError:
            continue
        if root is not None:
            by_window.setdefault(window, []).append(Tab(root, from_column(title) or ""))
    arr = Arrangement(
        [
            Window(name, by_window.pop(wid))
            for wid, name in ((wid, from_column(column)) for wid, column in windows)
            if name is not None and wid in by_window
        ]
    )
    for tab in (t for tabs_of in by_window.values() for t in tabs_of):  # their window is lost
        for leaf in _walk(tab.root):
            arr = arr.with_session(leaf, "main")
    for name, leaf in leaves.items():
        if name not in placed:
            arr = arr.with_session(leaf, "main")
    return arr, len(names) - len(leaves)


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
