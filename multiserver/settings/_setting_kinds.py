"""What a setting's value may be (the kinds), and a setting (``Setting``,
one row of the tables of ``_settings`` and of the command line's): each
kind reads text (a variable, a flag, the daemon's command line) or a TOML
value (the file) and says in one phrase what it allows; a row says a value
its kind refuses in one line naming where it came from (``SettingError``).
Pure, stdlib only: the daemon and the light client import it.

Text is read strictly, as the ASCII a person types: ``int`` takes ``'٣'``
(3) and ``' 5 '`` and ``'1_0'``, ``float`` takes ``'nan'``, ``'inf'`` and
``'1e999'``; none of these is a number of bytes or of seconds here, and a
kind says so rather than guess.
"""

from __future__ import annotations

import math
import os
import re

from multiserver._errors import SettingError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# Decimal numbers as typed, in ASCII ([0-9], not \d: that is any script's
# digit); an exponent of at most three digits (1e999 is inf).
_WHOLE = re.compile(r"-?[0-9]{1,30}")
_DECIMAL = re.compile(r"-?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][-+]?[0-9]{1,3})?")
_SHOWN_MAX = 60  # of a value quoted in a line


class Kind:
    """What a setting's value may be. ``from_text`` and ``from_toml`` give
    the value or raise ValueError (the reason is ``allowed``, said by the
    row); ``text`` is the value as ``from_text`` reads it back (what a
    command passes on to the daemon it starts); ``shown``, as JSON."""

    allowed = "must be a value"

    def from_text(self, text: str) -> object:
        return text

    def from_toml(self, value: object) -> object:
        if isinstance(value, str):
            return self.from_text(value)
        raise ValueError(value)

    def text(self, value: object) -> str:
        return str(value)

    def shown(self, value: object) -> object:
        return value


