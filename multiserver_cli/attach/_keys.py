"""The detach key: how a person writes it, the byte it stands for, and how
to find it in what a terminal sends (pure: bytes in, bytes out). Apart from
the copy loop, so that every command (which reads the option) does not load
the attached terminal's machinery; stdlib only, and light.

A terminal sends one key in one of several encodings, depending on what
the program attached asked of it:

- the key's own byte (``^\\`` -> 0x1c): every terminal, by default;
- the kitty keyboard protocol (a program pushed ``CSI > flags u``; fish 4
  and helix do): ``CSI code[:shifted[:base]] ; mods[:event] [; text] u``.
  Ctrl-\\ is ``ESC[92;5u`` (flags 1 and 8 alike), ``ESC[92;5:1u`` with
  event types (flag 2), ``ESC[92:124;5u`` with alternate keys (flag 4);
  ``base``, the key on a US layout, finds ``^A`` on a Cyrillic one. xterm
  with formatOtherKeys=1 sends this form too;
- xterm's modifyOtherKeys (``CSI > 4;2 m``): ``CSI 27 ; mods ; code ~``.

``mods`` is 1 + a set of bits (shift 1, alt 2, ctrl 4, super 8, ...; caps
lock 64 and num lock 128, which are ignored). Event ``:3`` is a release:
never a detach, and swallowed, whatever modifiers are still down (it
follows a press that detached; the program never had the press, so it
must not get the release either).

``DetachMatcher`` is fed what is read from the terminal, in whatever pieces
it comes, and gives back what goes on to the program, byte for byte, up to
the key: then ``detached`` is True, and nothing after the key is given
back. A sequence cut off by the end of a read is held (at most HOLD_MAX
bytes) until the next read says whether it is the key, or until
``held_until`` (HOLD_WAIT seconds after it was held: the caller's clock,
given to ``feed``); then ``expire`` lets it go: the Esc key alone is such a
tail, and must not wait for the next key.
"""

from __future__ import annotations

DEFAULT_DETACH = "^\\"  # Ctrl-\ (as in dtach)

# How long the tail of a read that may start the key waits for the rest.
# A terminal writes a key's sequence at once: the rest, if any, is there
# within microseconds; what waits this long is the Esc key alone.
HOLD_WAIT = 0.02
# The longest sequence that can be the key, ESC and final byte included
# (``ESC[1092:1060:97;133:1;1092u`` is 28 bytes): anything longer is not.
HOLD_MAX = 64

_ESC = 0x1B
_CSI = 0x5B  # [
_PARAMS = frozenset(b"0123456789:;")
_SHIFT, _CTRL = 1, 4
_LOCKS = 64 | 128
# What a sequence is, for the matcher.
_OTHER, _PRESS, _RELEASE = 0, 1, 2


def parse_key(spec: str) -> bytes:
    """``^\\``, ``^A``, ``^?`` or a single ASCII character -> the byte it
    sends. ValueError for anything else: a key a terminal sends alone is
    one byte, and ``^`` goes with ASCII only (``'ı'.upper()`` is ``I``:
    ``^ı`` would be Tab; ``'ß'.upper()`` is two letters)."""
    if len(spec) == 2 and spec[0] == "^" and spec[1].isascii():
        c = spec[1]
        if c == "?":
            return b"\x7f"
        code = ord(c.upper()) ^ 0x40
        if 0 <= code < 0x20:
            return bytes([code])
    elif len(spec) == 1 and spec.isascii():
        return spec.encode()
    raise ValueError(f"bad detach key {spec!r}: use ^X notation or one ASCII character")


def key_name(key: bytes) -> str:
    """The byte a detach key sends -> how a person writes it (``^A``)."""
    code = key[0]
    return f"^{chr(code ^ 0x40)}" if code < 0x20 or code == 0x7F else key.decode()


def _key_codes(key: int) -> frozenset[tuple[int, int]]:
    """The (code, modifier bits) pairs that the kitty protocol and
    modifyOtherKeys send for the key whose plain byte is ``key``."""
    if key == 0x7F:  # ^?: the Backspace key, as flag 8 reports it
        return frozenset({(0x7F, 0)})
    if key >= 0x20:  # a character: typed as itself, or with shift
        pairs = {(key, 0)}
        if 0x41 <= key <= 0x5A:  # an upper-case letter: shift and the letter's key
            pairs.add((key | 0x20, _SHIFT))
        return frozenset(pairs)
    # A control byte: Ctrl (and Ctrl-Shift, which legacy terminals send
    # as the same byte) with the key of its character, lower case.
    char = key | 0x40
    codes = {char | 0x20 if 0x41 <= char <= 0x5A else char}
    codes |= {0x00: {0x20, 0x32}, 0x1E: {0x36}, 0x1F: {0x2D}}.get(key, set())  # ^@ ^^ ^_
    pairs = {(code, mods) for code in codes for mods in (_CTRL, _CTRL | _SHIFT)}
    if key == _ESC:
        pairs.add((_ESC, 0))  # the Esc key itself
    return frozenset(pairs)


def _number(field: bytes, default: int) -> int | None:
    if not field:
        return default
    return int(field) if field.isdigit() and len(field) <= 7 else None


