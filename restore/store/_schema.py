"""The format of the arrangement file: its tables, the JSON in them with
the store's one cattrs converter for it, and the SQL that reads and writes
the rows other than the arrangement's own (``_rows``: windows, tabs,
sessions). ``_file`` creates, checks and migrates the file. They raise
``StoreCorrupt`` for what is not what we wrote and let sqlite3 and OS
errors through to the store's one translation boundary (``_errors``).

Schema, version 2::

    meta(key TEXT PRIMARY KEY, value)          -- ('schema_version', 2)
    windows(id INTEGER PRIMARY KEY, name TEXT NOT NULL)
    tabs(id INTEGER PRIMARY KEY, window INTEGER NOT NULL, title TEXT NOT NULL,
         root TEXT NOT NULL)
    sessions(name TEXT PRIMARY KEY, tab INTEGER NOT NULL, leaf TEXT NOT NULL,
             ref_socket TEXT, ref_instance TEXT, ref_child INTEGER)
    leaf_bytes(name TEXT NOT NULL, field TEXT NOT NULL, data BLOB NOT NULL,
               PRIMARY KEY (name, field))
    pending_closes(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
                   ref TEXT, staged_at REAL NOT NULL)
    INDEX windows_name ON windows(name)
    INDEX tabs_window ON tabs(window)
    INDEX sessions_tab ON sessions(tab)
    INDEX sessions_ref ON sessions(ref_instance, ref_child)

The arrangement is kept by session, so that a change to one session reads
and writes a few rows however many are saved. Its order is the rows':
windows by ``id``, a window's tabs by ``id``, and in each tab the split tree
``root`` depth first. ``root`` is the tree as JSON whose leaves only name
their sessions (``{"kind": "session", "name": N}``; ``_tree`` reads it), so
a session's own row changes without its tab's. ``sessions.leaf`` is the
``SessionLeaf`` as this converter writes it, without its bytes fields;
``ref_socket`` (normalised as ``ref_key`` gives it), ``ref_instance`` and
``ref_child`` are its ``ref``, copied out to be looked up by
(``sessions_ref``): a session is found by name or by the child it refers
to without reading the others. ``tab`` is the tab whose ``root`` names
it. A new window or tab takes the next ``id``, so it comes last.

JSON is written with ``ensure_ascii``: a path or argv decoded with
surrogateescape holds lone surrogates, which SQLite's UTF-8 text cannot
carry, and ``\\udcXX`` escapes can. A column that holds such a text itself
(a window's name, a tab's title, a ref's socket) holds it as the bytes of
its UTF-8 with surrogatepass, a BLOB (``_rules.to_column``).

A leaf's bytes fields (``scrollback``, ``notice``) live in ``leaf_bytes``,
one BLOB per (session name, field): each is up to 256 KiB a session, against
a few hundred bytes of everything else, and most changes do not touch them.
``pending_closes.ref`` is a ``RestorationRef`` as JSON (NULL for a session
that never had a child).

Unknown JSON fields, tables and columns are ignored at every version;
missing optional fields take their defaults.

Version 1 kept the whole arrangement as one JSON document, in
``arrangement(id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL)``
(nodes of the tree tagged ``"kind": "split"`` or ``"session"``, leaves
whole): every change read, structured and rewrote all of it. A version-1
file is migrated when opened, in one transaction (``_file._MIGRATIONS``),
and its ``arrangement`` table dropped: a multiserver that knows only
version 1 then finds a file newer than it knows, which it reads as far as
it can and never writes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.strategies import configure_tagged_union

from restore.store._errors import StoreCorrupt
from restore.store._model import Arrangement, RestorationRef, SessionLeaf, Split
from restore.store._rules import BYTES_FIELDS as _BYTES_FIELDS, exact

_T = TypeVar("_T")

TABLES = ("meta", "windows", "tabs", "sessions", "leaf_bytes", "pending_closes")
CREATE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE leaf_bytes (name TEXT NOT NULL, field TEXT NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (name, field))",
    "CREATE TABLE pending_closes (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL, ref TEXT, staged_at REAL NOT NULL)",
)
# What version 2 added (and the migration from version 1 makes).
CREATE_ROWS = (
    "CREATE TABLE windows (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
    "CREATE TABLE tabs (id INTEGER PRIMARY KEY, window INTEGER NOT NULL,"
    " title TEXT NOT NULL, root TEXT NOT NULL)",
    "CREATE TABLE sessions (name TEXT PRIMARY KEY, tab INTEGER NOT NULL, leaf TEXT NOT NULL,"
    " ref_socket TEXT, ref_instance TEXT, ref_child INTEGER)",
    "CREATE INDEX windows_name ON windows (name)",
    "CREATE INDEX tabs_window ON tabs (window)",
    "CREATE INDEX sessions_tab ON sessions (tab)",
    "CREATE INDEX sessions_ref ON sessions (ref_instance, ref_child)",
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


# --- version 1 -----------------------------------------------------------------------------


def read_v1_document(conn: sqlite3.Connection) -> Arrangement:
    """The arrangement of a version-1 file (its one document), for the
    migration and for salvage."""
    row = conn.execute("SELECT doc FROM arrangement WHERE id = 1").fetchone()
    if row is None:
        raise StoreCorrupt("the arrangement row is missing")
    return _structure(row[0], Arrangement, "the arrangement")


# --- bytes fields --------------------------------------------------------------------------


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
