"""What a relayed terminal's input carries over ssh (pure: no I/O).

``attach HOST:NAME`` runs the remote attach with no terminal of its own on
the host (``ssh -T``: no second PTY in the output's way). Its output goes
back on the channel as it is; its input is the person's keystrokes and,
mixed in, the terminal's size when it changes. In that stream NUL is the
escape byte:

- ``NUL NUL`` is a NUL typed (Ctrl-Space, Ctrl-@);
- ``NUL "W" rows cols`` is the terminal's size, two unsigned 16-bit
  big-endian numbers; the first thing sent is always one.

Anything else after a NUL is an error (the two ends disagree): what came
before it is delivered, nothing after it; the remote attach says so in one
line rather than typing garbage into the session.
"""

from __future__ import annotations

import struct

ESCAPE = b"\x00"
SIZE = b"W"
_SIZE = struct.Struct(">HH")
# The longest frame: NUL, tag, rows, cols.
FRAME_MAX = 2 + _SIZE.size

Size = tuple[int, int]  # (rows, cols)


def encode_input(data: bytes) -> bytes:
    """Keystrokes, as the relay carries them."""
    return data.replace(ESCAPE, ESCAPE + ESCAPE)


def encode_size(rows: int, cols: int) -> bytes:
    """The terminal's size, as the relay carries it (clamped to 16 bits)."""
    return ESCAPE + SIZE + _SIZE.pack(min(max(rows, 0), 0xFFFF), min(max(cols, 0), 0xFFFF))


class Decoder:
    """Relayed input in, keystrokes (bytes) and sizes (tuples) out, in the
    order sent, whatever pieces the stream comes in. ``error``: why the
    stream broke the rules; from then on nothing more comes out."""

    def __init__(self) -> None:
        self.error: str | None = None
        self._carry = b""

    def feed(self, data: bytes) -> list[bytes | Size]:
        if self.error is not None:
            return []
        data = self._carry + data
        self._carry = b""
        out: list[bytes | Size] = []
        keys = bytearray()
        at = 0
        while True:
            nul = data.find(ESCAPE, at)
            if nul < 0:
                keys += data[at:]
                break
            keys += data[at:nul]
            tag = data[nul + 1 : nul + 2]
            if not tag:
                self._carry = data[nul:]
                break
            if tag == ESCAPE:
                keys += ESCAPE
                at = nul + 2
            elif tag == SIZE:
                end = nul + FRAME_MAX
                if len(data) < end:
                    self._carry = data[nul:]
                    break
                if keys:
                    out.append(bytes(keys))
                    keys.clear()
                rows, cols = _SIZE.unpack(data[nul + 2 : end])
                out.append((rows, cols))
                at = end
            else:
                self.error = f"relayed input has an unknown escape {tag!r}"
                break
        if keys:
            out.append(bytes(keys))
        return out
