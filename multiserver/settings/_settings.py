"""Every ``MULTISERVER_*`` variable as one table (``ENVIRONMENT``), read by
the daemon, the blocking client that starts it, the ssh of ``restore``
and the command line alike; and the daemon's settings
as its own command line carries them (``settings_args``,
``daemon_options``). Pure, stdlib only: the daemon and the light client
import it (no attrs, no typing).

A row (``Setting``) is a setting's name, its kind, its default, its
environment variable, its key in ``config.toml`` (the command line's file,
``multiserver_cli._settings``, which adds the rows only it reads) and the
flags that carry it. The kind checks a value wherever it comes from, and
one it refuses is one line naming where it came from (``SettingError``)::

    MULTISERVER_BUFFER_LIMIT=abc: must be a whole number of bytes from 0 to 8388608
    --idle-exit nan: must be more than 0 and at most 1000000 seconds, or never
    /home/me/.config/multiserver/config.toml:3: restore_timeout = 0: must be more than 0 and at most 86400 seconds

The kinds, and how a row says a refused value: ``_setting_kinds``. An
empty variable is an unset one.
"""

from __future__ import annotations

import os
import sys

from multiserver._errors import SettingError
from multiserver.settings._setting_kinds import (
    Choice,
    Dir,
    Patterns,
    Seconds,
    Setting,
    Whole,
    Words,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

MAX_BUFFER_LIMIT = 8 * 1024 * 1024  # a Claimed frame must stay under MAX_FRAME

# --- the table -------------------------------------------------------------------

ENVIRONMENT: tuple[Setting, ...] = (
    Setting(
        "daemon",
        Whole(1, 999_999),
        1,
        "which daemon the commands use",
        env="MULTISERVER_DAEMON",
        flags=("--daemon N",),
    ),
    Setting(
        "runtime_dir",
        Dir(),
        None,
        "where the daemons' sockets and locks are",
        env="MULTISERVER_RUNTIME_DIR",
    ),
    Setting(
        "state_dir",
        Dir(),
        None,
        "where the logs and the saved arrangement are",
        env="MULTISERVER_STATE_DIR",
    ),
    Setting(
        "config_dir",
        Dir(),
        None,
        "where config.toml and hosts.json are",
        env="MULTISERVER_CONFIG_DIR",
    ),
    Setting(
        "buffer_limit",
        Whole(0, MAX_BUFFER_LIMIT, "bytes"),
        1024 * 1024,
        "bytes of output a daemon keeps per session nobody holds",
        env="MULTISERVER_BUFFER_LIMIT",
        key="buffer_limit",
        flags=("--buffer-limit BYTES (python -m multiserver)",),
    ),
    Setting(
        "idle_exit",
        Seconds(0, 1e6, words=("never", "none")),
        5.0,
        "seconds a daemon started on demand waits, with no session and no client, before it exits",
        env="MULTISERVER_IDLE_EXIT",
        flags=("--idle-exit S (python -m multiserver)",),
    ),
    Setting(
        "frame_timeout",
        Seconds(0, 1e6),
        10.0,
        "seconds a daemon waits for the rest of a client's message, and for a new client's first",
        env="MULTISERVER_FRAME_TIMEOUT",
        flags=("--frame-timeout S (python -m multiserver)",),
    ),
    Setting(
        "max_connections",
        Whole(1, 1_000_000),
        512,
        "clients a daemon serves at once",
        env="MULTISERVER_MAX_CONNECTIONS",
        flags=("--max-connections N (python -m multiserver)",),
    ),
    Setting(
        "share_size",
        Choice("latest", "smallest"),
        "latest",
        "the size of a session several terminals share: the one that typed last's, or the smallest",
        env="MULTISERVER_SHARE_SIZE",
        key="share_size",
        flags=("--share-size latest|smallest (python -m multiserver)",),
    ),
    Setting(
        "strip_env",
        Patterns(),
        [],
        "names or globs left out of a new session's environment, besides the default credentials",
        env="MULTISERVER_STRIP_ENV",
        key="strip_env",
        flags=("--strip-env PATTERN (new, attach, restore)",),
    ),
    Setting(
        "keep_env",
        Patterns(),
        [],
        "names or globs kept although stripped ('*': no credential is stripped)",
        env="MULTISERVER_KEEP_ENV",
        key="keep_env",
        flags=("--keep-env PATTERN (new, attach, restore)",),
    ),
    Setting(
        "ssh",
        Words(),
        ["ssh"],
        "the ssh command that reaches hosts",
        env="MULTISERVER_SSH",
    ),
)
BY_NAME = {s.name: s for s in ENVIRONMENT}


def from_environment(name: str, environ: Mapping[str, str] | None = None) -> object:
    """The value of setting ``name`` (a row of ``ENVIRONMENT``) from the
    environment, else its default; SettingError (one line) if refused."""
    return BY_NAME[name].from_env(environ)


def default_daemon_number() -> int:
    """``$MULTISERVER_DAEMON``, else 1; SettingError (a ValueError) if it
    is not a daemon's number."""
    number = from_environment("daemon")
    assert isinstance(number, int)
    return number


def environment_problems(environ: Mapping[str, str] | None = None) -> list[SettingError]:
    """What is wrong with the ``MULTISERVER_*`` variables set: one
    SettingError each, in the table's order."""
    problems = []
    for setting in ENVIRONMENT:
        try:
            setting.from_env(environ)
        except SettingError as exc:
            problems.append(exc)
    return problems


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """SettingError for the first bad ``MULTISERVER_*`` variable."""
    problems = environment_problems(environ)
    if problems:
        raise problems[0]


# --- the daemon's settings -------------------------------------------------------

# DaemonConfig's fields that are settings, in the order of its command line.
DAEMON_FIELDS = ("buffer_limit", "idle_exit", "frame_timeout", "max_connections", "share_size")


def option(field: str) -> str:
    """The daemon's command-line option for ``field``: ``--buffer-limit``."""
    return "--" + field.replace("_", "-")


def env_settings(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """``DaemonConfig`` fields from the environment: those set. Raises
    SettingError (one line)."""
    environ = os.environ if environ is None else environ
    kwargs: dict[str, object] = {}
    for field in DAEMON_FIELDS:
        setting = BY_NAME[field]
        if environ.get(setting.env or ""):
            kwargs[field] = setting.from_env(environ)
    if "frame_timeout" in kwargs:
        kwargs["hello_timeout"] = kwargs["frame_timeout"]
    return kwargs


def installed_daemon(*args: str) -> list[str]:
    """The installed daemon code, run by this interpreter with ``-P``, so
    that ``-m`` puts no directory of the caller's first on ``sys.path`` (a
    ``multiserver/`` folder where a person typed a command would be the
    daemon's code otherwise). A daemon's start (``_spawn``), and its
    upgrade's check and exec (``_upgrade``), run it so: here, where both
    reach it, since the daemon imports no client module."""
    return [sys.executable, "-P", "-m", "multiserver", *args]


def settings_args(settings: Mapping[str, object]) -> list[str]:
    """The daemon's command line for ``settings`` (``DaemonConfig`` fields;
    what ``daemon_options`` reads back): a field not given takes the
    daemon's default."""
    args: list[str] = []
    for field in DAEMON_FIELDS:
        if field in settings:
            args += [option(field), BY_NAME[field].kind.text(settings[field])]
    return args


def daemon_options(opts: Mapping[str, str]) -> dict[str, object]:
    """The settings of the daemon's command line (``--idle-exit`` -> its
    text), each field its default where not given. Raises SettingError
    naming the option."""
    values: dict[str, object] = {}
    for field in DAEMON_FIELDS:
        setting, flag = BY_NAME[field], option(field)
        values[field] = setting.default if flag not in opts else setting.from_flag(flag, opts[flag])
    return values
