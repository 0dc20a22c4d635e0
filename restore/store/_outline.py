"""The saved sessions, read lightly: the leaves of the arrangement with
their bytes fields, from ``sqlite3`` and ``json`` alone, as plain twins of
``SessionLeaf`` (``_light_model``, generated), without the converter, attrs
or cattrs. A command that only looks names, refs and states up (``ls``,
``peek``, ``attach``) starts in a fraction of the time, and one that looks
up one session (by name or by the child it refers to) reads that session's
rows only. ``new`` adds its session the same way (``add_saved``:
``ArrangementStore.add_session``'s rows), held to the store by a property
test.

It reads only what it is sure of, and says None for anything else: no
file there is no session saved; a file of another schema version (an
older one is the whole store's to migrate), one with closes pending, a row
it does not expect, or any error of SQLite is the whole store's to open
(``ArrangementStore``), which migrates, finishes, quarantines or says what
is wrong. What it returns is what ``ArrangementStore.load().leaves()``
returns, field for field, or for some sessions what ``find`` returns for
each (``tests/restore/store/test_outline.py``): the same rules for values
(``_schema``'s exact types, unknown fields ignored), names (``_rules``),
the layout (``_tree``, the store's own reader of it) and bytes (cut to
``SCROLLBACK_LIMIT`` as the model cuts them).
"""

from __future__ import annotations

import json
import os
import sqlite3

