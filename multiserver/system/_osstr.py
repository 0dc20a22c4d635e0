"""OS strings: an argument, a path or an environment entry, as Python holds it.

The OS deals in bytes. Python decodes them with the filesystem encoding and
``surrogateescape`` (``sys.argv``, ``os.environ``, ``os.getcwd()``), so a byte
that is not part of valid UTF-8 becomes a lone surrogate U+DC80..U+DCFF, and
``os.fsencode`` gives the same bytes back. Such a ``str`` has no UTF-8 form,
so a JSON body cannot carry it as a string. Pure; no I/O.

The messages keep ``str`` (``_messages.OsStr`` is ``str`` to a type
checker) and the codecs find the fields by its mark. On the wire an
OS string is its bytes: a JSON string when they are valid UTF-8, else
``{"b": base64}`` (version 5; docs/protocol.md §2). For a person, every such
string is shown one way, ``escaped``: ``caf\\xe9``; and on a terminal,
``printable``: the same, with every character a terminal would act on (ESC,
BEL, a newline, a bidi override) as its escape (``\\x1b``, ``\\n``,
``\\u202e``).
"""

from __future__ import annotations

import os


def to_wire(text: str) -> str | bytes:
    """``text`` as the wire carries it: itself when its OS bytes are UTF-8
    (the common case, and free for ASCII), else those bytes.

    Raises UnicodeEncodeError for a lone surrogate that no OS byte decodes
    to (outside U+DC80..U+DCFF): that ``str`` came from nowhere in the OS.
    """
    if text.isascii():
        return text
    raw = os.fsencode(text)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def from_wire_text(text: str) -> str:
    """A JSON string of an OS string field -> the ``str`` this process uses
    for its bytes. Raises ValueError for a lone surrogate (``"\\udce9"`` in
    JSON): the bytes of an OS string that is not UTF-8 travel tagged."""
    if text.isascii():
        return text
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("string is not valid Unicode (lone surrogate)") from None
    return os.fsdecode(raw)


def from_wire_bytes(raw: bytes) -> str:
    """The bytes of an OS string -> the ``str`` this process uses for them."""
    return os.fsdecode(raw)


def is_utf8(text: str) -> bool:
    """Whether ``text``'s OS bytes are UTF-8: any protocol version can carry it."""
    return type(to_wire(text)) is str


def escaped(text: str) -> str:
    """``text`` for a person: bytes that are not UTF-8 as ``\\xNN``
    (``caf\\xe9``), the rest as it is. Always valid Unicode, so it can be
    printed, logged and sent in any message."""
    try:
        wire = to_wire(text)
    except UnicodeEncodeError:  # not from the OS; shown all the same
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return wire if isinstance(wire, str) else wire.decode("utf-8", "backslashreplace")


def printable(text: str, lines: bool = False) -> str:
    """``text`` for a person's terminal: ``escaped``, and every character
    that is not printable (``str.isprintable``: C0 and C1 controls, DEL,
    format characters such as bidi overrides, line separators) as its
    Python escape: ``\\x1b``, ``\\n``, ``\\u202e``. The one rule for
    everything a terminal shows that came from a program or a file (names,
    argv, cwd, titles, paths, errors): what is printed can draw letters and
    nothing else (no title set, no clipboard written, no line ended early).
    ``lines``: a message of several lines of our own keeps its newlines.

    A backslash is left as it is, so ``printable`` is idempotent (a string
    printed once can go through it again unchanged)."""
    if text.isprintable():  # no control, no surrogate: as it is (most text)
        return text
    text = escaped(text)
    if text.isprintable():
        return text
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
