"""What a user installs: the typed libraries carry their ``py.typed``
marker (PEP 561), or a type checker ignores their annotations; the
checkout's build tools (``tools/``) are not installed."""

from __future__ import annotations

import importlib.resources
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TYPED = ("multiserver", "restore", "adopter")


@pytest.mark.parametrize("package", TYPED)
def test_the_installed_typed_packages_have_py_typed(package: str) -> None:
    assert importlib.resources.files(package).joinpath("py.typed").is_file()


def test_the_wheel_carries_every_module_and_py_typed_but_no_tools(tmp_path: Path) -> None:
    """Built from a copy of the source (the worktree gets no build dirs)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in (*TYPED, "multiserver_cli", "tools"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    packages = [src / p for p in (*TYPED, "multiserver_cli")]
    modules = {m.relative_to(src).as_posix() for p in packages for m in p.rglob("*.py")}
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=100,
    )
    (wheel,) = out.glob("multiserver-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"{p}/py.typed" for p in TYPED} <= names
    # Every module of the packages, in every subpackage (multiserver's rooms).
    assert modules - names == set()
    assert "multiserver_cli/py.typed" not in names  # the command is no library
    assert not [n for n in names if n.startswith("tools/")]  # the build's, not the user's


def test_make_run_says_how_to_put_multiserver_on_path(tmp_path: Path) -> None:
    """After `make run`, every command of the README needs `multiserver` on
    PATH: it says how (run here with a stand-in venv whose multiserver only
    says it ran)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    fake = venv / "bin" / "multiserver"
    fake.write_text("#!/bin/sh\necho ran multiserver\n")
    fake.chmod(0o755)
    (venv / ".installed-dev").touch()
    out = subprocess.run(
        ["make", "-s", "run", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.splitlines() == [
        f"multiserver is in {venv}/bin; to type it anywhere:",
        f'  export PATH="{venv}/bin:$PATH"   # or: . {venv}/bin/activate',
        "ran multiserver",
    ]
