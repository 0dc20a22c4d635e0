"""The project as a user installs it, in builds of its own: a wheel of the
checkout's tracked files (as they are in the work tree, uncommitted changes
included) with a version string of its own, and variants of it, installed
(not editable) into a fresh venv, over one another.

- ``build_wheel``: ``pip wheel`` of a copy of the tracked files, with
  ``multiserver.__version__`` set to ``VERSION+upgrade.a``. It needs the
  build backend from pyproject.toml (setuptools>=77, newer than the dev
  venv's), which pip's isolated build gets from the index it is set up with.
- ``build_wheel_at``: the same of an earlier commit (``git archive``): the
  layout before multiserver's rooms (``before_rooms``), which a daemon
  upgrades from.
- ``variant``: that wheel with another version and files patched (a wheel
  is a zip: its dist-info renamed, its METADATA and RECORD rewritten). One
  build by pip, the others in milliseconds.
- ``make_venv``: ``python -m venv --without-pip``, the dependencies copied
  from this interpreter's environment (the files of each installed
  distribution, so the same versions, without the network), and the wheel
  installed by this environment's pip (``pip --python``).

Nothing here depends on pytest: ``conftest.py`` wraps it in fixtures.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PROJECT = "multiserver"
VERSION_FILE = "multiserver/__init__.py"
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.M)
PIP_TIMEOUT = 300.0

# What a build changes in a file: its text in, its text out.
Patch = Callable[[str], str]


def checkout_version() -> str:
    """The version the checkout says it is."""
    found = VERSION_LINE.search((REPO / VERSION_FILE).read_text())
    assert found, f"no __version__ line in {VERSION_FILE}"
    return found.group(1)


def with_version(version: str) -> Patch:
    """The patch of ``multiserver/__init__.py`` that makes it ``version``."""

    def patch(text: str) -> str:
        out, n = VERSION_LINE.subn(f'__version__ = "{version}"', text)
        assert n == 1, f"{VERSION_FILE}: {n} version lines"
        return out

    return patch


def _tracked() -> Iterator[Path]:
    """The checkout's tracked files that are in the work tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=30
    ).stdout
    for name in listed.decode().split("\0"):
        if name and (REPO / name).is_file():
            yield Path(name)


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")


def build_wheel(work: Path, version: str) -> Path:
    """A wheel of the tracked files with ``version`` (``pip wheel``, in ``work``)."""
    src = work / "src"
    for rel in _tracked():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    return _wheel_of(src, work, version)


def before_rooms() -> str | None:
    """The last commit whose ``multiserver/`` was flat (the parent of the
    one that moved ``multiserver/_server.py`` into ``daemon/``); None
    where the history does not reach it (a shallow clone, an export)."""
    done = subprocess.run(
        ["git", "log", "-1", "--format=%H", "--diff-filter=D", "--", "multiserver/_server.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    moved = done.stdout.strip()
    if done.returncode != 0 or not moved:
        return None
    parent = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"{moved}^"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return parent.stdout.strip() or None


def build_wheel_at(work: Path, commit: str, version: str) -> Path:
    """A wheel of ``commit``'s files with ``version`` (in ``work``)."""
    src = work / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    return _wheel_of(src, work, version)


def _wheel_of(src: Path, work: Path, version: str) -> Path:
    """``pip wheel`` of the project in ``src``, as ``version``."""
    init = src / VERSION_FILE
    init.write_text(with_version(version)(init.read_text()))
    out = work / "wheels"
    _pip("wheel", "--no-deps", "-q", "-w", str(out), str(src))
    (wheel,) = out.glob(f"{PROJECT}-*.whl")
    return wheel


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def variant(wheel: Path, out: Path, version: str, patches: dict[str, Patch]) -> Path:
    """``wheel`` as version ``version``, with ``patches`` (path in the
    wheel -> patch) applied: a wheel pip installs as that version."""
    old = wheel.name.split("-")[1]
    old_info, new_info = f"{PROJECT}-{old}.dist-info", f"{PROJECT}-{version}.dist-info"
    patches = {VERSION_FILE: with_version(version), **patches}
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as zin:
        for item in zin.infolist():
            data = zin.read(item)
            name = item.filename.replace(old_info + "/", new_info + "/", 1)
            if name in patches:
                data = patches.pop(name)(data.decode()).encode()
            elif name == f"{new_info}/METADATA":
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {version}".encode(), data)
            files[name] = data
    assert not patches, f"not in the wheel: {sorted(patches)}"
    record = f"{new_info}/RECORD"
    lines = [_record_line(n, d) for n, d in files.items() if n != record]
    files[record] = "".join(f"{line}\n" for line in [*lines, f"{record},,"]).encode()
    out.mkdir(parents=True, exist_ok=True)
    made = out / f"{PROJECT}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(made, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, data in files.items():
            zout.writestr(name, data)
    return made


def _dependencies() -> list[importlib.metadata.Distribution]:
    """The installed distributions the project needs to run (no extras),
    found in this interpreter's environment, each once."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [PROJECT]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        for text in dist.requires or []:
            req = Requirement(text)
            key = req.name.lower().replace("_", "-")
            if key in found or (req.marker and not req.marker.evaluate({"extra": ""})):
                continue
            found[key] = importlib.metadata.distribution(req.name)
            todo.append(req.name)
    return list(found.values())


def site_packages(venv: Path) -> Path:
    (path,) = (venv / "lib").glob("python3*/site-packages")
    return path


def make_venv(venv: Path) -> None:
    """A fresh venv of this interpreter holding the project's dependencies
    (copied from this environment) and no project."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    dest = site_packages(venv)
    for dist in _dependencies():
        base = Path(str(dist.locate_file("")))
        for rel in dist.files or []:
            path = Path(str(dist.locate_file(rel))).resolve()
            if path.is_relative_to(base) and path.is_file():  # not its scripts in bin/
                target = dest / path.relative_to(base)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


def install(venv: Path, wheel: Path) -> None:
    """``wheel`` installed into ``venv`` over whatever version is there."""
    _pip(
        "--python",
        str(venv / "bin" / "python"),
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        "--force-reinstall",
        "--no-warn-script-location",
        str(wheel),
    )


def imported_from(venv: Path) -> Path:
    """Where ``venv``'s python, started as the daemon is, imports the
    project from (run outside the checkout)."""
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-P",
            "-c",
            "import multiserver; print(multiserver.__file__)",
        ],
        cwd=venv,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return Path(done.stdout.strip())
