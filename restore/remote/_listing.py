"""What a host answers when asked for its sessions, defined once: the
listing its ``multiserver ls --json`` prints, which this side reads
(``restore.remote._answers``). Pure and light (no attrs, cattrs, trio or
typing): the host's ``ls`` writes with it, and ``ls`` starts in a few
milliseconds.

The listing is a JSON array of sessions (``ListedSession``), one object
each, as scripts have always read it; ``FIELDS`` says each field's JSON
type, and docs/remote.md ("What a host answers") shows the same table.
Each object says the version of its fields in ``schema``:

- ``SCHEMA`` (1) is what this code writes; an object without ``schema``
  is version 0, what multiserver printed before it had one (the same
  fields, but ``saved`` and the two ``waiting_`` counts may be missing: a
  host that old is still read).
- A change that an older reader could get wrong (a field removed, renamed,
  given another type or another meaning, a value a field never had) is a
  new version. A newer version is refused in one line (``ListingTooNew``):
  it is read by nobody who would misread it.
- A new field, where ignoring it reads the rest right, is no new version:
  a reader passes over fields it does not know. So an older multiserver
  reads a newer host's listing of the same version, and this one reads
  theirs.

``holders`` and ``watchers`` (how many clients hold a session, how many of
those only watch: protocol 9's sharing) came that way, in version 1: they
say more of what ``held`` says and change nothing of it (``held`` is still
"a client holds it", now one or more: what a restore or an adopter decides
on it, leaving a held session alone, is as right as before), so a reader
that passes over them reads every other field right, and no reader of
version 1 would misread a row that has them. A version 2 would only have
made every older multiserver refuse a newer host's whole listing for two
counts it can do without. A host from before them leaves them out
(``LATER``); they are read as what ``held`` says: one holder, none
watching, or none at all.

The reader is strict about what it does know: every field of the version
present, of its JSON type exactly (``"5"`` is not 5, ``true`` is not 1, no
``NaN``), a live session's own fields (``LIVE``) not null, ``holders``
agreeing with ``held``. Anything else is a ``ListingError``, one line
that names the row and the field.
"""

from __future__ import annotations

import json

from multiserver.internal import record

SCHEMA = 1
# Versions this code reads: 0 (no ``schema``) and 1.
OLDEST = 0


class ListingError(ValueError):
    """A listing that is not one: says where (row and field) in one line."""


class ListingTooNew(ListingError):
    """A listing of a version newer than this code reads."""


@record
class ListedSession:
    """One session of a host's listing. ``id`` null: a saved session with
    no program running (its live-only fields null too, ``LIVE``);
    ``host`` set: a session the host reaches on its own host of that name,
    not one of its own daemons'."""

    name: str
    id: int | None
    pid: int | None
    state: str  # one of STATES
    exit_code: int | None  # negative signal number when killed by a signal
    argv: tuple[str, ...]  # bytes that are not UTF-8 escaped (caf\xe9), as `ls` shows them
    cwd: str  # escaped likewise
    tty: str | None
    held: bool  # one client or more holds it
    # How many clients hold it (0: none; 1 or more: ``held``), and how many
    # of those only watch. Not written by a host before sharing (``LATER``).
    holders: int
    watchers: int
    buffered_bytes: int
    dropped_bytes: int
    started_at: float | None  # unix time
    exited_at: float | None
    linger: float | None  # seconds an exited session is kept
    socket: str | None  # its daemon's socket there
    daemon_instance: str | None
    saved: bool  # a saved session there refers to it
    waiting_bytes: int  # what it wrote since its last detach
    waiting_dropped_bytes: int
    detail: str | None = None  # a saved one: why it is as it is
    late_of: str | None = None  # whose late original it is
    host: str | None = None


STATES = ("running", "exited", "not running")

# Each field: its JSON type (the name the errors and docs use), and whether
# null is allowed. Every field is in every object, except those in
# OPTIONAL: absent when null (and so written).
FIELDS: dict[str, tuple[str, bool]] = {
    "name": ("string", False),
    "id": ("count", True),
    "pid": ("count", True),
    "state": ("state", False),
    "exit_code": ("integer", True),
    "argv": ("strings", False),
    "cwd": ("string", False),
    "tty": ("string", True),
    "held": ("boolean", False),
    "holders": ("count", False),
    "watchers": ("count", False),
    "buffered_bytes": ("count", False),
    "dropped_bytes": ("count", False),
    "started_at": ("number", True),
    "exited_at": ("number", True),
    "linger": ("number", True),
    "socket": ("string", True),
    "daemon_instance": ("string", True),
    "saved": ("boolean", False),
    "waiting_bytes": ("count", False),
    "waiting_dropped_bytes": ("count", False),
    "detail": ("string", False),
    "late_of": ("string", False),
    "host": ("string", False),
}
OPTIONAL = ("detail", "late_of", "host")
# Missing from some version-0 objects (an older host's), read as these.
SINCE_1 = {"saved": False, "waiting_bytes": 0, "waiting_dropped_bytes": 0}
# Added to version 1 after it was first written: a host from before them
# leaves them out, and they are read from ``held`` (``_later``).
LATER = ("holders", "watchers")
# Null only in a saved session's object (``id`` null): a live one has them.
LIVE = ("pid", "tty", "started_at", "socket", "daemon_instance")


