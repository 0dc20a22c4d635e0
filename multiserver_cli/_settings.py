"""The person's settings: ``config.toml`` in the config dir
(``$MULTISERVER_CONFIG_DIR``, else the XDG config dir, beside hosts.json).

Each setting is decided in one order: a flag on the command line wins, then
the environment variable of that setting (those that have one), then the
file, then the default (``SETTINGS``). ``multiserver config`` shows each
effective value and where it came from.

Cheap when there is no file: one ``stat``, and ``tomllib`` (about 20 ms to
import) is imported only when the file exists. Only the commands that use a
setting read the file (``Command.SETTINGS``, applied by ``main``): ``ls``,
``peek`` and ``version`` never do.

A bad file is never fatal. A syntax error: the file is ignored; an unknown
key or a value of the wrong type or range: that key is ignored. Each is one
line, ``PATH:LINE: what``, said on stderr by a command that reads the file;
the command goes on with the other sources. ``multiserver config`` says
them too and exits 1, so a person can check a file they edited.

The file's values for settings that have an environment variable reach the
code that reads that variable as the variable itself (``export_env``, when
it is unset): the daemon a command starts gets its buffer limit, and ``new``
its strip and keep patterns, on the path they already take.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from multiserver_cli._args import DEFAULT_DETACH

FILE_NAME = "config.toml"


class Setting:
    """One setting: its key in the file, its kind (how a value is checked
    and shown), its default, its environment variable, what it does."""

    __slots__ = ("default", "env", "help", "key", "kind")

    def __init__(self, key: str, kind: str, default: object, env: str | None, help: str) -> None:
        self.key, self.kind, self.default, self.env, self.help = key, kind, default, env, help


SETTINGS: tuple[Setting, ...] = (
    Setting("detach_key", "key", DEFAULT_DETACH, None, "the detach key of new and attach (-e)"),
    Setting(
        "buffer_limit",
        "bytes",
        1024 * 1024,
        "MULTISERVER_BUFFER_LIMIT",
        "bytes of output a daemon it starts keeps per session",
    ),
    Setting(
        "save_every",
        "seconds",
        5.0,
        None,
        "seconds between two saves of the scrollback by the saver (save --every)",
    ),
    Setting("restore_timeout", "seconds", 10.0, None, "restore's deadline (restore --timeout)"),
    Setting(
        "strip_env",
        "patterns",
        [],
        "MULTISERVER_STRIP_ENV",
        "names or globs left out of a new session's environment (new --strip-env)",
    ),
    Setting(
        "keep_env",
        "patterns",
        [],
        "MULTISERVER_KEEP_ENV",
        "names or globs kept although stripped (new --keep-env)",
    ),
    Setting("shell", "path", "", None, "what new runs with no command (default: $SHELL)"),
    Setting("host_grace", "grace", "300", None, "host add --grace: 60-3600 seconds, or none"),
)
BY_KEY = {s.key: s for s in SETTINGS}

# tomllib's errors say where only in their words (3.14 adds lineno).
_AT_LINE = re.compile(r"\(at line (\d+), column \d+\)$")
_KEY_LINE = re.compile(r"""^\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*[=.]""")
_TABLE_LINE = re.compile(r"^\s*\[+\s*([^\]]*?)\s*\]")


def config_path() -> Path:
    from restore import config_dir

    return config_dir() / FILE_NAME


class Settings:
    """The file's settings (checked) and what was wrong with it; ``value``
    and ``source`` decide a setting from the environment, the file and
    the default (a flag is the caller's to prefer)."""

    def __init__(self, path: Path, found: dict[str, tuple[object, int]], problems: list[str]):
        self.path = path
        self._found = found  # key -> (value, line)
        self.problems = problems

    @classmethod
    def read(cls, path: Path | None = None) -> Settings:
        """The settings of ``path`` (default: ``config_path()``); no file:
        none, and nothing imported."""
        path = config_path() if path is None else path
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return cls(path, {}, [])
        except OSError as exc:
            return cls(path, {}, [f"{path}: cannot read it: {exc.strerror}; not used"])
        from multiserver import UnsafeDirectory, check_path_chain

        try:  # after the read: what passes now, nobody else could change before
            check_path_chain(path)
        except UnsafeDirectory as exc:
            return cls(path, {}, [f"{path} is not used: {exc}"])
        import tomllib

        try:
            text = raw.decode("utf-8")
            table = tomllib.loads(text)
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            return cls(path, {}, [f"{path}:{line}: not UTF-8; the file is not used"])
        except tomllib.TOMLDecodeError as exc:
            m = _AT_LINE.search(str(exc))
            where = f"{path}:{m.group(1)}" if m else str(path)
            what = _AT_LINE.sub("", str(exc)).strip()
            return cls(path, {}, [f"{where}: {what}; the file is not used"])
        lines = _key_lines(text)
        found: dict[str, tuple[object, int]] = {}
        problems: list[str] = []
        for key, value in table.items():
            line = lines.get(key, 0)
            where = f"{path}:{line}" if line else str(path)
            setting = BY_KEY.get(key)
            if setting is None:
                known = ", ".join(BY_KEY)
                problems.append(f"{where}: unknown setting {key!r} (known: {known}); ignored")
                continue
            try:
                found[key] = (_checked(setting, value), line)
            except ValueError as exc:
                problems.append(f"{where}: {key}: {exc}; ignored")
        return cls(path, found, problems)

    def value(self, key: str) -> object:
        return self.decide(key)[0]

    def decide(self, key: str) -> tuple[object, str]:
        """``key``'s value and where it came from: ``$VAR``, ``PATH:LINE``
        or ``default``."""
        setting = BY_KEY[key]
        if setting.env is not None and os.environ.get(setting.env):
            raw = os.environ[setting.env]
            value: object = _patterns(raw) if setting.kind == "patterns" else raw
            if setting.kind == "bytes":
                value = int(raw) if raw.strip().isdigit() else raw
            return value, f"${setting.env}"
        if key in self._found:
            value, line = self._found[key]
            return value, f"{self.path}:{line}" if line else str(self.path)
        return setting.default, "default"

    def export_env(self) -> None:
        """The file's values of settings that have an environment variable,
        set as that variable in this process where it is unset (the
        environment wins)."""
        for key, (value, _) in self._found.items():
            setting = BY_KEY[key]
            if setting.env is None or os.environ.get(setting.env):
                continue
            os.environ[setting.env] = ":".join(value) if isinstance(value, list) else str(value)


_CURRENT: list[Settings] = []


def current() -> Settings:
    """This process's settings, read once; what was wrong with the file
    said once, on stderr."""
    if not _CURRENT:
        settings = Settings.read()
        _CURRENT.append(settings)
        if settings.problems:
            from multiserver_cli._state import warn

            for problem in settings.problems:
                warn(problem)
    return _CURRENT[0]


def apply(args: object, wanted: dict[str, str | None]) -> None:
    """A command's settings (``Command.SETTINGS``: setting -> the
    attribute of ``args`` its flag fills, None for one read through its
    environment variable): an attribute its flag left None takes the
    setting; the others are exported (``export_env``)."""
    settings = current()
    for key, attr in wanted.items():
        if attr is None:
            continue
        if getattr(args, attr, None) is None:
            setattr(args, attr, settings.value(key))
    if any(attr is None for attr in wanted.values()):
        settings.export_env()


def _checked(setting: Setting, value: object) -> object:
    """``value`` from the file, as ``setting`` takes it; ValueError (its
    words for a person) if it is not one."""
    kind = setting.kind
    if kind == "key":
        if not isinstance(value, str):
            raise ValueError('a string such as "^A"')
        from multiserver_cli.attach._keys import parse_key

        parse_key(value)
        return value
    if kind == "bytes":
        from multiserver import MAX_BUFFER_LIMIT

        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError("a whole number of bytes")
        if not 0 <= value <= MAX_BUFFER_LIMIT:
            raise ValueError(f"must be within 0..{MAX_BUFFER_LIMIT}, got {value}")
        return value
    if kind == "seconds":
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError("a number of seconds")
        if not 0 < value <= 86400:
            raise ValueError(f"must be more than 0 and at most 86400 seconds, got {value}")
        return float(value)
    if kind == "patterns":
        if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
            raise ValueError('a list of names or globs, such as ["AWS_*", "PGPASSWORD"]')
        if any(":" in p for p in value):
            raise ValueError("a name or glob cannot hold ':'")
        return list(value)
    if kind == "path":
        if not isinstance(value, str) or not os.path.isabs(value):
            raise ValueError('an absolute path, such as "/bin/zsh"')
        return value
    if kind == "grace":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError('seconds (60-3600) or "none"')
        from restore import HostSettingError, parse_grace

        text = value if isinstance(value, str) else f"{value:g}"
        try:
            parse_grace(text)
        except HostSettingError as exc:
            raise ValueError(str(exc).replace("--grace", "it")) from None
        return text
    raise AssertionError(kind)


def _patterns(raw: str) -> list[str]:
    return [p for p in raw.split(":") if p]


def _key_lines(text: str) -> dict[str, int]:
    """The line of each top-level key of ``text`` (a TOML document that
    parsed): its first line that assigns it outside any table."""
    lines: dict[str, int] = {}
    in_table = False
    for number, line in enumerate(text.splitlines(), 1):
        table = _TABLE_LINE.match(line)
        if table:
            in_table = True
            name = table.group(1).split(".")[0].strip().strip("\"'")
            lines.setdefault(name, number)
            continue
        m = _KEY_LINE.match(line)
        if m and not in_table:
            lines.setdefault(next(g for g in m.groups() if g is not None), number)
    return lines
