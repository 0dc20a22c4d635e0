"""The saved arrangement as rows (``windows``, ``tabs``, ``sessions``;
``_schema`` has the format): read and written whole, and changed one
session at a time, touching only that session's rows and its tab's (and
window's, when it is made or left empty). Called inside the store's
transactions (``_store``); raise ``StoreCorrupt`` for rows that are not
what we wrote and let sqlite3 errors through.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from restore.store._errors import StoreCorrupt
from restore.store._model import (
    Arrangement,
    Node,
    SessionLeaf,
    Split,
    Tab,
    Window,
    _walk,
    _without,
)
from restore.store._rules import ref_columns, to_column
from restore.store._schema import _drop_bytes, _dump, _put_bytes, _structure
from restore.store._tree import (
    INSERT_SESSION,
    add_tab,
    named_or_referred,
    parse_root,
    root_text,
    session_node,
    shape,
)

Key = tuple[str, str, int]  # a child, as ref_key gives it

# Each session's row as last read, and what it structured to, by name. The
# model's values are immutable (frozen classes, never changed in place), so
# one can be handed out again while its row's text is the same: a restore
# loads the arrangement, then its sweep loads it again, and only the
# sessions that changed between are structured twice. A whole read keeps
# only the names it found, so this holds no more than the file does.
_seen: dict[str, tuple[str, SessionLeaf]] = {}


def _leaf(name: object, text: object) -> SessionLeaf:
    """The session row ``name``'s leaf (without its bytes fields)."""
    if not isinstance(name, str):
        raise StoreCorrupt(f"a session row is named {name!r}, not by text")
    hit = _seen.get(name)
    if hit is not None and type(text) is str and hit[0] == text:
        return hit[1]
    leaf = _structure(text, SessionLeaf, f"session {name!r}")
    if leaf.name != name:
        raise StoreCorrupt(f"the row of session {name!r} holds a session named {leaf.name!r}")
    if type(text) is str:
        _seen[name] = (text, leaf)
    return leaf


def _root(node: Node) -> dict[str, Any]:
    """A tab's root as the file keeps it: its leaves by name."""
    if isinstance(node, SessionLeaf):
        return session_node(node.name)
    return {
        "kind": "split",
        "vertical": node.vertical,
        "children": [_root(c) for c in node.children],
        "sizes": node.sizes,
    }


def _ref_columns(leaf: SessionLeaf) -> tuple[str | bytes | None, str | bytes | None, int | None]:
    ref = leaf.ref
    return (
        (None, None, None)
        if ref is None
        else ref_columns(ref.socket, ref.instance_id, ref.child_id)
    )


# --- whole -----------------------------------------------------------------------------------


@attrs.frozen
class Rows:
    """The arrangement as read, with where each part of it is."""

    arrangement: Arrangement  # without bytes fields
    tab_of: dict[str, int]  # each session's tab id
    ids: list[tuple[int, list[int]]]  # each window's id and its tabs' ids, in order


def read_rows(conn: sqlite3.Connection) -> Rows:
    """The whole arrangement (without bytes fields)."""
    windows = conn.execute("SELECT id, name FROM windows ORDER BY id").fetchall()
    tabs = conn.execute("SELECT id, window, title, root FROM tabs ORDER BY window, id").fetchall()
    texts: dict[str, object] = {}
    tab_of: dict[str, int] = {}
    for name, tab, text in conn.execute("SELECT name, tab, leaf FROM sessions"):
        if not isinstance(name, str) or type(tab) is not int:
            raise StoreCorrupt(f"session {name!r} has a garbled row")
        texts[name], tab_of[name] = text, tab
    try:
        order = shape(windows, tabs, tab_of, lambda name: _leaf(name, texts[name]), Split)
        arr = Arrangement(
            [Window(name, [Tab(root, title) for _t, title, root in ts]) for _w, name, ts in order]
        )
    except ValueError as exc:
        raise StoreCorrupt(f"the arrangement does not hold together: {exc}") from None
    for gone in _seen.keys() - tab_of.keys():
        _seen.pop(gone, None)
    ids = [(window, [tab for tab, _title, _root in ts]) for window, _name, ts in order]
    return Rows(arr, tab_of, ids)