def listing_json(rows: list[ListedSession]) -> list[dict[str, object]]:
    """The listing as JSON values: an object a row, ``schema`` first, the
    ``OPTIONAL`` fields only where set (``LATER``'s always)."""
    out = []
    for row in rows:
        obj: dict[str, object] = {"schema": SCHEMA}
        for name in FIELDS:
            value = getattr(row, name)
            if value is None and name in OPTIONAL:
                continue
            obj[name] = list(value) if name == "argv" else value
        out.append(obj)
    return out


def write_listing(rows: list[ListedSession], *, indent: int | None = None) -> str:
    """The listing as JSON text (one line, unless ``indent``)."""
    return json.dumps(listing_json(rows), indent=indent)


def read_listing(text: str | bytes) -> list[ListedSession]:
    """The listing in ``text``; ListingError if it is not JSON, or not one."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        shown = text[:60] if isinstance(text, str) else text[:60].decode(errors="replace")
        raise ListingError(f"ls --json is not JSON: {shown!r} ({exc})") from None
    return listing_from(value)


def listing_from(value: object) -> list[ListedSession]:
    """The listing in ``value`` (JSON already decoded: arrays as lists,
    objects as dicts); ListingError if it is not one."""
    if not isinstance(value, list):
        raise ListingError(f"ls --json is {_json_type(value)}, not an array of sessions")
    return [_row(i, obj) for i, obj in enumerate(value)]


def _row(i: int, obj: object) -> ListedSession:
    if not isinstance(obj, dict):
        raise ListingError(f"ls --json row {i} is {_json_type(obj)}, not an object")
    name = obj.get("name")
    where = f"ls --json row {i}" + (f" ({_shown(name)})" if isinstance(name, str) else "")
    version = obj.get("schema", 0)
    if type(version) is not int or version < 0:
        raise ListingError(f"{where}: schema is {_shown(version)}, not a version number")
    if version > SCHEMA:
        raise ListingTooNew(
            f"{where} is of schema {version}, newer than this multiserver reads"
            f" ({OLDEST} to {SCHEMA}): upgrade multiserver here"
        )
    values: dict[str, object] = {}
    for field, (kind, nullable) in FIELDS.items():
        if field not in obj:
            if field in OPTIONAL:
                continue
            if version == 0 and field in SINCE_1:
                values[field] = SINCE_1[field]
                continue
            if field in LATER:
                continue  # read from held, once that is read (``_later``)
            raise ListingError(f"{where}: no {field}")
        value = obj[field]
        if not (value is None and nullable) and not _is(kind, value):
            null = " or null" if nullable else ""
            raise ListingError(f"{where}: {field} is {_shown(value)}, not {_KINDS[kind]}{null}")
        values[field] = tuple(value) if field == "argv" else value
    if values["id"] is not None:
        for field in LIVE:
            if values[field] is None:
                raise ListingError(f"{where}: {field} is null, but a running session has one")
    for field in ("started_at", "exited_at", "linger"):
        if type(values[field]) is int:
            values[field] = float(values[field])  # type: ignore[arg-type]
    _later(where, values)
    return ListedSession(**values)  # type: ignore[arg-type]


def _later(where: str, values: dict[str, object]) -> None:
    """``holders`` and ``watchers`` of a row: as given, which must agree
    with ``held`` (holders 0 exactly when not held; watchers among the
    holders); left out by a host from before them, what ``held`` says: one
    holder (before sharing, a session had one at most) or none, none
    watching."""
    held = values["held"]
    holders = values.setdefault("holders", 1 if held else 0)
    watchers = values.setdefault("watchers", 0)
    assert type(holders) is int and type(watchers) is int
    if (holders > 0) != held:
        raise ListingError(f"{where}: holders is {holders}, but held is {_shown(held)}")
    if watchers > holders:
        raise ListingError(f"{where}: watchers is {watchers}, more than its {holders} holders")


_INFINITY = float("inf")
_KINDS = {
    "string": "a string",
    "strings": "an array of strings",
    "count": "a whole number (0 or more)",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "state": " or ".join(repr(s) for s in STATES),
}


def _is(kind: str, value: object) -> bool:
    """Whether ``value`` is of JSON type ``kind``, exactly."""
    if kind == "string":
        return type(value) is str and _unicode(value)
    if kind == "strings":
        return type(value) is list and all(type(v) is str and _unicode(v) for v in value)
    if kind == "count":
        return type(value) is int and value >= 0
    if kind == "integer":
        return type(value) is int
    if kind == "number":  # finite: a reader given NaN or Infinity by json.loads refuses them
        return type(value) is int or (type(value) is float and abs(value) < _INFINITY)
    if kind == "boolean":
        return type(value) is bool
    return value in STATES  # "state"


def _unicode(text: str) -> bool:
    """Not a lone surrogate (``"\\ud800"`` in JSON): it has no UTF-8 form,
    and printing it would fail far from here."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _json_type(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return _shown(value)


def _shown(value: object) -> str:
    """A JSON value as an error shows it: short, on one line."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else f"{text[:37]}..."
