"""What the adopter's harness tests share: simulated daemons
(``multiserver.testing``) at the daemon sockets of a private runtime dir,
a private short-path fallback dir, so a sweep never sees the machine's
real sockets, and no real daemon started for a relaunch.

- ``dirs``: the runtime dir (``ms_dirs``, MULTISERVER_RUNTIME_DIR, created
  0700) and the fallback dir (``multiserver.system._paths.fallback_dir``
  replaced; absent until a test makes it).
- ``no_real_daemons``: a relaunch that finds no sim fails instead of
  spawning a daemon (a harness module uses it for every test).
- ``leaf_of``, ``arranged``: saved sessions of sims' children (the sims
  themselves: ``tests/sims.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from multiserver.testing import SimChild, SimDaemon
from restore import Arrangement, RestorationRef, SessionLeaf, Tab, Window
from tests.conftest import MsDirs
from tests.sims import refuse_real_daemons


@attrs.frozen
class Dirs:
    runtime: Path
    fallback: Path
    root: Path


@pytest.fixture
def no_real_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_real_daemons(monkeypatch)


@pytest.fixture
def dirs(ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch) -> Dirs:
    """The runtime dir (created 0700) and a private fallback dir (absent until
    a test makes it)."""
    ms_dirs.runtime.mkdir(mode=0o700)
    fallback = ms_dirs.root / "fb"
    monkeypatch.setattr("multiserver.system._paths.fallback_dir", lambda: fallback)
    tmp = ms_dirs.root / "tmp"
    tmp.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(tmp))
    return Dirs(ms_dirs.runtime, fallback, ms_dirs.root)


def leaf_of(sim: SimDaemon, child: SimChild, cwd: Path) -> SessionLeaf:
    ref = RestorationRef(str(sim.socket_path), sim.instance_id, child.id, child.pid)
    return SessionLeaf(child.name, list(child.argv), str(cwd), ref=ref)


def arranged(leaves: Sequence[SessionLeaf], window: str = "main") -> Arrangement:
    return Arrangement([Window(window, [Tab(x) for x in leaves])]) if leaves else Arrangement()
