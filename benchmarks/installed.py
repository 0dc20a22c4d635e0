"""The ``multiserver`` command as a user has it: the project installed from
a wheel (not editable) into a venv of its own, beside the dev venv.

Every figure that runs the command line in a fresh process runs this one.
The dev venv's editable install would time what no user pays: its import
hook (a ``.pth`` finder that maps the packages to the checkout) and, where
``PYTHONDONTWRITEBYTECODE`` is set, compiling every module on every start.

The venv is made with the dev venv's interpreter (``python -m venv
--without-pip``, so the same base interpreter), and the dev venv's ``pip``
installs into it (``pip --python``) a copy of the checkout's sources,
uncommitted changes included, with the dependencies pinned to the versions
the dev venv has (a constraints file from its installed distributions).
pip builds the wheel, installs it and compiles the bytecode, as for any
user. It lives in ``benchmarks/out/venv-KEY``, where KEY hashes the
sources, the interpreter's version and those pins: a run reuses the venv
of an unchanged tree, and makes a new one (removing the old) when the
sources change.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
PREFIX = "venv-"
# What the wheel is built from: the packages and what pyproject.toml names.
SOURCES = ("pyproject.toml", "README.md", "multiserver", "restore", "adopter", "multiserver_cli")
SKIPPED = ("__pycache__", "*.pyc", "*.egg-info", "build")
PROJECT = "multiserver"
COMPLETE = ".complete"  # written last: a venv without it is half made
INSTALL_TIMEOUT = 300.0


@attrs.frozen
class Installed:
    venv: Path
    built_seconds: float | None  # None: reused

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def command(self) -> str:
        return str(self.venv / "bin" / "multiserver")

    def describe(self) -> str:
        how = "reused" if self.built_seconds is None else f"built in {self.built_seconds:.1f} s"
        return f"a wheel of this checkout in its own venv, {_rel(self.venv)} ({how})"


def _source_files() -> Iterator[Path]:
    for name in SOURCES:
        path = REPO / name
        if path.is_file():
            yield path
            continue
        for sub in sorted(path.rglob("*")):
            rel = sub.relative_to(REPO)
            skipped = any(fnmatch.fnmatch(part, p) for part in rel.parts for p in SKIPPED)
            if sub.is_file() and not skipped:
                yield sub


def _pins() -> str:
    """The dev venv's distributions, but the project: the versions the
    installed one gets."""
    names: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() != PROJECT:
            names[name.lower()] = f"{name}=={dist.version}"
    return "".join(f"{line}\n" for _, line in sorted(names.items()))


def _key(files: list[Path], pins: str) -> str:
    h = hashlib.sha256()
    h.update(sys.version.encode())
    h.update(pins.encode())
    for path in files:
        h.update(str(path.relative_to(REPO)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")


def _build(venv: Path, files: list[Path], pins: str) -> None:
    work = venv.with_name(venv.name + ".src")
    shutil.rmtree(work, ignore_errors=True)
    try:
        for path in files:
            dest = work / path.relative_to(REPO)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        constraints = work / "constraints.txt"
        constraints.write_text(pins)
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv")
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv / "bin" / "python"),
                "install",
                "-q",
                "--no-warn-script-location",
                "--disable-pip-version-check",
                "-c",
                str(constraints),
                str(work),
            ],
            "pip install of the wheel",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check(venv: Path) -> None:
    """The command's packages load from the venv, not from the checkout."""
    probe = "import multiserver, multiserver_cli.main; print(multiserver.__file__)"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=venv,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    where = Path(done.stdout.strip())
    if done.returncode != 0 or not where.is_relative_to(venv):
        raise RuntimeError(f"the installed multiserver loads from {where}: {done.stderr[-500:]}")


@functools.cache
def installed() -> Installed:
    """The venv for this tree: reused if made before, else made now (a few
    seconds), removing the venvs of other trees."""
    files = list(_source_files())
    pins = _pins()
    venv = OUT / f"{PREFIX}{_key(files, pins)}"
    built: float | None = None
    if not (venv / COMPLETE).exists():
        t0 = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        OUT.mkdir(parents=True, exist_ok=True)
        _build(venv, files, pins)
        _check(venv)
        (venv / COMPLETE).touch()
        built = time.monotonic() - t0
    for old in OUT.glob(f"{PREFIX}*"):
        if old != venv and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    return Installed(venv, built)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)
