"""The rules of a saved session and of the file that keeps it, apart from
the attrs model and the converter (``_model`` and ``_schema`` read them
from here), so that the light read of the store (``_outline``) holds a
file to the same rules without attrs or cattrs."""

from __future__ import annotations

import re

from multiserver import KEPT_OUTPUT, NAME_RE, safe_start

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

FILE_NAME = "arrangement.sqlite3"
SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
# The bytes fields of SessionLeaf, kept in leaf_bytes rather than in the document.
BYTES_FIELDS = ("scrollback", "notice")
# What a restore replays of a session: what its output file keeps.
SCROLLBACK_LIMIT = KEPT_OUTPUT


def bounded_scrollback(data: bytes) -> bytes:
    """The newest ``SCROLLBACK_LIMIT`` bytes of ``data`` at most, starting at a
    boundary where replay cannot land inside an escape or UTF-8 sequence."""
    if len(data) <= SCROLLBACK_LIMIT:
        return bytes(data)
    return bytes(data[safe_start(data, len(data) - SCROLLBACK_LIMIT) :])


# A host's name, as ``multiserver host add`` takes it (the part before ":").
HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def exact(kind: type) -> Callable[[Any], Any]:
    """The store's check of a JSON value: that type exactly, an int taken
    for a float, never a bool for a number. Not the wire codec's checks:
    saved state must take back the lone surrogates that a
    surrogateescape-decoded path or argv holds."""

    def check(value: Any) -> Any:
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return check


def check_session_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a valid session name."""
    # fullmatch: NAME_RE ends in "$", which a plain match lets pass before a
    # trailing newline.
    if not NAME_RE.fullmatch(name):
        raise ValueError(f"bad session name {name!r}")


def check_leaf_name(value: str) -> None:
    """A local session's name, or ``HOST:NAME`` for one on another host."""
    host, sep, name = value.rpartition(":")
    check_session_name(name)
    if sep and not HOST_RE.fullmatch(host):
        raise ValueError(f"bad host in session name {value!r}")


def check_leaf_host(name: str, host: str | None) -> None:
    """A leaf named ``HOST:NAME`` is on ``host`` HOST; one without, on none."""
    if (name.rpartition(":")[0] or None) != host:
        raise ValueError(f"session {name!r} names host {host!r} otherwise")
