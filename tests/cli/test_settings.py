"""config.toml (``_settings``): a flag wins, then the setting's environment
variable, then the file, then the default; a bad file is one line naming
the file and the line, never fatal; with no file, nothing is imported for
it; ``multiserver config`` says where each value came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from multiserver_cli import _settings
from multiserver_cli._settings import Settings
from tests.cli.conftest import MULTISERVER, person_env
from tests.conftest import MsDirs

GOOD = """\
# mine
detach_key = "^A"
buffer_limit = 65536
restore_timeout = 3.5
strip_env = ["AWS_*", "PGPASSWORD"]
keep_env = ["AWS_REGION"]
shell = "/bin/zsh"
host_grace = "none"
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_the_file_then_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MULTISERVER_BUFFER_LIMIT", raising=False)
    monkeypatch.delenv("MULTISERVER_STRIP_ENV", raising=False)
    monkeypatch.delenv("MULTISERVER_KEEP_ENV", raising=False)
    path = _file(tmp_path, GOOD)
    s = Settings.read(path)
    assert s.problems == []
    assert s.decide("detach_key") == ("^A", f"{path}:2")
    assert s.decide("buffer_limit") == (65536, f"{path}:3")
    assert s.decide("strip_env") == (["AWS_*", "PGPASSWORD"], f"{path}:5")
    assert s.decide("host_grace") == (None, f"{path}:8")  # none: no grace
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", "4096")
    assert s.decide("buffer_limit") == (4096, "$MULTISERVER_BUFFER_LIMIT")
    empty = Settings.read(tmp_path / "none.toml")
    assert empty.decide("restore_timeout") == (10.0, "default")
    # The file reaches what reads the variable, unless the variable is set.
    s.export_env()
    assert os.environ["MULTISERVER_BUFFER_LIMIT"] == "4096"
    assert os.environ["MULTISERVER_STRIP_ENV"] == "AWS_*:PGPASSWORD"


def test_a_flag_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_settings, "_CURRENT", [Settings.read(_file(tmp_path, GOOD))])
    given = Namespace(timeout=7.0, timeout_given=True, detach_spec=None)
    _settings.apply(given, {"restore_timeout": "timeout", "detach_key": "detach_spec"})
    assert (given.timeout, given.detach_spec) == (7.0, "^A")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('detach_key = "^A"\nbuffer_limit = = 3\n', 2, "the file is not used"),
        ('detach_key = "^A"\n\ncolour = "red"\n', 3, "unknown setting 'colour'"),
        ('shell = "/bin/sh"\nbuffer_limit = "big"\n', 2, 'buffer_limit = "big": must be a whole'),
        ('detach_key = "^AB"\n', 1, 'detach_key = "^AB": must be ^ and a letter'),
        ("strip_env = ['A:B']\n", 1, 'strip_env = ["A:B"]: must be a list'),
        ('[env]\nstrip = ["X"]\n', 1, "unknown setting 'env'"),
    ],
)
def test_a_bad_file_is_one_line_with_file_and_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = _file(tmp_path, text)
    s = Settings.read(path)
    assert len(s.problems) == 1, s.problems
    assert s.problems[0].startswith(f"{path}:{line}: ")
    assert words in s.problems[0]
    assert "\n" not in s.problems[0]


def test_no_file_imports_no_toml_parser(tmp_path: Path) -> None:
    probe = (
        "import sys; from multiserver_cli._settings import Settings; from pathlib import Path;"
        f" Settings.read(Path({str(tmp_path / 'none.toml')!r})); print('tomllib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "False", out.stderr


def test_config_command_says_where_each_came_from(ms_dirs: MsDirs) -> None:
    env = person_env(ms_dirs)
    config = Path(env["MULTISERVER_CONFIG_DIR"])
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text('restore_timeout = 4\ncolour = "red"\n')
    env["MULTISERVER_STRIP_ENV"] = "X_*"
    out = subprocess.run(
        [MULTISERVER, "config", "--json"], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 1  # the file has a problem
    got = json.loads(out.stdout)
    path = str(config / "config.toml")
    assert got["settings"]["restore_timeout"] == {"value": 4.0, "from": f"{path}:1"}
    assert got["settings"]["strip_env"] == {"value": ["X_*"], "from": "$MULTISERVER_STRIP_ENV"}
    assert got["settings"]["detach_key"] == {"value": "^\\", "from": "default"}
    # Not set anywhere: the shell new runs, and why (issue 36: it showed "").
    assert got["settings"]["shell"] == {"value": env["SHELL"], "from": "$SHELL"}
    assert got["problems"] == [
        f"{path}:2: unknown setting 'colour' (known: " + ", ".join(_settings.BY_KEY) + "); ignored"
    ]
    # A command that reads the file says the problem in one line and goes on.
    shown = subprocess.run(
        [MULTISERVER, "restore", "--no-relaunch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"multiserver: {path}:2: unknown setting 'colour'" in shown.stderr
    assert "within 4 s" in shown.stderr
