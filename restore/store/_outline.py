"""The saved sessions, read lightly: the leaves of the arrangement with
their bytes fields, from ``sqlite3`` and ``json`` alone, as plain twins of
``SessionLeaf`` (``_light_model``, generated), without the converter, attrs
or cattrs. A command that only looks names, refs and states up (``ls``,
``peek``, ``attach``) starts in a fraction of the time. ``new`` adds its
session the same way (``add_saved``: ``ArrangementStore.add_session``'s
change, on the document as JSON), held to the store by a property test.

It reads only what it is sure of, and says None for anything else: no
file there is no session saved; a file of another schema version, one with
closes pending, a document or row it does not expect, or any error of
SQLite is the whole store's to open (``ArrangementStore``), which migrates,
finishes, quarantines or says what is wrong. What it returns is what
``ArrangementStore.load().leaves()`` returns, field for field
(``tests/restore/store/test_outline.py``): the same rules for values
(``_schema``'s exact types, unknown fields ignored), names (``_rules``),
duplicates and bytes (cut to ``SCROLLBACK_LIMIT`` as the model cuts them).
"""

from __future__ import annotations

import json
import os
import sqlite3

from multiserver import MultiserverError, check_private_dir, twin_structurers
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
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any

    from restore.store._model import SessionLeaf

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


def _nodes(doc: Any) -> Iterator[dict[str, Any]]:
    """The session nodes of the document, in ``Arrangement.leaves`` order:
    windows, then tabs, then the split tree depth first."""
    if type(doc) is not dict or type(doc.get("windows", [])) is not list:
        raise _NotSure
    for window in doc.get("windows", []):
        if type(window) is not dict or type(window.get("tabs")) is not list:
            raise _NotSure
        if not isinstance(window.get("name"), str):
            raise _NotSure
        for tab in window["tabs"]:
            if type(tab) is not dict or not isinstance(tab.get("title", ""), str):
                raise _NotSure
            yield from _walk(tab.get("root"))


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if type(node) is not dict:
        raise _NotSure
    if node.get("kind") == "session":
        yield node
        return
    children, sizes = node.get("children"), node.get("sizes")
    if node.get("kind") != "split" or type(node.get("vertical")) is not bool:
        raise _NotSure
    if type(children) is not list or not children:
        raise _NotSure
    if sizes is not None and (
        type(sizes) is not list
        or len(sizes) != len(children)
        or not all(type(s) in (int, float) for s in sizes)
    ):
        raise _NotSure
    for child in children:
        yield from _walk(child)


def _leaf(node: dict[str, Any], saved: dict[str, dict[str, bytes]]) -> SessionLeaf:
    fields = {k: v for k, v in node.items() if k not in BYTES_FIELDS and k != "kind"}
    try:
        leaf = _LEAF(fields)
        check_leaf_name(leaf.name)
        check_leaf_host(leaf.name, leaf.host)
    except Exception:
        raise _NotSure from None
    for field, data in saved.get(leaf.name, {}).items():
        setattr(leaf, field, bounded_scrollback(data))
    return leaf  # type: ignore[no-any-return]


def _read(conn: sqlite3.Connection) -> list[SessionLeaf]:
    conn.execute("BEGIN")  # one read transaction: one committed state
    try:
        parsed = _document(conn)
        if conn.execute("SELECT 1 FROM pending_closes LIMIT 1").fetchone() is not None:
            raise _NotSure
        rows = conn.execute("SELECT name, field, data FROM leaf_bytes").fetchall()
    finally:
        conn.execute("COMMIT")
    saved: dict[str, dict[str, bytes]] = {}
    for name, field, data in rows:
        # As the whole store reads them: rows it does not know are skipped.
        if isinstance(name, str) and field in BYTES_FIELDS and isinstance(data, bytes):
            saved.setdefault(name, {})[field] = data
    leaves = [_leaf(node, saved) for node in _nodes(parsed)]
    if len({leaf.name for leaf in leaves}) != len(leaves):
        raise _NotSure  # two sessions of one name: the store says so
    return leaves


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
    with open(fd, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        return None
    try:
        return sqlite3.connect(path, timeout=READ_TIMEOUT, isolation_level=None)
    except sqlite3.Error:
        return None


def _document(conn: sqlite3.Connection) -> Any:
    """The document, parsed, in a transaction the caller began."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or row[0] != SCHEMA_VERSION:
        raise _NotSure
    doc = conn.execute("SELECT doc FROM arrangement WHERE id = 1").fetchone()
    if doc is None or type(doc[0]) is not str:
        raise _NotSure
    try:
        return json.loads(doc[0])
    except (ValueError, RecursionError):
        raise _NotSure from None


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
    write transaction. False, with nothing written, when the whole store
    must do it: a name taken, or anything ``read_saved`` is not sure of."""
    if leaf.scrollback is not None or leaf.notice is not None:
        return False
    conn = _connect(state)
    if conn is None:
        return False
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            doc = _document(conn)
            names = [_leaf(node, {}).name for node in _nodes(doc)]
            if leaf.name in names or len(set(names)) != len(names):
                raise _NotSure
            check_leaf_name(leaf.name)
            check_leaf_host(leaf.name, leaf.host)
            tab = {"root": {**_as_json(leaf), "kind": "session"}, "title": ""}
            windows = doc.setdefault("windows", [])
            target = next((w for w in windows if w["name"] == window), None)
            if target is None:
                windows.append({"name": window, "tabs": [tab]})
            else:
                target["tabs"].append(tab)
            # As the store's converter writes it: ASCII, surrogates escaped.
            text = json.dumps(doc, separators=(",", ":"))
            conn.execute("UPDATE arrangement SET doc = ? WHERE id = 1", (text,))
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


def read_saved(state: Path) -> list[SessionLeaf] | None:
    """The saved sessions in the state dir ``state`` (``[]`` when no store
    is there yet); None when the whole store must be opened to tell."""
    if not os.path.lexists(os.path.join(state, FILE_NAME)):
        return []
    conn = _connect(state)
    if conn is None:
        return None  # empty, cut short, not SQLite, not ours to open: the store says
    try:
        return _read(conn)
    except (_NotSure, sqlite3.Error):
        return None
    finally:
        conn.close()