def write_rows(conn: sqlite3.Connection, arr: Arrangement) -> None:
    """Rows for ``arr``'s windows, tabs and sessions, in tables that hold
    none of them. Bytes fields are the caller's (``leaf_bytes``)."""
    tab_of = _write_windows(conn, arr.windows)
    conn.executemany(
        INSERT_SESSION,
        ((leaf.name, tab_of[leaf.name], _dump(leaf), *_ref_columns(leaf)) for leaf in arr.leaves()),
    )


def _write_windows(conn: sqlite3.Connection, windows: Iterable[Window]) -> dict[str, int]:
    """New rows for ``windows`` and their tabs, after every one there is
    (a new id is the highest yet); returns each session's tab id."""
    tab_of: dict[str, int] = {}
    for w in windows:
        window = conn.execute(
            "INSERT INTO windows (name) VALUES (?)", (to_column(w.name),)
        ).lastrowid
        assert window is not None
        for t in w.tabs:
            tab_of.update(_write_tab(conn, window, t))
    return tab_of


def _write_tab(conn: sqlite3.Connection, window: int, t: Tab) -> dict[str, int]:
    tab = conn.execute(
        "INSERT INTO tabs (window, title, root) VALUES (?, ?, ?)",
        (window, to_column(t.title), root_text(_root(t.root))),
    ).lastrowid
    assert tab is not None
    return {leaf.name: tab for leaf in _walk(t.root)}


def clear_rows(conn: sqlite3.Connection) -> None:
    for table in ("windows", "tabs", "sessions"):
        conn.execute(f"DELETE FROM {table}")


def modify_rows(
    conn: sqlite3.Connection, change: Callable[[Arrangement], Arrangement]
) -> Arrangement:
    """Read, ``change``, write what changed: the rows of the sessions whose
    leaf or tab changed (or that came or went), and the windows and tabs
    that changed (``_write_layout``). Sessions added are saved with their
    bytes fields, sessions dropped lose theirs, sessions kept keep theirs."""
    rows = read_rows(conn)
    old = rows.arrangement
    new = change(old)
    if new is old:
        return old
    tab_of = _write_layout(conn, rows, new)
    was = {leaf.name: leaf for leaf in old.leaves()}
    for leaf in new.leaves():
        before = was.pop(leaf.name, None)
        tab = tab_of[leaf.name]
        if before is None:
            _insert(conn, leaf, tab)
            _put_bytes(conn, leaf)
        elif tab != rows.tab_of[leaf.name] or (before is not leaf and before != leaf):
            conn.execute(
                "UPDATE sessions SET tab = ?, leaf = ?, ref_socket = ?, ref_instance = ?,"
                " ref_child = ? WHERE name = ?",
                (tab, _dump(leaf), *_ref_columns(leaf), leaf.name),
            )
    for name in was:
        conn.execute("DELETE FROM sessions WHERE name = ?", (name,))
        _drop_bytes(conn, name)
    return new


def _write_layout(conn: sqlite3.Connection, rows: Rows, new: Arrangement) -> dict[str, int]:
    """``new``'s windows and tabs where they differ from ``rows``; returns
    each session's tab id. The windows that are as they were from the
    first on (by name) keep their rows, and so do the tabs that are as
    they were from the first of such a window on (title and tree); the
    rest are written anew, each after every row there is, so the order
    holds. A tab added at the end of a window, or a window at the end,
    is one row more; nothing changed is nothing written."""
    old = rows.arrangement
    kept = _same_start([w.name for w in old.windows], [w.name for w in new.windows])
    tab_of: dict[str, int] = {}
    for (window, tabs), was, now in zip(rows.ids, old.windows, new.windows[:kept], strict=False):
        same = _same_start(
            [(t.title, _root(t.root)) for t in was.tabs],
            [(t.title, _root(t.root)) for t in now.tabs],
        )
        for tab in tabs[same:]:
            conn.execute("DELETE FROM tabs WHERE id = ?", (tab,))
        for i, t in enumerate(now.tabs):
            if i < same:
                tab_of.update((leaf.name, tabs[i]) for leaf in _walk(t.root))
            else:
                tab_of.update(_write_tab(conn, window, t))
    for window, _tabs in rows.ids[kept:]:
        conn.execute("DELETE FROM tabs WHERE window = ?", (window,))
        conn.execute("DELETE FROM windows WHERE id = ?", (window,))
    tab_of.update(_write_windows(conn, new.windows[kept:]))
    return tab_of


