"""The detach key: how a person writes it, and the byte it sends, each way.
Apart from the copy loop, so that every command (which reads the option)
does not load the attached terminal's machinery."""

from __future__ import annotations


def parse_key(spec: str) -> bytes:
    """``^\\``, ``^A``, ``^?`` or a single character -> the byte it sends."""
    if len(spec) == 2 and spec[0] == "^":
        c = spec[1]
        if c == "?":
            return b"\x7f"
        code = ord(c.upper()) ^ 0x40
        if 0 <= code < 0x20:
            return bytes([code])
    elif len(spec) == 1 and ord(spec) < 0x80:
        return spec.encode()
    raise ValueError(f"bad detach key {spec!r}: use ^X notation or one ASCII character")


def key_name(key: bytes) -> str:
    """The byte a detach key sends -> how a person writes it (``^A``)."""
    code = key[0]
    return f"^{chr(code ^ 0x40)}" if code < 0x20 or code == 0x7F else key.decode()