class Whole(Kind):
    """A whole number from ``lo`` to ``hi`` (of ``unit``)."""

    def __init__(self, lo: int, hi: int, unit: str = "") -> None:
        self.lo, self.hi = lo, hi
        of = f" of {unit}" if unit else ""
        self.allowed = f"must be a whole number{of} from {lo} to {hi}"

    def from_text(self, text: str) -> int:
        if not _WHOLE.fullmatch(text):
            raise ValueError(text)
        return self._checked(int(text))

    def from_toml(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(value)
        return self._checked(value)

    def _checked(self, value: int) -> int:
        if not self.lo <= value <= self.hi:
            raise ValueError(value)
        return value


class Choice(Kind):
    """One of a few words."""

    def __init__(self, *words: str) -> None:
        self.words = words
        self.allowed = "must be one of " + ", ".join(repr(w) for w in words)

    def from_text(self, text: str) -> str:
        if text not in self.words:
            raise ValueError(text)
        return text


class Seconds(Kind):
    """A number of seconds, finite, above ``lo`` (or from it: ``closed``)
    and at most ``hi``; or ``word`` (one of ``words``, in any case), None."""

    def __init__(
        self, lo: float, hi: float, *, closed: bool = False, words: tuple[str, ...] = ()
    ) -> None:
        self.lo, self.hi, self.closed, self.words = lo, hi, closed, words
        if closed:
            allowed = f"must be between {_plain(lo)} and {_plain(hi)} seconds"
        else:
            allowed = f"must be more than {_plain(lo)} and at most {_plain(hi)} seconds"
        self.allowed = f"{allowed}, or {words[0]}" if words else allowed

    def from_text(self, text: str) -> float | None:
        if self.words and text.lower() in self.words:
            return None
        if not _DECIMAL.fullmatch(text):
            raise ValueError(text)
        return self.checked(float(text))

    def from_toml(self, value: object) -> float | None:
        if isinstance(value, str):
            return self.from_text(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(value)
        return self.checked(float(value))

    def checked(self, value: float) -> float:
        # Written so that nan, which compares false, is refused too.
        above = self.lo <= value if self.closed else self.lo < value
        if not (math.isfinite(value) and above and value <= self.hi):
            raise ValueError(value)
        return value

    def text(self, value: object) -> str:
        return self.words[0] if value is None else repr(float(value))  # type: ignore[arg-type]

    def shown(self, value: object) -> object:
        return self.words[0] if value is None else value


def _plain(number: float) -> str:
    """``number`` as a person writes it: 1000000, not 1e+06."""
    return str(int(number)) if number == int(number) else repr(number)


class Words(Kind):
    """A command, split into words as a shell splits it."""

    allowed = "must be a command as a shell would split it (every quote closed), such as 'ssh -F ~/.ssh/work'"

    def from_text(self, text: str) -> list[str]:
        import shlex  # only when the variable is set: 2 ms

        return shlex.split(text)  # ValueError: no closing quotation

    def text(self, value: object) -> str:
        import shlex

        return shlex.join(value)  # type: ignore[arg-type]


def split_patterns(raw: str | None) -> list[str]:
    """A colon-separated list of names or globs (empty entries ignored)."""
    return [p for p in (raw or "").split(":") if p]


class Patterns(Kind):
    """Names or globs of environment variables: ``:``-separated as text
    (which anything is), a list in the file; ``one`` reads one (a flag)."""

    allowed = 'must be a list of names or globs, such as ["AWS_*", "PGPASSWORD"], none empty or holding ":"'
    one_allowed = "must be a name or glob, such as 'AWS_*', not empty and without ':'"

    def from_text(self, text: str) -> list[str]:
        return split_patterns(text)

    def from_toml(self, value: object) -> list[str]:
        if not isinstance(value, list) or not all(_one_pattern(p) for p in value):
            raise ValueError(value)
        return list(value)

    def one(self, text: str) -> str:
        if not _one_pattern(text):
            raise ValueError(text)
        return text

    def text(self, value: object) -> str:
        return ":".join(value)  # type: ignore[arg-type]


def _one_pattern(value: object) -> bool:
    return isinstance(value, str) and value != "" and ":" not in value


class AbsolutePath(Kind):
    """A path from ``/``."""

    allowed = 'must be an absolute path, such as "/bin/zsh"'

    def from_text(self, text: str) -> str:
        if not os.path.isabs(text):
            raise ValueError(text)
        return text


class Dir(Kind):
    """A directory: any path (a relative one is taken from where the
    command runs, once, by its reader)."""

    allowed = "must be a path"


class Setting:
    """One row of the table: see the module's docstring. ``flags``: where
    the command line carries it (``"--timeout (restore)"`` and the like;
    said in the docs, read by ``from_flag``'s callers)."""

    __slots__ = ("default", "env", "flags", "help", "key", "kind", "name")

    def __init__(
        self,
        name: str,
        kind: Kind,
        default: object,
        help: str,
        *,
        env: str | None = None,
        key: str | None = None,
        flags: tuple[str, ...] = (),
    ) -> None:
        self.name, self.kind, self.default, self.help = name, kind, default, help
        self.env, self.key, self.flags = env, key, flags

    def from_env(self, environ: Mapping[str, str] | None = None) -> object:
        """Its value from the environment (``os.environ``): the default when
        the variable is unset or empty; SettingError if the kind refuses it."""
        raw = (os.environ if environ is None else environ).get(self.env or "", "")
        if not raw:
            return self.default
        try:
            return self.kind.from_text(raw)
        except ValueError:
            raise SettingError(f"{self.env}={quoted(raw)}: {self.kind.allowed}") from None

    def from_flag(self, flag: str, text: str, *, one: bool = False) -> object:
        """``flag``'s value ``text``; ``one``: one of a list (``--strip-env``)."""
        kind = self.kind
        try:
            if one and isinstance(kind, Patterns):
                return kind.one(text)
            return kind.from_text(text)
        except ValueError:
            allowed = kind.one_allowed if one and isinstance(kind, Patterns) else kind.allowed
            raise SettingError(f"{flag} {quoted(text)}: {allowed}") from None

    def from_toml(self, value: object, where: str) -> object:
        """Its value in the file, at ``where`` (``PATH:LINE``)."""
        try:
            return self.kind.from_toml(value)
        except ValueError:
            shown = toml_text(value)
            raise SettingError(f"{where}: {self.key} = {shown}: {self.kind.allowed}") from None

    def check(self, value: object) -> None:
        """ValueError (one line) unless ``value`` is one of this setting's
        values, as a program holds them (``DaemonConfig``'s validators)."""
        try:
            ok = self.kind.from_text(self.kind.text(value)) == value
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise SettingError(f"{self.name} = {value!r}: {self.kind.allowed}")


def quoted(text: str) -> str:
    """``text`` as a shell would take it back, cut short if long."""
    import shlex

    if len(text) > _SHOWN_MAX:
        text = text[:_SHOWN_MAX] + "..."
    return shlex.quote(text)


def toml_text(value: object) -> str:
    """A value of the file, written as TOML writes it (cut short if long)."""
    if isinstance(value, bool):
        shown = "true" if value else "false"
    elif isinstance(value, str):
        text = value if len(value) <= _SHOWN_MAX else value[:_SHOWN_MAX] + "..."
        shown = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    elif isinstance(value, int):
        shown = str(value) if value.bit_length() < 128 else "a number too large"
    elif isinstance(value, float):
        shown = repr(value) if math.isfinite(value) else str(value)
    elif isinstance(value, list):
        shown = "[" + ", ".join(toml_text(v) for v in value[:4]) + (", ...]" if value[4:] else "]")
    elif isinstance(value, dict):
        shown = "a table"
    else:  # dates and times
        shown = str(value)
    return shown
