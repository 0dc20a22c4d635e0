"""The daemon's side of the settings (``multiserver/settings/_settings.py``): every
``MULTISERVER_*`` variable is a row of one table whose kind reads it, the
same kind reads the daemon's own command line and checks ``DaemonConfig``,
and a value it refuses is one line naming where it came from. Text is read
as the ASCII a person types: what ``int`` and ``float`` take beyond that
(``'٣'``, ``'nan'``, ``' 5'``) is refused, never guessed at.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from multiserver import DaemonConfig, SettingError, default_daemon_number
from multiserver.settings._config import config_args, config_from_env
from multiserver.settings._setting_kinds import Seconds, Whole
from multiserver.settings._settings import (
    BY_NAME,
    DAEMON_FIELDS,
    ENVIRONMENT,
    daemon_options,
    env_settings,
    installed_daemon,
)
from tests.conftest import MsDirs, daemon_pids_under

ROOT = Path(__file__).resolve().parents[3]

BYTES = "must be a whole number of bytes from 0 to 8388608"
IDLE = "must be more than 0 and at most 1000000 seconds, or never"
FRAME = "must be more than 0 and at most 1000000 seconds"
CONNECTIONS = "must be a whole number from 1 to 1000000"
NUMBER = "must be a whole number from 1 to 999999"

# Text neither int() nor float() should be trusted with: other scripts'
# digits (int('٣') is 3, int('²') raises), spaces, underscores, signs,
# hex, nan and the infinities, exponents that overflow, huge numbers.
HOSTILE_NUMBERS = [
    "abc",
    "²",
    "٣",
    "３",
    " 5",
    "5 ",
    "1_0",
    "+5",
    "0x10",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "infinity",
    "1e999",
    "-1",
    "9" * 5000,
    "true",
    "5s",
    ".",
    "-",
    "e5",
]


@pytest.mark.parametrize(
    ("variable", "raw", "line"),
    [
        ("MULTISERVER_BUFFER_LIMIT", "abc", f"MULTISERVER_BUFFER_LIMIT=abc: {BYTES}"),
        ("MULTISERVER_BUFFER_LIMIT", "²", f"MULTISERVER_BUFFER_LIMIT='²': {BYTES}"),
        ("MULTISERVER_BUFFER_LIMIT", "8388609", f"MULTISERVER_BUFFER_LIMIT=8388609: {BYTES}"),
        ("MULTISERVER_BUFFER_LIMIT", "1e3", f"MULTISERVER_BUFFER_LIMIT=1e3: {BYTES}"),
        ("MULTISERVER_IDLE_EXIT", "nan", f"MULTISERVER_IDLE_EXIT=nan: {IDLE}"),
        ("MULTISERVER_IDLE_EXIT", "-1", f"MULTISERVER_IDLE_EXIT=-1: {IDLE}"),
        ("MULTISERVER_IDLE_EXIT", "0", f"MULTISERVER_IDLE_EXIT=0: {IDLE}"),
        ("MULTISERVER_IDLE_EXIT", "inf", f"MULTISERVER_IDLE_EXIT=inf: {IDLE}"),
        ("MULTISERVER_FRAME_TIMEOUT", "never", f"MULTISERVER_FRAME_TIMEOUT=never: {FRAME}"),
        ("MULTISERVER_FRAME_TIMEOUT", "1e7", f"MULTISERVER_FRAME_TIMEOUT=1e7: {FRAME}"),
        ("MULTISERVER_MAX_CONNECTIONS", "0", f"MULTISERVER_MAX_CONNECTIONS=0: {CONNECTIONS}"),
        ("MULTISERVER_MAX_CONNECTIONS", "٣", f"MULTISERVER_MAX_CONNECTIONS='٣': {CONNECTIONS}"),
        ("MULTISERVER_DAEMON", "0", f"MULTISERVER_DAEMON=0: {NUMBER}"),
        ("MULTISERVER_DAEMON", "1 ", f"MULTISERVER_DAEMON='1 ': {NUMBER}"),
        (
            "MULTISERVER_SSH",
            "ssh -o 'ProxyCommand=x",
            "MULTISERVER_SSH='ssh -o '\"'\"'ProxyCommand=x': must be a command as a shell"
            " would split it (every quote closed), such as 'ssh -F ~/.ssh/work'",
        ),
    ],
)
def test_a_bad_variable_is_one_line_naming_it(variable: str, raw: str, line: str) -> None:
    [setting] = [s for s in ENVIRONMENT if s.env == variable]
    with pytest.raises(SettingError) as refused:
        setting.from_env({variable: raw})
    assert str(refused.value) == line


@pytest.mark.parametrize("name", ["buffer_limit", "max_connections", "daemon"])
@pytest.mark.parametrize("raw", HOSTILE_NUMBERS)
def test_whole_numbers_are_ascii_digits_in_range(name: str, raw: str) -> None:
    setting = BY_NAME[name]
    with pytest.raises(SettingError) as refused:
        setting.from_env({setting.env or "": raw})
    assert "\n" not in str(refused.value)
    assert str(refused.value).endswith(f": {setting.kind.allowed}")


@pytest.mark.parametrize("name", ["idle_exit", "frame_timeout"])
@pytest.mark.parametrize("raw", [r for r in HOSTILE_NUMBERS if r not in ("+5",)] + ["+5"])
def test_seconds_are_finite_ascii_numbers_in_range(name: str, raw: str) -> None:
    setting = BY_NAME[name]
    with pytest.raises(SettingError):
        setting.from_env({setting.env or "": raw})


def test_an_empty_variable_is_unset() -> None:
    for setting in ENVIRONMENT:
        assert setting.from_env({setting.env or "": ""}) == setting.default


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("buffer_limit", "0", 0),
        ("buffer_limit", "8388608", 8 * 1024 * 1024),
        ("idle_exit", "never", None),
        ("idle_exit", "NONE", None),
        ("idle_exit", "0.1", 0.1),
        ("idle_exit", "1e6", 1e6),
        ("frame_timeout", ".5", 0.5),
        ("max_connections", "1000000", 1_000_000),
        ("daemon", "999999", 999_999),
        ("ssh", "ssh -F '/a b/config'", ["ssh", "-F", "/a b/config"]),
        ("strip_env", "A:B*::", ["A", "B*"]),
        ("runtime_dir", "relative", "relative"),
    ],
)
def test_good_values(name: str, raw: str, value: object) -> None:
    setting = BY_NAME[name]
    assert setting.from_env({setting.env or "": raw}) == value


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12) | st.from_regex(r"-?[0-9]{0,9}(\.[0-9]{0,4})?(e-?[0-9]{1,3})?"))
def test_a_kind_takes_only_values_in_range_and_reads_back_what_it_writes(raw: str) -> None:
    """One logic: whatever text a number's kind takes is a finite value in
    its range, the value it writes for another process reads back equal,
    and it is what Python reads that text as (no other reading)."""
    for kind in (Whole(0, 8 * 1024 * 1024), Seconds(0, 1e6), Seconds(1, 86400, closed=True)):
        try:
            value = kind.from_text(raw)
        except ValueError:
            continue
        assert raw.isascii() and raw.strip() == raw
        assert isinstance(value, int | float) and math.isfinite(value)
        assert kind.from_text(kind.text(value)) == value
        if isinstance(kind, Whole):
            assert kind.lo <= value <= kind.hi and value == int(raw)
        else:
            assert kind.lo <= value <= kind.hi and value == float(raw)


# --- the daemon's command line and DaemonConfig --------------------------------------


@pytest.mark.parametrize(
    ("flag", "raw", "line"),
    [
        ("--idle-exit", "nan", f"--idle-exit nan: {IDLE}"),
        ("--idle-exit", "-1", f"--idle-exit -1: {IDLE}"),
        ("--buffer-limit", "²", f"--buffer-limit '²': {BYTES}"),
        ("--buffer-limit", "", f"--buffer-limit '': {BYTES}"),
        ("--frame-timeout", "inf", f"--frame-timeout inf: {FRAME}"),
        ("--max-connections", "0", f"--max-connections 0: {CONNECTIONS}"),
    ],
)
def test_the_daemons_command_line_is_read_by_the_same_kinds(flag: str, raw: str, line: str) -> None:
    with pytest.raises(SettingError) as refused:
        daemon_options({flag: raw})
    assert str(refused.value) == line


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("idle_exit", math.nan),
        ("idle_exit", -1.0),
        ("idle_exit", math.inf),
        ("buffer_limit", True),
        ("buffer_limit", 2**80),
        ("buffer_limit", 1.0),
        ("frame_timeout", 0.0),
        ("max_connections", 0),
    ],
)
def test_daemon_config_refuses_what_no_source_may_give(field: str, value: object) -> None:
    with pytest.raises(ValueError) as refused:
        DaemonConfig(**{field: value})  # type: ignore[arg-type]
    assert str(refused.value) == f"{field} = {value!r}: {BY_NAME[field].kind.allowed}"


@settings(max_examples=200, deadline=None)
@given(
    buffer_limit=st.integers(0, 8 * 1024 * 1024),
    idle_exit=st.none() | st.floats(1e-9, 1e6),
    frame_timeout=st.floats(1e-9, 1e6),
    max_connections=st.integers(1, 1_000_000),
)
def test_a_config_crosses_the_daemons_command_line_unchanged(
    buffer_limit: int, idle_exit: float | None, frame_timeout: float, max_connections: int
) -> None:
    """What a client writes for the daemon it starts is what the daemon
    reads back: no value a client takes is one the daemon refuses."""
    config = DaemonConfig(
        buffer_limit=buffer_limit,
        idle_exit=idle_exit,
        frame_timeout=frame_timeout,
        max_connections=max_connections,
    )
    argv = config_args(config)
    read = daemon_options(dict(zip(argv[::2], argv[1::2], strict=True)))
    assert read == {field: getattr(config, field) for field in DAEMON_FIELDS}


def test_the_environment_reaches_the_config_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MULTISERVER_IDLE_EXIT", "never")
    monkeypatch.setenv("MULTISERVER_FRAME_TIMEOUT", "2.5")
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", "4096")
    monkeypatch.delenv("MULTISERVER_MAX_CONNECTIONS", raising=False)
    assert env_settings() == {
        "buffer_limit": 4096,
        "idle_exit": None,
        "frame_timeout": 2.5,
        "hello_timeout": 2.5,
    }
    monkeypatch.setenv("MULTISERVER_IDLE_EXIT", "nan")
    with pytest.raises(SettingError, match=r"^MULTISERVER_IDLE_EXIT=nan: must be"):
        config_from_env()
    monkeypatch.setenv("MULTISERVER_DAEMON", "٣")
    with pytest.raises(SettingError, match=r"^MULTISERVER_DAEMON='٣': must be"):
        default_daemon_number()


def _by_hand(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        installed_daemon(*args), capture_output=True, text=True, timeout=60, cwd="/"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--idle-exit", "nan"], f"--idle-exit nan: {IDLE}"),
        (["--idle-exit", "-1"], f"--idle-exit -1: {IDLE}"),
        (["--buffer-limit", "abc"], f"--buffer-limit abc: {BYTES}"),
        (["--frame-timeout", "0"], f"--frame-timeout 0: {FRAME}"),
        (["--max-connections", "²"], f"--max-connections '²': {CONNECTIONS}"),
    ],
)
def test_the_daemon_started_by_hand_refuses_a_bad_value_in_one_line(
    ms_dirs: MsDirs, args: list[str], line: str
) -> None:
    """Whoever starts it: the option is refused before anything is made
    (the other options are all there and good)."""
    r, w = os.pipe()
    try:
        done = subprocess.run(
            installed_daemon(
                "--socket",
                str(ms_dirs.paths.socket),
                "--ready-fd",
                str(w),
                "--lock-fd",
                str(w),
                *args,
            ),
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            pass_fds=(w,),
        )
    finally:
        os.close(r)
        os.close(w)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"python -m multiserver: error: {line} (see --help)\n"
    assert not ms_dirs.paths.socket.exists()
    assert daemon_pids_under(ms_dirs.root) == []
    # And alone, as a person would try it.
    alone = _by_hand(*args)
    assert (alone.returncode, alone.stderr) == (2, done.stderr)


# --- the table is every variable, and every one is documented ------------------------


def _shipped_sources() -> str:
    return "\n".join(
        p.read_text()
        for package in ("multiserver", "multiserver_cli", "restore", "adopter")
        for p in (ROOT / package).rglob("*.py")
    )


def test_every_variable_the_code_reads_is_a_row_of_the_table() -> None:
    named = set(re.findall(r"MULTISERVER_[A-Z][A-Z_]*[A-Z]", _shipped_sources()))
    rows = {s.env for s in ENVIRONMENT}
    assert named == rows


def test_every_variable_is_documented_where_a_person_looks() -> None:
    readme = (ROOT / "README.md").read_text()
    for setting in ENVIRONMENT:
        assert f"`{setting.env}`" in readme, setting.env