def _same_start(old: list[Any], new: list[Any]) -> int:
    """How many items ``old`` and ``new`` have alike from the first on."""
    n = 0
    while n < min(len(old), len(new)) and old[n] == new[n]:
        n += 1
    return n


# --- one session -------------------------------------------------------------------------------


def find_row(conn: sqlite3.Connection, name: str) -> SessionLeaf | None:
    """The session ``name`` (without bytes fields), or None."""
    row = conn.execute("SELECT leaf FROM sessions WHERE name = ?", (to_column(name),)).fetchone()
    return None if row is None else _leaf(name, row[0])


def rows_named_or_referred(
    conn: sqlite3.Connection, names: Iterable[str], refs: Iterable[Key]
) -> list[SessionLeaf]:
    """The sessions of ``names`` (in that order), then those ``refs`` name
    (by the index; the pid is not compared), each once; names and refs no
    session has are left out."""
    return list(named_or_referred(conn, names, refs, _leaf).values())


def _insert(conn: sqlite3.Connection, leaf: SessionLeaf, tab: int) -> None:
    conn.execute(INSERT_SESSION, (leaf.name, tab, _dump(leaf), *_ref_columns(leaf)))


def add_row(conn: sqlite3.Connection, leaf: SessionLeaf, window: str) -> None:
    """``leaf`` as a new tab at the end of the first window called
    ``window`` (made at the end if there is none), as
    ``Arrangement.with_session``; ValueError if the name is taken. Bytes
    fields are the caller's."""
    if not add_tab(conn, leaf.name, _dump(leaf), _ref_columns(leaf), window):
        raise ValueError(f"a session named {leaf.name!r} exists already")


def update_row(conn: sqlite3.Connection, leaf: SessionLeaf) -> bool:
    """The row of ``leaf``'s name holds ``leaf`` now (in its place); False
    if there is none. Bytes fields are the caller's."""
    cur = conn.execute(
        "UPDATE sessions SET leaf = ?, ref_socket = ?, ref_instance = ?, ref_child = ?"
        " WHERE name = ?",
        (_dump(leaf), *_ref_columns(leaf), leaf.name),
    )
    return cur.rowcount > 0


def drop_row(conn: sqlite3.Connection, name: str) -> SessionLeaf:
    """Remove the session ``name`` (KeyError if none) from its tab's tree
    as ``Arrangement.without_session`` does: a split left with one child
    becomes that child; a tab left empty goes, and so does its window if
    that empties it. Returns the leaf as it was (without bytes fields).
    Bytes fields are the caller's."""
    row = conn.execute(
        "SELECT tab, leaf FROM sessions WHERE name = ?", (to_column(name),)
    ).fetchone()
    if row is None:
        raise KeyError(name)
    tab, text = row
    leaf = _leaf(name, text)
    where = conn.execute("SELECT window, root FROM tabs WHERE id = ?", (tab,)).fetchone()
    if where is None:
        raise StoreCorrupt(f"session {name!r} is in tab {tab!r}, which is not saved")
    window, old_root = where
    # The tab's other sessions, by the index: the tree is rebuilt with the
    # model's own leaves so the model's _without cuts it.
    mates = dict(conn.execute("SELECT name, leaf FROM sessions WHERE tab = ?", (tab,)).fetchall())

    def mate(n: str) -> SessionLeaf:
        if n not in mates:
            raise ValueError(f"names session {n!r}, which is not saved in it")
        return _leaf(n, mates[n])

    try:
        root = parse_root(old_root, mate, Split)
    except ValueError as exc:
        raise StoreCorrupt(f"the layout of tab {tab} {exc}") from None
    rest = _without(root, name)
    if rest is root:
        raise StoreCorrupt(f"session {name!r} is in tab {tab}, whose layout does not name it")
    if rest is not None:
        conn.execute("UPDATE tabs SET root = ? WHERE id = ?", (root_text(_root(rest)), tab))
    else:
        conn.execute("DELETE FROM tabs WHERE id = ?", (tab,))
        if (
            conn.execute("SELECT 1 FROM tabs WHERE window = ? LIMIT 1", (window,)).fetchone()
            is None
        ):
            conn.execute("DELETE FROM windows WHERE id = ?", (window,))
    conn.execute("DELETE FROM sessions WHERE name = ?", (name,))
    return leaf
