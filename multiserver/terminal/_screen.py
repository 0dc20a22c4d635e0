"""What a program's screen leaves on the terminal, and the one reset that
takes it off (pure: bytes in, bytes out).

A program's screen ends in many places: a detach, an exit, the end of a
saved scrollback replayed before a relaunched program's marker, a remote
link lost, a relay ended by a signal, a peek. Each writes the same thing,
``ScreenModes.reset()``, fed with what was shown when it is known
(``ScreenModes``), or assuming the worst when it is not
(``ScreenModes.unknown()``: the output went past this process).

What the reset does, in order, and why that order:

1. ``ST`` (``ESC \\``): ends any string the output left open. An
   unterminated ``ESC ] 0 ; ...`` would otherwise swallow the rest (kitty
   does not end a string on a bare ESC, only on ST or BEL). Where no string
   is open, ST is a no-op in every terminal met (xterm, kitty, tmux, pyte).
2. The alternate screen is left the way it was entered (``?1049l`` also
   restores the cursor saved on entry), with its own kitty keyboard stack
   popped first (each screen has its own). Origin mode is reset before it
   (``?6l`` homes the cursor, harmlessly on the alternate screen).
3. On the main screen, inside ``ESC 7 ... ESC 8`` (DECSTBM and DECOM home
   the cursor; the status line belongs where the cursor was): the kitty
   keyboard stack popped, the scroll region made the whole screen.
4. Then every mode of the one table (``_draws.MODES``) back to its safe
   value: those a replay may set (cursor shown, cursor keys and keypad
   normal, mouse and focus reporting off, bracketed paste and synchronized
   output off, replace not insert, autowrap on...) and those a live program
   may set that would trap the person (the keyboard unlocked, local echo
   off, keys repeating, reverse video off...); then plain attributes, G0
   ASCII and in use, and the terminal's own colours (OSC 110/111/112).

What a terminal may misread, or what was not ours to drop (kitty flags,
modifyOtherKeys, the cursor's shape, origin mode: all rarely set, and each
with a cost) is undone only if something shown set it, or if what was
shown is unknown.
"""

from __future__ import annotations

import re

from multiserver.terminal._draws import KEYPAD_RESET, MODES

# What ScreenModes follows: DEC private modes set and reset (the alternate
# screen, origin mode), RIS, the kitty keyboard stack (push ">", set "=",
# pop "<"), xterm's modifyOtherKeys ("CSI > 4 ; N m") and the cursor's
# shape ("CSI N SP q"). A CSI is read in its three encodings: ESC [, and the
# C1 control as a character (C2 9B) or as a raw byte (9B, where no UTF-8
# character's lead byte comes before it): kitty acts on each.
_CSI = rb"(?:\x1b\[|\xc2\x9b|(?<![\xc0-\xff])\x9b)"
_TRACKED = re.compile(
    rb"(?:" + _CSI + rb"(?:"
    rb"\?(?P<modes>[0-9;]*)(?P<set>[hl])"
    rb"|(?P<kitty>[<=>])(?P<kitty_args>[0-9;]*)u"
    rb"|>(?P<modkeys>[0-9;]*)m"
    rb"|(?P<shape>[0-9]*) q"
    rb")|(?P<ris>\x1bc))"
)
_TRACKED_OPEN = re.compile(rb"(?:\x1b|\xc2|" + _CSI + rb"(?:[?<=>]?[0-9;]*)?)\Z")
_ALTERNATE_MODES = {b"47": 47, b"1047": 1047, b"1049": 1049}
_ORIGIN_MODE = b"6"

ST = b"\x1b\\"
# Kitty keyboard protocol: "CSI < number u" pops that many entries, and "if
# a pop request is received that empties the stack, all flags are reset".
# Terminals bound the stack (kitty keeps 8 entries a screen); 99 is past
# any of them.
_KITTY_POP_ALL = b"\x1b[<99u"
_MODIFY_OTHER_KEYS_RESET = b"\x1b[>4m"  # back to the terminal's initial value
_CURSOR_SHAPE_RESET = b"\x1b[0 q"  # the terminal's own shape
_ORIGIN_RESET = b"\x1b[?6l"
_TO_BOTTOM = b"\x1b[9999;1H"  # the bottom line, first column
# Written whatever was shown: every mode of the table (``_draws.MODES``) but
# those followed here, back to its safe value; the keypad; G0 ASCII and in
# use (line drawing off); plain attributes; the terminal's own colours
# (foreground, background, cursor: OSC 110/111/112).
_RESET_MODES = b"".join(
    [
        b"\x1b[0m",
        b"\x1b(B\x0f",
        *(mode.sequence(mode.safe) for mode in MODES if not mode.tracked),
        KEYPAD_RESET,
        b"\x1b]110\x1b\\\x1b]111\x1b\\\x1b]112\x1b\\",
    ]
)


