"""A directory a person might type a command in that holds packages named
as ours (a clone of this project, any repo with a ``restore/`` folder),
each of whose import leaves a marker: the proof that a process of ours
ran code from where it was started, instead of the installed code."""

from __future__ import annotations

import os
from pathlib import Path

# Every top-level package this project installs.
OUR_PACKAGES = ("multiserver", "multiserver_cli", "restore", "adopter")


def make_hostile_dir(root: Path) -> Path:
    """``root/evil`` with a package of each of our names; importing one
    (or running it with ``-m``) writes ``root/PWNED-NAME``."""
    evil = root / "evil"
    for name in OUR_PACKAGES:
        package = evil / name
        package.mkdir(parents=True)
        marker = str(root / f"PWNED-{name}")
        code = f"open({marker!r}, 'w').write('imported from the cwd')\n"
        (package / "__init__.py").write_text(code)
        (package / "__main__.py").write_text(code)
    return evil


def markers(root: Path) -> list[str]:
    """The markers written, by package: empty when nothing was imported."""
    return sorted(p.name for p in root.glob("PWNED-*"))


def cwd_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/cwd")
