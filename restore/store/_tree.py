"""The shape of the saved arrangement as the file keeps it (schema version
2, ``_schema``): windows, tabs in them, and each tab's split tree as JSON
whose leaves name their sessions. Read and checked here, without attrs or
cattrs, for the whole store (``_rows``) and its light read (``_outline``)
alike, so both take the same files and refuse the same ones; and the
statements both run on those rows (a session added as a new tab, the
sessions that refer to a child), so both write and find the same rows.

A tab's ``root`` is ``{"kind": "session", "name": N}`` or ``{"kind":
"split", "vertical": bool, "children": [...], "sizes": [number, ...] |
null}``; unknown keys are ignored, as everywhere in saved state.
"""

from __future__ import annotations

import json
import re

from restore.store._rules import child_key, exact, from_column, ref_columns, to_column

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any, TypeVar

    _N = TypeVar("_N")
    _L = TypeVar("_L")

_as_float = exact(float)
# The root of most tabs, one session, as ``root_text`` writes it: read
# without the JSON parser (a name with no quote, backslash or control
# character is the same text in JSON and out).
_ONE_SESSION = re.compile(r'\{"kind":"session","name":"([^"\\\x00-\x1f]*)"\}')


# A session's row: its name, tab, leaf (JSON) and ref columns.
INSERT_SESSION = (
    "INSERT INTO sessions (name, tab, leaf, ref_socket, ref_instance, ref_child)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)


class _Misplaced(ValueError):
    """A session named where the rows do not put it: said as it is."""


def session_node(name: str) -> dict[str, Any]:
    """A leaf of a tab's root: the session it names."""
    return {"kind": "session", "name": name}


def root_text(node: Any) -> str:
    """A root (JSON-ready: ``session_node`` leaves) as the file keeps it.
    ASCII: a name is, and the rest is ours."""
    return json.dumps(node, separators=(",", ":"))


def parse_root(
    text: object,
    session: Callable[[str], _N],
    split: Callable[[bool, list[_N], list[float] | None], _N],
) -> _N:
    """A tab's root from its JSON text, built bottom-up with ``session``
    (a name) and ``split``; ValueError (one line) if it is not one."""
    if not isinstance(text, str):
        raise ValueError(f"is {type(text).__name__}, not JSON text")
    one = _ONE_SESSION.fullmatch(text)
    if one is not None:
        return session(one[1])
    try:
        node = json.loads(text)
        return _node(node, session, split)
    except RecursionError:
        raise ValueError("is nested too deep") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON ({exc})") from None


def _node(
    node: Any,
    session: Callable[[str], _N],
    split: Callable[[bool, list[_N], list[float] | None], _N],
) -> _N:
    if type(node) is not dict:
        raise ValueError(f"has a node that is {type(node).__name__}, not an object")
    kind = node.get("kind")
    if kind == "session":
        name = node.get("name")
        if not isinstance(name, str):
            raise ValueError("has a session node without a name")
        return session(name)
    if kind != "split":
        raise ValueError(f"has a node of unknown kind {kind!r}")
    vertical, children, sizes = node.get("vertical"), node.get("children"), node.get("sizes")
    if type(vertical) is not bool:
        raise ValueError("has a split whose 'vertical' is not true or false")
    if type(children) is not list or not children:
        raise ValueError("has a split without children")
    if sizes is not None:
        if type(sizes) is not list or len(sizes) != len(children):
            raise ValueError("has a split whose sizes do not fit its children")
        try:
            sizes = [_as_float(s) for s in sizes]
        except TypeError as exc:
            raise ValueError(f"has a split with a size that is not a number ({exc})") from None
    return split(vertical, [_node(c, session, split) for c in children], sizes)


def shape(
    windows: Sequence[tuple[object, object]],
    tabs: Sequence[tuple[object, object, object, object]],
    tab_of: Mapping[str, object],
    session: Callable[[str], _N],
    split: Callable[[bool, list[_N], list[float] | None], _N],
) -> list[tuple[int, str, list[tuple[int, str, _N]]]]:
    """The arrangement from its rows: ``windows`` (id, name) in order,
    ``tabs`` (id, window, title, root) in order within each window (names
    and titles as ``to_column`` keeps them), and ``tab_of``, each saved
    session's tab. Returns [(window id, name, [(tab id, title, root)])];
    ValueError (one line) unless every tab is in a window and every
    session is named once, by its own tab's root."""
    by_window: dict[object, list[tuple[int, str, _N]]] = {}
    order: list[tuple[int, str, list[tuple[int, str, _N]]]] = []
    for window_id, column in windows:
        name = from_column(column)
        if name is None or type(window_id) is not int:
            raise ValueError(f"window {window_id!r} has a garbled row")
        order.append((window_id, name, by_window.setdefault(window_id, [])))
    named: set[str] = set()
    for tab_id, window_id, column, text in tabs:
        title = from_column(column)
        if title is None or type(tab_id) is not int:
            raise ValueError(f"tab {tab_id!r} has a garbled row")
        if window_id not in by_window:
            raise ValueError(f"tab {tab_id} is in no window")

        def one(name: str, tab_id: int = tab_id) -> _N:
            if tab_of.get(name, None) != tab_id:
                where = "is not saved" if name not in tab_of else "is saved in another tab"
                raise _Misplaced(f"tab {tab_id} names session {name!r}, which {where}")
            if name in named:
                raise _Misplaced(f"two sessions are named {name!r}")
            named.add(name)
            return session(name)

        try:
            root = parse_root(text, one, split)
        except _Misplaced:
            raise
        except ValueError as exc:
            raise ValueError(f"the layout of tab {tab_id} {exc}") from None
        by_window[window_id].append((tab_id, title, root))
    if len(named) != len(tab_of):
        lost = sorted(set(tab_of) - named)
        raise ValueError(f"session {lost[0]!r} is in no tab's layout")
    return order


def add_tab(
    conn: sqlite3.Connection,
    name: str,
    leaf: str,
    refs: tuple[object, object, object],
    window: str,
) -> bool:
    """The session ``name`` (its row: ``leaf``, the JSON of its leaf, and
    ``refs``, its ref columns) as a new tab at the end of the first window
    called ``window``, made at the end if there is none:
    ``Arrangement.with_session``, on the rows. False, with nothing
    written, if the name is taken."""
    if conn.execute("SELECT 1 FROM sessions WHERE name = ?", (name,)).fetchone() is not None:
        return False
    column = to_column(window)
    row = conn.execute(
        "SELECT id FROM windows WHERE name = ? ORDER BY id LIMIT 1", (column,)
    ).fetchone()
    if row is not None:
        window_id = row[0]
    else:
        window_id = conn.execute("INSERT INTO windows (name) VALUES (?)", (column,)).lastrowid
    tab = conn.execute(
        "INSERT INTO tabs (window, title, root) VALUES (?, '', ?)",
        (window_id, root_text(session_node(name))),
    ).lastrowid
    conn.execute(INSERT_SESSION, (name, tab, leaf, *refs))
    return True


def referring(conn: sqlite3.Connection, key: tuple[str, str, int]) -> list[tuple[object, object]]:
    """(name, leaf JSON) of the sessions whose ref columns name the child
    ``key`` (as ``ref_key`` gives it), by the index; the caller checks
    each leaf's own ref."""
    socket, instance, child = ref_columns(*key)
    rows = conn.execute(
        "SELECT name, leaf FROM sessions"
        " WHERE ref_instance = ? AND ref_child = ? AND ref_socket = ?",
        (instance, child, socket),
    )
    return rows.fetchall()


def named_or_referred(
    conn: sqlite3.Connection,
    names: Iterable[str],
    refs: Iterable[tuple[str, str, int]],
    leaf: Callable[[object, object], _L],
) -> dict[str, _L]:
    """The sessions called one of ``names`` (in that order), then those
    whose ref names one of the children ``refs`` (as ``ref_key`` gives
    them; checked on each leaf's own ref, the columns only find them),
    each once, by name; ``leaf`` reads a row (its name, its leaf's JSON)
    as the store or its light read does."""
    found: dict[str, _L] = {}
    for name in names:
        if name in found:
            continue
        row = conn.execute(
            "SELECT leaf FROM sessions WHERE name = ?", (to_column(name),)
        ).fetchone()
        if row is not None:
            found[name] = leaf(name, row[0])
    for key in refs:
        want = child_key(*key)
        for row_name, text in referring(conn, key):
            got: Any = leaf(row_name, text)  # a SessionLeaf, or its light twin
            ref = got.ref
            if ref is not None and child_key(ref.socket, ref.instance_id, ref.child_id) == want:
                found.setdefault(got.name, got)
    return found


def names_beginning(conn: sqlite3.Connection, prefix: str) -> list[str]:
    """The names of the sessions that begin with ``prefix``, by the
    primary key's order (a range of it: session names are ASCII below
    U+007F, ``NAME_RE``, or ``HOST:NAME``)."""
    rows = conn.execute(
        "SELECT name FROM sessions WHERE name >= ? AND name < ?", (prefix, prefix + "\x7f")
    )
    return [name for (name,) in rows if isinstance(name, str) and name.startswith(prefix)]


def other_hosts_names(conn: sqlite3.Connection) -> list[str]:
    """The names of the sessions of other hosts (``HOST:NAME``): names
    alone, no leaf read."""
    rows = conn.execute("SELECT name FROM sessions WHERE instr(name, ':') > 0")
    return [name for (name,) in rows if isinstance(name, str)]


def ref_sockets(conn: sqlite3.Connection) -> list[str]:
    """The daemon sockets this host's sessions refer to (normalised, as
    ``ref_key`` gives them), each once: ref columns alone, no leaf read."""
    rows = conn.execute(
        "SELECT DISTINCT ref_socket FROM sessions"
        " WHERE ref_socket IS NOT NULL AND instr(name, ':') = 0"
    )
    found = (from_column(socket) for (socket,) in rows)
    return [socket for socket in found if socket is not None]