class _KittyStack:
    def __init__(self, dirty: bool = False) -> None:
        self.depth = 0  # pushes not popped
        self.changed = dirty  # flags set ("CSI = flags u") since the stack was last empty

    def dirty(self) -> bool:
        return self.depth > 0 or self.changed

    def apply(self, op: bytes, args: bytes) -> None:
        first = args.split(b";")[0]
        if op == b">":
            self.depth += 1
        elif op == b"<":
            self.depth = max(0, self.depth - int(first or b"1"))
            if self.depth == 0:
                self.changed = False
        elif int(first or b"0"):
            self.changed = True


class ScreenModes:
    """Follows, through everything shown the terminal, what leaving must
    undo with care; ``reset()`` is what to write where the program's
    screen ends.

    - The alternate screen is left the way it was entered: ``CSI ?1049l``
      also restores the saved cursor, and does so on the main screen too
      (xterm, tmux), which would put the status line wherever a cursor was
      last saved.
    - Kitty keyboard flags, xterm's modifyOtherKeys, the cursor's shape
      and origin mode are undone only if something shown set them: a terminal that does not
      know the first two may misread them (pyte takes "CSI > 4 m" for
      underline and prints "CSI < 99 u"), flags the terminal had before
      attaching are not ours to drop, and resetting origin mode homes the
      cursor.

    Everything else (mouse, keypad, cursor, colours...) is reset whatever
    was shown.
    """

    def __init__(self) -> None:
        self._alternate = 0  # the DEC mode (47, 1047, 1049) that entered it; 0: main screen
        self._kitty_main = _KittyStack()
        self._kitty_alternate = _KittyStack()
        self._modify_other_keys = False
        self._cursor_shape = False
        self._origin = False
        self._unknown = False
        self._carry = b""

    @classmethod
    def unknown(cls) -> ScreenModes:
        """Modes nobody here followed (a relay's output goes from ssh to
        the terminal): anything may be on. Leaving the alternate screen is
        made harmless on the main screen by saving the cursor first (xterm
        keeps one saved cursor a screen, and ``?1049l`` restores it)."""
        modes = cls()
        modes._alternate = 1049
        modes._kitty_main = _KittyStack(dirty=True)
        modes._kitty_alternate = _KittyStack(dirty=True)
        modes._modify_other_keys = True
        modes._cursor_shape = True
        # Origin mode is left as it is: ``?6l`` homes the cursor, and on
        # tmux's main screen nothing puts it back (xterm's ``?1049l`` does,
        # and restores origin mode with it). Once the scroll region is the
        # whole screen, origin mode on positions as if it were off.
        modes._unknown = True
        return modes

    @property
    def alternate(self) -> int:
        return self._alternate

    def feed(self, data: bytes) -> None:
        """Take note of ``data``, the next bytes shown (in any pieces)."""
        if self._carry:
            data, self._carry = self._carry + data, b""
        elif b"\x1b" not in data and b"\x9b" not in data:  # most output, at memchr speed
            return
        for m in _TRACKED.finditer(data):
            if m["modes"] is not None:
                for param in m["modes"].split(b";"):
                    mode = _ALTERNATE_MODES.get(param)
                    if mode is not None:
                        self._alternate = mode if m["set"] == b"h" else 0
                    elif param == _ORIGIN_MODE:
                        self._origin = m["set"] == b"h"
            elif m["kitty"] is not None:
                stack = self._kitty_alternate if self._alternate else self._kitty_main
                stack.apply(m["kitty"], m["kitty_args"])
            elif m["shape"] is not None:
                self._cursor_shape = int(m["shape"] or b"0") != 0
            elif m["modkeys"] is not None:
                resource, _, value = m["modkeys"].partition(b";")
                if resource == b"4":
                    self._modify_other_keys = bool(int(value or b"0"))
            else:  # RIS: the terminal as it started
                self.__init__()  # type: ignore[misc]
        cut = _TRACKED_OPEN.search(data, max(0, len(data) - 32))
        if cut is not None:
            self._carry = data[cut.start() :]

    def reset(self) -> bytes:
        """What to write where the program's screen ends (see the module's
        docstring). The cursor ends where the main screen has it, so a
        status line comes out there."""
        out = bytearray(ST)
        if self._alternate:
            if self._unknown:
                out += b"\x1b7"  # on the main screen, ?1049l restores this
            if self._kitty_alternate.dirty():
                out += _KITTY_POP_ALL
            if self._origin:
                out += _ORIGIN_RESET
            out += b"\x1b[?%dl" % self._alternate
        out += b"\x1b7"
        if self._kitty_main.dirty():
            out += _KITTY_POP_ALL
        out += b"\x1b[r\x1b8"  # scroll region: the whole screen
        if self._origin and not self._alternate:
            # Set on the main screen: ESC 8 brought it back, and resetting it
            # homes the cursor; the status line goes to the bottom instead.
            out += _ORIGIN_RESET + _TO_BOTTOM
        if self._modify_other_keys:
            out += _MODIFY_OTHER_KEYS_RESET
        if self._cursor_shape:
            out += _CURSOR_SHAPE_RESET
        out += _RESET_MODES
        return bytes(out)


def screen_reset(shown: bytes | None) -> bytes:
    """The reset for a screen that showed ``shown`` (None: unknown)."""
    if shown is None:
        return ScreenModes.unknown().reset()
    modes = ScreenModes()
    modes.feed(shown)
    return modes.reset()
