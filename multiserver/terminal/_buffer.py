"""The bounded buffer of output read from a PTY while nobody holds it.

Pure: no I/O. Keeps the newest bytes up to ``limit``; what falls off the front
is counted in ``dropped``, never lost silently. When bytes fall off, the kept
part starts at a *safe boundary* (after a newline, or at least outside an
escape sequence and a UTF-8 sequence), so replaying it cannot leave the
claiming terminal inside an escape sequence; the bytes skipped to reach that
boundary are counted as dropped too, so the accounting stays exact:

    bytes appended == bytes taken + bytes dropped + len(buffer)

Trimming is lazy (the buffer may grow to ``limit + limit // 4`` before it is
cut back) so a child that floods output costs one memmove per quarter of the
limit, not one per read.
"""

from __future__ import annotations

ESC = 0x1B
# How far to look for a newline after a cut before settling for a weaker
# boundary; and how far back an unterminated escape sequence can start.
_NEWLINE_WINDOW = 4096
_ESCAPE_WINDOW = 256


def safe_start(data: bytes | bytearray, cut: int) -> int:
    """The first index >= ``cut`` where replay may start after a cut.

    Preference: just after the first newline within a window, unless that
    leaves nothing (``peek --bytes 48`` of a 62-byte line showed nothing,
    issue 36); otherwise the first index that is neither inside an escape
    sequence begun before it nor a UTF-8 continuation byte.
    """
    n = len(data)
    if cut <= 0:
        return 0
    if cut >= n:
        return n
    nl = data.find(b"\n", cut - 1, min(n, cut + _NEWLINE_WINDOW))
    if nl != -1 and nl + 1 < n:  # a line start that leaves something to show
        return nl + 1
    pos = cut
    # Inside an escape sequence that started before the cut? Skip to its end.
    esc = data.rfind(bytes([ESC]), max(0, cut - _ESCAPE_WINDOW), cut)
    if esc != -1:
        end = escape_end(data, esc)
        if end > cut:
            pos = end
    while pos < n and (data[pos] & 0xC0) == 0x80:
        pos += 1
    return pos


def escape_end(data: bytes | bytearray, start: int) -> int:
    """Index just past the escape sequence that starts at ``data[start]``
    (ESC), or ``len(data)`` if it does not end within the data."""
    n = len(data)
    i = start + 1
    if i >= n:
        return n
    kind = data[i]
    if kind == ord("["):  # CSI: parameters, intermediates, one final byte
        i += 1
        while i < n and not (0x40 <= data[i] <= 0x7E):
            i += 1
        return min(n, i + 1)
    if kind in (ord("]"), ord("P"), ord("_"), ord("^"), ord("X")):  # OSC/DCS/...: to ST or BEL
        i += 1
        while i < n:
            if data[i] == 0x07:
                return i + 1
            if data[i] == ESC and i + 1 < n and data[i + 1] == ord("\\"):
                return i + 2
            i += 1
        return n
    # Two- or three-byte sequences: ESC, intermediates 0x20-0x2F, one final.
    while i < n and 0x20 <= data[i] <= 0x2F:
        i += 1
    return min(n, i + 1)


class OutputBuffer:
    """Newest output up to ``limit`` bytes, with an exact count of the rest."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self._limit = limit
        self._slack = limit // 4
        self._data = bytearray()
        self._dropped = 0

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def dropped(self) -> int:
        """Bytes dropped since the last ``take``."""
        self._trim(0)
        return self._dropped

    def __len__(self) -> int:
        self._trim(0)
        return len(self._data)

    def append(self, data: bytes) -> None:
        self._data += data
        self._trim(self._slack)

    def _trim(self, slack: int) -> None:
        excess = len(self._data) - self._limit
        if excess <= slack or excess <= 0:
            return
        start = safe_start(self._data, excess)
        del self._data[:start]
        self._dropped += start

    def peek(self, max_bytes: int | None = None) -> tuple[bytes, int]:
        """(the newest ``max_bytes`` kept, dropped so far); nothing changes."""
        self._trim(0)
        if max_bytes is None or max_bytes >= len(self._data):
            return bytes(self._data), self._dropped
        cut = safe_start(self._data, len(self._data) - max_bytes)
        return bytes(self._data[cut:]), self._dropped

    def replace(self, data: bytes) -> None:
        """Hold the newest ``limit`` bytes of ``data`` (from a safe start)
        instead of what it held; the dropped count starts again at 0."""
        self._data = bytearray(data)
        self._dropped = 0
        self._trim(0)
        self._dropped = 0

    def view(self) -> tuple[memoryview, int]:
        """(everything kept, dropped so far), not copied: an upgrade's
        snapshot writes it straight to its file. The buffer cannot grow
        while the view lives: release it before anything appends."""
        self._trim(0)
        return memoryview(self._data), self._dropped

    def restore(self, data: bytes | memoryview, dropped: int) -> None:
        """Hold exactly ``data`` (copied), with ``dropped`` counted: what
        ``view`` gave in the daemon before an upgrade."""
        self._data = bytearray(data)
        self._dropped = dropped

    def take(self) -> tuple[bytes, int]:
        """(everything kept, dropped since the last take), and empty."""
        self._trim(0)
        data, dropped = bytes(self._data), self._dropped
        self._data = bytearray()
        self._dropped = 0
        return data, dropped