class DetachMatcher:
    """Finds the detach key ``key`` (its plain byte) in a terminal's input;
    see the module's docstring. Stateful, pure: one per stream read."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.detached = False
        self.held_until: float | None = None  # when the held tail goes on
        self._codes = _key_codes(key[0])
        self._held = b""

    @property
    def held(self) -> bool:
        """Whether bytes wait for the next read (or ``expire``)."""
        return bool(self._held)

    def flush(self) -> bytes:
        """The held bytes, given up on: they were not the key."""
        held, self._held, self.held_until = self._held, b"", None
        return held

    def expire(self, now: float) -> bytes:
        """The held bytes if their time is up at ``now``, else nothing."""
        due = self.held_until is not None and self.held_until <= now
        return self.flush() if due else b""

    def feed(self, data: bytes, now: float = 0.0) -> bytes:
        """What of the held bytes and ``data`` goes on to the program, in
        order, byte for byte: everything but the key's releases, up to the
        key (or up to a tail that may start it, held from ``now``)."""
        if self.detached:
            return b""
        out = self._scan(data)
        if not self._held or self.detached:
            self.held_until = None
        elif self.held_until is None:
            self.held_until = now + HOLD_WAIT
        return out

    def _scan(self, data: bytes) -> bytes:
        buf = self._held + data if self._held else data
        self._held = b""
        out = bytearray()
        n = len(buf)
        at = 0
        plain = buf.find(self.key)
        while at < n:
            if 0 <= plain < at:
                plain = buf.find(self.key, at)
            esc = buf.find(b"\x1b", at)
            if plain >= 0 and (esc < 0 or plain <= esc):
                out += buf[at:plain]
                self.detached = True
                return bytes(out)
            if esc < 0:
                out += buf[at:]
                break
            out += buf[at:esc]
            end, what = self._sequence(buf, esc)
            if end is None:
                self._held = buf[esc:]
                break
            if what == _PRESS:
                self.detached = True
                return bytes(out)
            if what == _OTHER:
                out += buf[esc:end]
            at = end
        return bytes(out)

    def _sequence(self, buf: bytes, esc: int) -> tuple[int | None, int]:
        """The escape sequence at ``esc``: where the part that is decided
        ends (None: it runs off the end of ``buf`` and may be the key), and
        what it is. A sequence that is not the key ends at its final byte;
        one broken by another byte (an ESC, a control byte: the key's own)
        ends before it, and that byte is looked at afresh."""
        n = len(buf)
        if esc + 1 == n:
            return None, _OTHER
        second = buf[esc + 1]
        if second == 0x4F:  # SS3: ``ESC O P`` is F1, not P
            if esc + 2 == n:
                return None, _OTHER
            return esc + (3 if 0x20 <= buf[esc + 2] < 0x7F else 2), _OTHER
        if second != _CSI:
            # ``ESC x`` is Alt-x, not x; ESC then a control byte is left
            # to be looked at (ESC ^\ was ^\ with Alt to a legacy terminal).
            return esc + (2 if 0x20 <= second < 0x7F else 1), _OTHER
        end = esc + 2
        while end < n and buf[end] in _PARAMS and end - esc < HOLD_MAX:
            end += 1
        if end == n:
            return None, _OTHER
        if end - esc >= HOLD_MAX:
            return end, _OTHER
        final = buf[end]
        if final == 0x75:  # u
            return end + 1, self._kitty(buf[esc + 2 : end])
        if final == 0x7E:  # ~
            return end + 1, self._other_keys(buf[esc + 2 : end])
        # Another sequence's final byte is part of it (``ESC[A`` is Up,
        # not A); any other byte is looked at afresh.
        return (end + 1 if 0x40 <= final < 0x7F else end), _OTHER

    def _kitty(self, params: bytes) -> int:
        """``code[:shifted[:base]] ; mods[:event] ; text`` (kitty)."""
        fields = params.split(b";")
        if len(fields) > 3:
            return _OTHER
        keys = fields[0].split(b":")
        mods_event = fields[1].split(b":") if len(fields) > 1 else [b""]
        text = fields[2].split(b":") if len(fields) > 2 else []
        if len(keys) > 3 or len(mods_event) > 2:
            return _OTHER
        mods = _number(mods_event[0], 1)
        event = _number(mods_event[1], 1) if len(mods_event) > 1 else 1
        if mods is None or mods < 1 or event is None:
            return _OTHER
        bits = (mods - 1) & ~_LOCKS
        unshifted = bits & ~_SHIFT
        code, shifted, base = [*(_number(k, -1) for k in keys), -1, -1][:3]
        found = (
            (code, bits) in self._codes
            or (base, bits) in self._codes  # another layout: its US key
            or (shifted, unshifted) in self._codes  # the character shift made
            or (len(text) == 1 and (_number(text[0], -1), unshifted) in self._codes)
        )
        if event == 3:  # the key's release, whatever was let go of first
            codes = {code for code, _ in self._codes}
            return _RELEASE if found or code in codes or base in codes else _OTHER
        return _PRESS if found else _OTHER

    def _other_keys(self, params: bytes) -> int:
        """``27 ; mods ; code`` (xterm's modifyOtherKeys)."""
        fields = params.split(b";")
        if len(fields) != 3 or fields[0] != b"27":
            return _OTHER
        mods, code = _number(fields[1], 1), _number(fields[2], -1)
        if mods is None or mods < 1:
            return _OTHER
        bits = (mods - 1) & ~_LOCKS
        # With Shift, the code is the character shift made (``27;2;65~``: A).
        found = (code, bits) in self._codes or (code, bits & ~_SHIFT) in self._codes
        return _PRESS if found else _OTHER
