"""The rules of a saved session and of the file that keeps it, apart from
the attrs model and the converter (``_model`` and ``_schema`` read them
from here), so that the light read of the store (``_outline``) holds a
file to the same rules without attrs or cattrs."""

from __future__ import annotations

import os
import re

from multiserver.internal import KEPT_OUTPUT, NAME_RE, safe_start

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

FILE_NAME = "arrangement.sqlite3"
SCHEMA_VERSION = 2
SQLITE_MAGIC = b"SQLite format 3\x00"
# The bytes fields of SessionLeaf, kept in leaf_bytes rather than in the session's row.
BYTES_FIELDS = ("scrollback", "notice")
# What a restore replays of a session: what its output file keeps.
SCROLLBACK_LIMIT = KEPT_OUTPUT


def bounded_scrollback(data: bytes) -> bytes:
    """The newest ``SCROLLBACK_LIMIT`` bytes of ``data`` at most, starting at a
    boundary where replay cannot land inside an escape or UTF-8 sequence."""
    if len(data) <= SCROLLBACK_LIMIT:
        return bytes(data)
    return bytes(data[safe_start(data, len(data) - SCROLLBACK_LIMIT) :])


def child_key(socket: str, instance_id: str, child_id: int) -> tuple[str, str, int]:
    """The child a ref names (``ref_key``): its daemon's socket as one
    spelling of its path, that daemon's run, the daemon's id for it."""
    return (os.path.normpath(socket), instance_id, child_id)


def to_column(text: str) -> str | bytes:
    """``text`` as a TEXT column of the file keeps it: itself, or, if it
    holds lone surrogates (a path or argv decoded with surrogateescape),
    which SQLite's UTF-8 cannot carry, its bytes in UTF-8 with
    surrogatepass (a BLOB). One text is always one value, so it can be
    looked up by."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


def from_column(value: object) -> str | None:
    """What ``to_column`` made ``value`` of; None if it made nothing like it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
        return text if to_column(text) == value else None
    return None


def ref_columns(
    socket: str, instance_id: str, child_id: int
) -> tuple[str | bytes, str | bytes, int | None]:
    """The columns a session is looked up by the child it refers to:
    ``child_key``'s parts as the file keeps them (a child id SQLite cannot
    hold is none: no daemon gives one)."""
    socket, instance_id, child_id = child_key(socket, instance_id, child_id)
    child = child_id if -(2**63) <= child_id < 2**63 else None
    return to_column(socket), to_column(instance_id), child


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
