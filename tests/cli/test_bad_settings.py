"""Every bad setting, from each of its sources, is one line naming the
setting, the source and what is allowed, never a traceback, and nothing is
started with it (issue 35):

- a ``MULTISERVER_*`` variable: every command but ``config`` refuses it,
  exit 2, before it does anything (``config`` says it, exit 1);
- a flag: a usage error (exit 2), the same words, naming the flag;
- a key of config.toml: one line, ``PATH:LINE: key = value: ...; ignored``,
  and the command goes on with the variable or the default, so the daemon
  it starts gets a value it takes.

The table of rows is ``multiserver_cli._settings.SETTINGS``; the daemon's
side, the kinds' strictness and the daemon started by hand:
tests/multiserver/settings/test_settings.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from multiserver_cli import _settings
from multiserver_cli._settings import BY_NAME, SETTINGS, Settings
from multiserver_cli.attach._keys import parse_key
from multiserver_cli.main import main
from restore.remote._hosts import GRACE_MAX, GRACE_MIN
from tests.cli.conftest import MULTISERVER, person_env
from tests.conftest import MsDirs, daemon_pids_under

KEY = "must be ^ and a letter or one of @[\\]^_? (such as ^A), or one ASCII character"
TIMEOUT = "must be more than 0 and at most 86400 seconds"
GRACE = "must be between 60 and 3600 seconds, or none"
NUMBER = "must be a whole number from 1 to 999999"
PATTERN = "must be a name or glob, such as 'AWS_*', not empty and without ':'"

# One or two bad values of every variable that can have one (the dirs take
# any path).
BAD_VARIABLES = [
    ("MULTISERVER_BUFFER_LIMIT", "abc"),
    ("MULTISERVER_BUFFER_LIMIT", "²"),
    ("MULTISERVER_BUFFER_LIMIT", "99999999999999999999999"),
    ("MULTISERVER_IDLE_EXIT", "nan"),
    ("MULTISERVER_IDLE_EXIT", "-1"),
    ("MULTISERVER_FRAME_TIMEOUT", "inf"),
    ("MULTISERVER_MAX_CONNECTIONS", "٣"),
    ("MULTISERVER_DAEMON", "0"),
    ("MULTISERVER_DAEMON", "abc"),
    ("MULTISERVER_SSH", "ssh -o 'ProxyCommand=x"),
]

# Every command, as a person would run it.
COMMAND_LINES = [
    ["new", "-d", "--", "true"],
    ["attach", "x"],
    ["ls"],
    ["peek", "x"],
    ["kill", "x"],
    ["restore"],
    ["orphans"],
    ["save"],
    ["save", "--from", "tmux"],
    ["version"],
    ["host", "ls"],
    ["stop"],
    ["upgrade"],
    ["service", "status"],
    ["daemon"],
    ["daemon", "--foreground"],
    ["completion", "bash"],
]


def _line(variable: str, raw: str) -> str:
    [setting] = [s for s in SETTINGS if s.env == variable]
    return f"{variable}={shlex.quote(raw)}: {setting.kind.allowed}"


def _refused(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``multiserver ARGV`` run here: its exit status, stdout and stderr."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capfd.readouterr()
    assert isinstance(exited.value.code, int)
    return exited.value.code, out, err


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=" ".join)
@pytest.mark.parametrize(("variable", "raw"), BAD_VARIABLES)
def test_every_command_refuses_a_bad_variable_in_one_line(
    ms_dirs: MsDirs,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    variable: str,
    raw: str,
) -> None:
    monkeypatch.setenv(variable, raw)
    status, out, err = _refused(argv, capfd)
    assert (status, out, err) == (2, "", f"multiserver: {_line(variable, raw)}\n")
    assert not ms_dirs.paths.socket.exists()
    assert daemon_pids_under(ms_dirs.root) == []


@pytest.mark.parametrize(
    ("argv", "flag", "raw", "allowed"),
    [
        (["new", "-d", "-e", "^ß", "--", "true"], "-e", "^ß", KEY),
        (["new", "-d", "-e", "^ı", "--", "true"], "-e", "^ı", KEY),
        (["attach", "-e", "^é", "x"], "-e", "^é", KEY),
        (["attach", "-e", "ab", "x"], "-e", "ab", KEY),
        (["attach", "-e", "", "x"], "-e", "", KEY),
        (["attach", "-e", "M-x", "x"], "-e", "M-x", KEY),
        (["attach", "-e", "^1", "x"], "-e", "^1", KEY),
        (["--daemon", "0", "ls"], "--daemon", "0", NUMBER),
        (["--daemon", "٣", "new", "-d", "--", "true"], "--daemon", "٣", NUMBER),
        (["--daemon=", "ls"], "--daemon", "", NUMBER),
        (["restore", "--timeout", "nan"], "--timeout", "nan", TIMEOUT),
        (["restore", "--timeout", "0"], "--timeout", "0", TIMEOUT),
        (["restore", "--timeout", "inf"], "--timeout", "inf", TIMEOUT),
        (["service", "install", "--timeout", "-1"], "--timeout", "-1", TIMEOUT),
        (["host", "add", "h", "--grace", "5"], "--grace", "5", GRACE),
        (["host", "add", "h", "--grace", "nan"], "--grace", "nan", GRACE),
        (["host", "add", "h", "--grace", "٣٠٠"], "--grace", "٣٠٠", GRACE),
        (["new", "-d", "--strip-env", "", "--", "true"], "--strip-env", "", PATTERN),
        (["restore", "--keep-env", "A:B"], "--keep-env", "A:B", PATTERN),
    ],
)
def test_a_bad_flag_is_a_usage_error_in_the_same_words(
    ms_dirs: MsDirs,
    capfd: pytest.CaptureFixture[str],
    argv: list[str],
    flag: str,
    raw: str,
    allowed: str,
) -> None:
    status, out, err = _refused(argv, capfd)
    words = [w for w in argv if not w.startswith("--daemon")]
    command = " ".join(words[:2]) if words[0] == "host" else words[0]  # host add: a sub-parser
    help_of = "multiserver" if flag == "--daemon" else f"multiserver {command}"
    line = f"multiserver: {flag} {shlex.quote(raw)}: {allowed} (see: {help_of} --help)\n"
    assert (status, out, err) == (2, "", line)
    assert not ms_dirs.paths.socket.exists()


@pytest.mark.parametrize(
    ("spec", "sent"),
    [
        ("^A", b"\x01"),
        ("^a", b"\x01"),
        ("^\\", b"\x1c"),
        ("^^", b"\x1e"),
        ("^?", b"\x7f"),
        ("^@", b"\x00"),
        ("^[", b"\x1b"),
        ("^", b"^"),  # one ASCII character: the caret key itself
        ("x", b"x"),
        ("^ß", None),  # 'ß'.upper() is 'SS': was a TypeError
        ("^ı", None),  # 'ı'.upper() is 'I': was Tab
        ("^é", None),
        ("^ſ", None),  # 'ſ'.upper() is 'S'
        ("é", None),
        ("", None),
        ("ab", None),
        ("^^^", None),
        ("^1", None),
        ("^ ", None),
        ("M-x", None),
    ],
)
def test_a_detach_key_is_a_key_a_terminal_sends_or_refused(spec: str, sent: bytes | None) -> None:
    setting = BY_NAME["detach_key"]
    if sent is None:
        with pytest.raises(ValueError):
            parse_key(spec)
        with pytest.raises(ValueError) as refused:
            setting.from_flag("-e", spec)
        assert str(refused.value) == f"-e {shlex.quote(spec)}: {KEY}"
    else:
        assert parse_key(spec) == sent
        assert setting.from_flag("-e", spec) == spec


BAD_KEYS = [
    ('detach_key = "^ß"\n', 'detach_key = "^ß"', KEY),
    ('detach_key = ""\n', 'detach_key = ""', KEY),
    ("detach_key = 1\n", "detach_key = 1", KEY),
    (
        'buffer_limit = "abc"\n',
        'buffer_limit = "abc"',
        "must be a whole number of bytes from 0 to 8388608",
    ),
    (
        "buffer_limit = 99999999999999999999\n",
        "buffer_limit = 99999999999999999999",
        "must be a whole number of bytes from 0 to 8388608",
    ),
    (
        "buffer_limit = -1\n",
        "buffer_limit = -1",
        "must be a whole number of bytes from 0 to 8388608",
    ),
    ("restore_timeout = inf\n", "restore_timeout = inf", TIMEOUT),
    ("restore_timeout = 0\n", "restore_timeout = 0", TIMEOUT),
    ('host_grace = "٣٠٠"\n', 'host_grace = "٣٠٠"', GRACE),
    ("host_grace = 59\n", "host_grace = 59", GRACE),
    ('shell = "zsh"\n', 'shell = "zsh"', 'must be an absolute path, such as "/bin/zsh"'),
    (
        'strip_env = ["A:B"]\n',
        'strip_env = ["A:B"]',
        'must be a list of names or globs, such as ["AWS_*", "PGPASSWORD"],'
        ' none empty or holding ":"',
    ),
    (
        'keep_env = "X"\n',
        'keep_env = "X"',
        'must be a list of names or globs, such as ["AWS_*", "PGPASSWORD"],'
        ' none empty or holding ":"',
    ),
]


@pytest.mark.parametrize(("text", "shown", "allowed"), BAD_KEYS)
def test_a_bad_key_of_the_file_is_one_line_and_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, shown: str, allowed: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"# mine\n{text}")
    read = Settings.read(path)
    assert read.problems == [f"{path}:2: {shown}: {allowed}; ignored"]
    key = shown.split(" =")[0]
    monkeypatch.delenv(BY_NAME[key].env or "UNSET", raising=False)
    assert read.decide(key) == (BY_NAME[key].default, "default")


def test_a_key_that_is_a_setting_no_more_is_said_so(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("save_every = 5\n")
    assert Settings.read(path).problems == [
        f"{path}:1: save_every is a setting no more (the daemon keeps what a session shows as"
        " it comes: there is no saver); ignored"
    ]


def test_the_grace_row_is_the_hosts_files_bounds() -> None:
    kind = BY_NAME["host_grace"].kind
    assert (kind.lo, kind.hi) == (GRACE_MIN, GRACE_MAX)  # type: ignore[attr-defined]


def test_a_started_daemon_never_gets_what_the_file_has_wrong(ms_dirs: MsDirs) -> None:
    """A file with a buffer limit the daemon would refuse, a detach key no
    terminal sends and a key that is a setting no more: ``new`` says each
    in one line, goes on, and starts the daemon with its default."""
    env = person_env(ms_dirs)
    config = Path(env["MULTISERVER_CONFIG_DIR"])
    config.mkdir(exist_ok=True)
    path = config / "config.toml"
    path.write_text('buffer_limit = 99999999999\ndetach_key = "^ı"\nsave_every = 5\n')
    done = subprocess.run(
        [MULTISERVER, "new", "-d", "-n", "s", "--", "sleep", "600"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "s\n"), done.stderr
    assert done.stderr == (
        f"multiserver: {path}:1: buffer_limit = 99999999999: must be a whole number of bytes"
        " from 0 to 8388608; ignored\n"
        f'multiserver: {path}:2: detach_key = "^ı": {KEY}; ignored\n'
        f"multiserver: {path}:3: save_every is a setting no more (the daemon keeps what a"
        " session shows as it comes: there is no saver); ignored\n"
    )
    [daemon] = daemon_pids_under(ms_dirs.root)
    assert "--buffer-limit" not in _cmdline(daemon)  # the daemon's default


def _cmdline(pid: int) -> list[str]:
    deadline = time.monotonic() + 10
    while True:  # a process just spawned may still show its parent's argv
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [os.fsdecode(a) for a in f.read().split(b"\0") if a]
        if "multiserver" in " ".join(argv) or time.monotonic() > deadline:
            return argv
        time.sleep(0.05)


def test_config_says_every_bad_setting_and_exits_1(ms_dirs: MsDirs) -> None:
    env = person_env(ms_dirs)
    config = Path(env["MULTISERVER_CONFIG_DIR"])
    config.mkdir(exist_ok=True)
    path = config / "config.toml"
    path.write_text("restore_timeout = 0\n")
    env.update(MULTISERVER_IDLE_EXIT="nan", MULTISERVER_BUFFER_LIMIT="²")
    done = subprocess.run(
        [MULTISERVER, "config", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    got = json.loads(done.stdout)
    assert got["problems"] == [
        f"{path}:1: restore_timeout = 0: {TIMEOUT}; ignored",
        _line("MULTISERVER_BUFFER_LIMIT", "²"),
        _line("MULTISERVER_IDLE_EXIT", "nan"),
    ]
    assert got["settings"]["MULTISERVER_IDLE_EXIT"] == {
        "value": "nan",
        "from": "$MULTISERVER_IDLE_EXIT (refused)",
    }
    assert got["settings"]["restore_timeout"] == {"value": 10.0, "from": "default"}
    assert got["settings"]["MULTISERVER_SSH"] == {"value": ["ssh"], "from": "default"}
    # And the same command, for a person: the lines on stderr, the table.
    shown = subprocess.run(
        [MULTISERVER, "config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 1
    assert shown.stderr.splitlines()[:3] == [f"multiserver: {p}" for p in got["problems"]]
    assert "Traceback" not in shown.stderr


def test_a_bad_variable_starts_nothing_end_to_end(ms_dirs: MsDirs) -> None:
    """The issue's case: the daemon died as it started and the command said
    only "closed the connection"."""
    env = person_env(ms_dirs)
    env["MULTISERVER_IDLE_EXIT"] = "nan"
    done = subprocess.run(
        [MULTISERVER, "new", "-d", "--", "sleep", "600"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"multiserver: {_line('MULTISERVER_IDLE_EXIT', 'nan')}\n"
    assert not ms_dirs.paths.socket.exists()
    assert daemon_pids_under(ms_dirs.root) == []


def test_apply_reads_the_file_only_for_a_setting_it_may_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_settings, "_CURRENT", [])
    monkeypatch.setattr(_settings.Settings, "read", lambda *_: pytest.fail("file read"))
    _settings.apply(object(), {"daemon": None, "ssh": None})