from multiserver import MultiserverError
from multiserver.internal import check_private_dir, twin_structurers
from restore.store import _light_model as twins
from restore.store._rules import (
    BYTES_FIELDS,
    FILE_NAME,
    SCHEMA_VERSION,
    SQLITE_MAGIC,
    bounded_scrollback,
    check_leaf_host,
    check_leaf_name,
    exact,
    ref_columns,
)
from restore.store._tree import (
    add_tab,
    named_or_referred,
    names_beginning,
    other_hosts_names,
    ref_sockets,
    shape,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path
    from typing import Any

    from restore.store._model import SessionLeaf

    Key = tuple[str, str, int]  # a child, as ref_key gives it

# A busy writer holds the file this long at most before the read gives up
# and leaves it to the whole store (which waits BUSY_TIMEOUT).
READ_TIMEOUT = 1.0


_LEAF = twin_structurers(
    twins,
    {kind.__name__: exact(kind) for kind in (int, float, str, bool, bytes)},
    forbid_extra=False,
)["SessionLeaf"]


class _NotSure(Exception):
    """What the light read does not vouch for: the whole store's to read."""


def _leaf(name: object, text: object) -> SessionLeaf:
    """The session row ``name``'s leaf, without its bytes fields, as the
    store's converter reads it (``_rows._leaf``)."""
    if type(text) is not str:
        raise _NotSure
    try:
        node = json.loads(text)
    except (ValueError, RecursionError):
        raise _NotSure from None
    if type(node) is not dict:
        raise _NotSure
    fields = {k: v for k, v in node.items() if k not in BYTES_FIELDS and k != "kind"}
    try:
        leaf = _LEAF(fields)
        check_leaf_name(leaf.name)
        check_leaf_host(leaf.name, leaf.host)
    except Exception:
        raise _NotSure from None
    if leaf.name != name:
        raise _NotSure
    return leaf  # type: ignore[no-any-return]


def _filled(leaf: SessionLeaf, rows: Iterable[tuple[object, object, object]]) -> SessionLeaf:
    """``leaf`` with its saved bytes fields (``rows``: name, field, data)."""
    for _name, field, data in rows:
        # As the whole store reads them: rows it does not know are skipped.
        if field in BYTES_FIELDS and isinstance(data, bytes):
            setattr(leaf, str(field), bounded_scrollback(data))
    return leaf


def _check(conn: sqlite3.Connection) -> None:
    """In a transaction the caller began: a file of this schema, with no
    close pending (the whole store finishes those)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or row[0] != SCHEMA_VERSION:
        raise _NotSure
    if conn.execute("SELECT 1 FROM pending_closes LIMIT 1").fetchone() is not None:
        raise _NotSure


def _read_all(conn: sqlite3.Connection) -> list[SessionLeaf]:
    conn.execute("BEGIN")  # one read transaction: one committed state
    try:
        _check(conn)
        windows = conn.execute("SELECT id, name FROM windows ORDER BY id").fetchall()
        tabs = conn.execute(
            "SELECT id, window, title, root FROM tabs ORDER BY window, id"
        ).fetchall()
        rows = conn.execute("SELECT name, tab, leaf FROM sessions").fetchall()
        saved = conn.execute("SELECT name, field, data FROM leaf_bytes").fetchall()
    finally:
        conn.execute("COMMIT")
    texts: dict[str, object] = {}
    tab_of: dict[str, object] = {}
    for name, tab, text in rows:
        if not isinstance(name, str) or type(tab) is not int:
            raise _NotSure
        texts[name], tab_of[name] = text, tab
    order: list[str] = []
    try:
        shape(windows, tabs, tab_of, order.append, lambda *_: None)
    except ValueError:
        raise _NotSure from None
    by_name: dict[str, list[tuple[object, object, object]]] = {}
    for row in saved:
        by_name.setdefault(row[0], []).append(row)
    return [_filled(_leaf(name, texts[name]), by_name.get(name, ())) for name in order]


def _read_some(
    conn: sqlite3.Connection, names: Iterable[str], refs: Iterable[Key], prefix: str | None = None
) -> list[SessionLeaf]:
    """As ``ArrangementStore.sessions(names, refs)``, with the bytes fields
    as ``ArrangementStore.find`` gives them (and first the sessions whose
    names begin with ``prefix``)."""
    conn.execute("BEGIN")
    try:
        _check(conn)
        if prefix is not None:
            names = [*names_beginning(conn, prefix), *names]
        found = named_or_referred(conn, names, refs, _leaf)
        for leaf in found.values():
            rows = conn.execute(
                "SELECT name, field, data FROM leaf_bytes WHERE name = ?", (leaf.name,)
            ).fetchall()
            _filled(leaf, rows)
    finally:
        conn.execute("COMMIT")
    return list(found.values())


def _connect(state: Path) -> sqlite3.Connection | None:
    """A connection to the store in ``state``, if a file that starts as
    SQLite is there, in a dir that passes ``check_private_dir``; else None
    (missing, empty, not SQLite, a dir the checks refuse: the store's, which
    says why)."""
    path = os.path.join(state, FILE_NAME)
    try:
        check_private_dir(state)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, MultiserverError):
        return None
    try:
        with open(fd, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError:  # a directory in the file's place (EISDIR), a read that fails
        return None
    if head != SQLITE_MAGIC:
        return None
    try:
        return sqlite3.connect(path, timeout=READ_TIMEOUT, isolation_level=None)
    except sqlite3.Error:
        return None


def _as_json(twin: Any) -> Any:
    """A twin (a leaf, a ref) as the store's converter writes it: its
    fields in order, records nested; the bytes fields live elsewhere."""
    if not hasattr(type(twin), "__slots__"):
        return twin
    return {
        name: _as_json(getattr(twin, name))
        for name in type(twin).__slots__
        if name not in BYTES_FIELDS
    }


def add_saved(state: Path, leaf: SessionLeaf, window: str = "main") -> bool:
    """Add ``leaf`` (a twin, with no bytes fields) as a new tab at the end of
    ``window`` (made at the end if missing), as ``add_session`` does, in one
    write transaction that reads and writes that session's rows only.
    False, with nothing written, when the whole store must do it: a name
    taken, or a file ``read_saved`` would not be sure of."""
    if leaf.scrollback is not None or leaf.notice is not None:
        return False
    conn = _connect(state)
    if conn is None:
        return False
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None or row[0] != SCHEMA_VERSION:
                raise _NotSure
            check_leaf_name(leaf.name)
            check_leaf_host(leaf.name, leaf.host)
            # As the store's converter writes it: ASCII, surrogates escaped.
            text = json.dumps(_as_json(leaf), separators=(",", ":"))
            ref = leaf.ref
            refs = (
                (None,) * 3
                if ref is None
                else ref_columns(ref.socket, ref.instance_id, ref.child_id)
            )
            if not add_tab(conn, leaf.name, text, refs, window):
                raise _NotSure  # taken
            conn.execute("DELETE FROM leaf_bytes WHERE name = ?", (leaf.name,))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return True
    except (_NotSure, ValueError, sqlite3.Error):
        return False
    finally:
        conn.close()


def read_saved(
    state: Path,
    *,
    names: Iterable[str] | None = None,
    refs: Iterable[Key] | None = None,
) -> list[SessionLeaf] | None:
    """The saved sessions in the state dir ``state`` (``[]`` when no store
    is there yet), in the arrangement's order; None when the whole store
    must be opened to tell. With ``names`` or ``refs``, only the sessions
    called one of ``names`` (in that order), then those whose ref names
    one of the children ``refs`` (each as ``ref_key`` gives it), each once,
    reading their rows only: ``ArrangementStore.sessions``, with the bytes
    fields ``ArrangementStore.find`` gives."""
    if not os.path.lexists(os.path.join(state, FILE_NAME)):
        return []
    conn = _connect(state)
    if conn is None:
        return None  # empty, cut short, not SQLite, not ours to open: the store says
    try:
        if names is None and refs is None:
            return _read_all(conn)
        return _read_some(conn, list(names or ()), list(refs or ()))
    except (_NotSure, sqlite3.Error):
        return None
    finally:
        conn.close()


def read_about(state: Path, prefix: str, name: str) -> tuple[list[SessionLeaf], list[str]] | None:
    """What a command about the one session ``name`` needs of the saved
    ones, on one connection, reading no other session's row: the sessions
    whose names begin with ``prefix`` and the other hosts' sessions called
    ``name`` there (``HOST:NAME``), with their bytes fields; and the daemon
    sockets this host's sessions refer to (normalised, from the ref columns
    alone). ``([], [])`` when no store is there yet; None when the whole
    store must be opened to tell."""
    if not os.path.lexists(os.path.join(state, FILE_NAME)):
        return [], []
    conn = _connect(state)
    if conn is None:
        return None
    try:
        conn.execute("BEGIN")
        try:
            _check(conn)
            there = [n for n in other_hosts_names(conn) if n.partition(":")[2] == name]
            sockets = ref_sockets(conn)
        finally:
            conn.execute("COMMIT")
        return _read_some(conn, there, [], prefix), sockets
    except (_NotSure, sqlite3.Error):
        return None
    finally:
        conn.close()
