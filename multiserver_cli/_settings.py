"""The person's settings: ``config.toml`` in the config dir
(``$MULTISERVER_CONFIG_DIR``, else the XDG config dir, beside hosts.json),
and the one table of every setting (``SETTINGS``): the rows only the
command line reads (the detach key, restore's deadline, the shell, a
host's grace), then every ``MULTISERVER_*`` variable
(``multiserver.ENVIRONMENT``, which the daemon and the blocking client
that starts it read). Each row's kind checks its value wherever it
comes from, and a value it refuses is one line naming the source and what
is allowed (``SettingError``).

Each setting is decided in one order: a flag on the command line wins, then
the environment variable of that setting (those that have one), then the
file, then the default. ``multiserver config`` shows each effective value
and where it came from.

Cheap when there is no file: one ``stat``, and ``tomllib`` (about 20 ms to
import) is imported only when the file exists. Only the commands that use a
setting of the file read it (``Command.SETTINGS``, applied by ``main``):
``ls``, ``peek`` and ``version`` never do.

A bad file is never fatal. A syntax error: the file is ignored; an unknown
key or a value its kind refuses: that key is ignored, and the variable or
the default is used, so that no command starts a daemon with a value it
would refuse. A key that is a setting no more (``RETIRED``) is one line
too, saying why. Each is one line, ``PATH:LINE: what``, said on
stderr by a command that reads the file; the command goes on.
``multiserver config`` says them too and exits 1, so a person can check a
file they edited. A bad variable, or a bad flag, is a usage error: every
command but ``config`` refuses it (exit 2; ``main``, ``_args.SettingFlag``).

The file's values for settings that have an environment variable reach the
code that reads that variable as the variable itself (``export_env``, when
it is unset): the daemon a command starts gets its buffer limit, and ``new``
its strip and keep patterns, on the path they already take.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from multiserver import SettingError
from multiserver.internal import ENVIRONMENT, AbsolutePath, Kind, Seconds, Setting
from multiserver_cli.attach._keys import DEFAULT_DETACH

FILE_NAME = "config.toml"


class DetachKey(Kind):
    """A detach key as a person writes it (``attach._keys.parse_key``)."""

    allowed = "must be ^ and a letter or one of @[\\]^_? (such as ^A), or one ASCII character"

    def from_text(self, text: str) -> str:
        from multiserver_cli.attach._keys import parse_key

        parse_key(text)
        return text


# The rows only the command line reads, then every variable's; in the
# order `multiserver config` shows them.
_COMMAND_ROWS = (
    Setting(
        "detach_key",
        DetachKey(),
        DEFAULT_DETACH,
        "the detach key of new and attach",
        key="detach_key",
        flags=("-e KEY (new, attach)",),
    ),
    Setting(
        "restore_timeout",
        Seconds(0, 86400),
        10.0,
        "restore's deadline",
        key="restore_timeout",
        flags=("--timeout S (restore; service install: the restore at login)",),
    ),
    Setting(
        "shell",
        AbsolutePath(),
        "",
        "what new runs with no command (default: $SHELL, else the login shell)",
        key="shell",
    ),
    Setting(
        "host_grace",
        # restore's GRACE_MIN and GRACE_MAX, which the hosts file is held to
        # (tests/cli/test_settings.py compares them).
        Seconds(60, 3600, closed=True, words=("none",)),
        300.0,
        "how long a session started through a host lives on after its last client",
        key="host_grace",
        flags=("--grace S (host add)",),
    ),
)
_ROWS = {s.name: s for s in (*_COMMAND_ROWS, *ENVIRONMENT)}
_FILE_ORDER = (
    "detach_key",
    "buffer_limit",
    "share_size",
    "restore_timeout",
    "strip_env",
    "keep_env",
    "shell",
    "host_grace",
)
SETTINGS: tuple[Setting, ...] = (
    *(_ROWS[name] for name in _FILE_ORDER),
    *(s for s in ENVIRONMENT if s.key is None),
)
BY_NAME = {s.name: s for s in SETTINGS}
# Keys of settings there are no more, and why: a file that still has one
# is said so (and the key left out), not told of an unknown setting.
RETIRED = {
    "save_every": "the daemon keeps what a session shows as it comes: there is no saver",
}
BY_KEY = {s.key: s for s in SETTINGS if s.key is not None}

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
        from multiserver import UnsafeDirectory
        from multiserver.internal import check_path_chain

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
            if key in RETIRED:
                problems.append(f"{where}: {key} is a setting no more ({RETIRED[key]}); ignored")
                continue
            if setting is None:
                known = ", ".join(BY_KEY)
                problems.append(f"{where}: unknown setting {key!r} (known: {known}); ignored")
                continue
            try:
                found[key] = (setting.from_toml(value, where), line)
            except SettingError as exc:
                problems.append(f"{exc}; ignored")
        return cls(path, found, problems)

    def value(self, name: str) -> object:
        return self.decide(name)[0]

    def decide(self, name: str) -> tuple[object, str]:
        """Setting ``name``'s value and where it came from: ``$VAR``,
        ``PATH:LINE`` or ``default``. Raises SettingError (one line) for a
        bad variable."""
        setting = BY_NAME[name]
        if setting.env is not None and os.environ.get(setting.env):
            return setting.from_env(), f"${setting.env}"
        if setting.key in self._found:
            value, line = self._found[setting.key]
            return value, f"{self.path}:{line}" if line else str(self.path)
        return setting.default, "default"

    def export_env(self) -> None:
        """The file's values of settings that have an environment variable,
        set as that variable in this process where it is unset (the
        environment wins), written as the variable's reader reads them."""
        for key, (value, _) in self._found.items():
            setting = BY_KEY[key]
            if setting.env is None or os.environ.get(setting.env):
                continue
            os.environ[setting.env] = setting.kind.text(value)


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
    environment variable): an attribute whose flag was not given
    (``_args.SettingFlag`` notes ``ATTR_given``) takes the setting; the
    others are exported (``export_env``). The file is read only for a
    setting it may hold. Raises SettingError for a bad variable (``main``
    has checked them all before)."""
    for name, attr in wanted.items():
        if attr is None or getattr(args, f"{attr}_given", False):
            continue
        setting = BY_NAME[name]
        if setting.key is None:
            setattr(args, attr, setting.from_env())
        else:
            setattr(args, attr, current().value(name))
    if any(attr is None and BY_NAME[name].key is not None for name, attr in wanted.items()):
        current().export_env()


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
