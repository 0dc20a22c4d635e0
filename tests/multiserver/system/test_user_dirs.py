"""The dirs a command finds with no MULTISERVER_*_DIR set: the XDG base
directory spec read without platformdirs (13 ms of imports in every
command), held to platformdirs' answer, and without its warning when
$XDG_RUNTIME_DIR is unset (ssh logins without logind, containers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "darwin", reason="macOS asks platformdirs")

PROBE = """
import json, sys, warnings
warnings.simplefilter("error")
from multiserver.internal import runtime_dir, state_dir, user_dir
ours = {"runtime": str(runtime_dir()), "state": str(state_dir()), "config": str(user_dir("config"))}
print(json.dumps({"ours": ours, "modules": "platformdirs" in sys.modules}))
"""

ORACLE = """
import json, warnings
warnings.simplefilter("ignore")
import platformdirs
print(json.dumps({
    "runtime": platformdirs.user_runtime_dir("multiserver", appauthor=False),
    "state": platformdirs.user_state_dir("multiserver", appauthor=False),
    "config": platformdirs.user_config_dir("multiserver", appauthor=False),
}))
"""


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def _env(tmp_path: Path, **xdg: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XDG_", "MULTISERVER_")) and k != "TMPDIR"
    }
    env["HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    for key, value in xdg.items():
        if value is not None:
            env[key] = value
    return env


@pytest.mark.parametrize("case", ["unset", "set", "relative", "shared-runtime"])
def test_dirs_are_platformdirs_dirs_without_its_import_or_warning(
    tmp_path: Path, case: str
) -> None:
    runtime = tmp_path / "xdg-run"
    runtime.mkdir(mode=0o700)
    if case == "shared-runtime":  # not private: platformdirs falls back, so do we
        runtime.chmod(0o755)
    xdg = {
        "unset": {},
        "set": {
            "XDG_RUNTIME_DIR": str(runtime),
            "XDG_STATE_HOME": str(tmp_path / "st"),
            "XDG_CONFIG_HOME": str(tmp_path / "cf"),
        },
        "relative": {"XDG_STATE_HOME": "rel/st", "XDG_CONFIG_HOME": "rel/cf"},
        "shared-runtime": {"XDG_RUNTIME_DIR": str(runtime)},
    }[case]
    env = _env(tmp_path, **xdg)
    probe = _run(PROBE, env)
    assert probe.returncode == 0, probe.stderr
    assert probe.stderr == ""  # no RuntimeDirWarning, nor any other
    got = json.loads(probe.stdout)
    assert got["modules"] is False
    oracle = _run(ORACLE, env)
    assert oracle.returncode == 0, oracle.stderr
    assert got["ours"] == json.loads(oracle.stdout)
    if case == "set":
        assert got["ours"]["runtime"] == str(runtime / "multiserver")
        assert got["ours"]["state"] == str(tmp_path / "st" / "multiserver")
    if case in ("unset", "relative") and not os.path.isdir(f"/run/user/{os.getuid()}"):
        assert got["ours"]["runtime"] == str(
            tmp_path / "tmp" / f"runtime-{os.getuid()}" / "multiserver"
        )
