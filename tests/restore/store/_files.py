"""Arrangement files written by hand, for the store's tests: a version-1
file as a multiserver of that version wrote it (its own SQL, its one JSON
document), and version-2 rows made from such a document (to put fields,
shapes and damage in them that the store itself would never write)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import attrs

from restore import Arrangement, PendingClose, SessionLeaf, Split

# Version 1's tables, as its _schema created them.
V1_CREATE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE arrangement (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL)",
    "CREATE TABLE leaf_bytes (name TEXT NOT NULL, field TEXT NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (name, field))",
    "CREATE TABLE pending_closes (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL, ref TEXT, staged_at REAL NOT NULL)",
)
BYTES = ("scrollback", "notice")


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection, to write rows by hand (autocommit)."""
    return sqlite3.connect(path, isolation_level=None)


def v1_node(node: Split | SessionLeaf) -> dict[str, Any]:
    """A node of the tree as version 1 wrote it in its document."""
    if isinstance(node, SessionLeaf):
        fields = attrs.asdict(node, recurse=True)
        return {"kind": "session", **{k: v for k, v in fields.items() if k not in BYTES}}
    return {
        "kind": "split",
        "vertical": node.vertical,
        "children": [v1_node(c) for c in node.children],
        "sizes": node.sizes,
    }


def v1_doc(arr: Arrangement) -> dict[str, Any]:
    """The whole arrangement as version 1's one document."""
    return {
        "windows": [
            {"name": w.name, "tabs": [{"root": v1_node(t.root), "title": t.title} for t in w.tabs]}
            for w in arr.windows
        ]
    }


def write_v1(path: Path, arr: Arrangement, pending: list[PendingClose] = ()) -> None:  # type: ignore[assignment]
    """A version-1 file at ``path`` holding ``arr`` (bytes fields in
    leaf_bytes) and ``pending``, as version 1 wrote them."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    conn = raw(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        for stmt in V1_CREATE:
            conn.execute(stmt)
        conn.execute("INSERT INTO meta VALUES ('schema_version', 1)")
        doc = json.dumps(v1_doc(arr), separators=(",", ":"))
        conn.execute("INSERT INTO arrangement VALUES (1, ?)", (doc,))
        for leaf in arr.leaves():
            for field in BYTES:
                data = getattr(leaf, field)
                if data is not None:
                    conn.execute(
                        "INSERT INTO leaf_bytes VALUES (?, ?, ?)", (leaf.name, field, data)
                    )
        for p in pending:
            ref = None if p.ref is None else json.dumps(attrs.asdict(p.ref))
            conn.execute(
                "INSERT INTO pending_closes (name, ref, staged_at) VALUES (?, ?, ?)",
                (p.name, ref, p.staged_at),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def set_doc(path: Path, doc: object) -> None:
    """Replace the windows, tabs and sessions of the version-2 file at
    ``path`` with rows made by hand from ``doc``, a document as version 1
    kept it (or its JSON text): each session node's fields, unknown ones
    too, become its row; the tree, its names; a window's or tab's unknown
    fields have nowhere to go. A node the rows cannot take (no name, not
    an object) goes into its tab's root as it is."""
    parsed = json.loads(doc) if isinstance(doc, str) else doc
    conn = raw(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for table in ("windows", "tabs", "sessions"):
            conn.execute(f"DELETE FROM {table}")
        for w in parsed.get("windows", []):
            window = conn.execute("INSERT INTO windows (name) VALUES (?)", (w["name"],)).lastrowid
            for t in w.get("tabs", []):
                sessions: list[dict[str, Any]] = []
                root = _names(t.get("root"), sessions)
                tab = conn.execute(
                    "INSERT INTO tabs (window, title, root) VALUES (?, ?, ?)",
                    (window, t.get("title", ""), json.dumps(root)),
                ).lastrowid
                for node in sessions:
                    put_session(conn, node, tab)
        conn.execute("COMMIT")
    finally:
        conn.close()


def put_session(conn: sqlite3.Connection, node: dict[str, Any], tab: int | None) -> None:
    """A session row holding ``node`` (its ref columns from its ref)."""
    ref = node.get("ref") if isinstance(node.get("ref"), dict) else None
    columns = (None, None, None)
    if ref is not None:
        columns = (os.path.normpath(ref["socket"]), ref["instance_id"], ref["child_id"])
    leaf = {k: v for k, v in node.items() if k != "kind"}
    conn.execute(
        "INSERT INTO sessions (name, tab, leaf, ref_socket, ref_instance, ref_child)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (node["name"], tab, json.dumps(leaf), *columns),
    )


def _names(node: Any, sessions: list[dict[str, Any]]) -> Any:
    if isinstance(node, dict) and node.get("kind") == "session" and "name" in node:
        sessions.append(node)
        return {"kind": "session", "name": node["name"]}
    if isinstance(node, dict) and isinstance(node.get("children"), list):
        return {**node, "children": [_names(c, sessions) for c in node["children"]]}
    return node
