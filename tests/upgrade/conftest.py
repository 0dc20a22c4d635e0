"""Builds of the project installed over one another in a venv of their own,
and a daemon of that venv to upgrade (``_builds.py`` makes them).

- ``builds`` (session): the wheels, built once: A and B (the checkout with
  two versions of its own), ``broken`` (B whose daemon module raises at
  import) and ``refusing`` (B whose snapshot reader refuses every snapshot).
- ``before_rooms`` (session): a wheel of the last commit whose
  ``multiserver/`` was flat, before its rooms, older than A and B
  (``+upgrade.0flat``); a test that needs it skips where the history does
  not reach it.
- ``venv`` (module): a fresh venv, not editable, that imports the project
  from its own site-packages; ``install`` puts a build in it.
- ``installed``: ``venv`` holding A, with this test's dirs (``ms_dirs``);
  every daemon the test names (``installed.daemons``) and every program it
  leaves behind (``installed.orphans``) is stopped by pid at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from multiserver import DaemonPaths, open_client
from restore import Arrangement, ArrangementStore, RestorationRef, SessionLeaf, Tab, Window
from tests.cli.conftest import open_terminal  # noqa: F401 - a fixture
from tests.conftest import POLL_INTERVAL, MsDirs, is_alive, kill_group_and_pid, stop_daemon_sync
from tests.upgrade import _builds

COMMAND_TIMEOUT = 60.0  # a bound on one command's run (an upgrade waits for the new code)


@attrs.frozen
class Builds:
    a: Path
    b: Path
    broken: Path
    refusing: Path

    @staticmethod
    def version(wheel: Path) -> str:
        return wheel.name.split("-")[1]


def _refuse_every_snapshot(text: str) -> str:
    out = text.replace("\nOLDEST_READ = 1\n", "\nOLDEST_READ = FORMAT + 1\n")
    assert out != text, "multiserver/daemon/_snapshot.py: no `OLDEST_READ = 1` line"
    return out


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    work = tmp_path_factory.mktemp("builds")
    version = _builds.checkout_version()
    a = _builds.build_wheel(work, f"{version}+upgrade.a")
    out = work / "variants"
    b_version = f"{version}+upgrade.b"
    return Builds(
        a=a,
        b=_builds.variant(a, out, b_version, {}),
        broken=_builds.variant(
            a,
            out,
            f"{b_version}.broken",
            {
                "multiserver/daemon/_server.py": lambda t: (
                    t + '\nraise ImportError("broken on purpose")\n'
                )
            },
        ),
        refusing=_builds.variant(
            a,
            out,
            f"{b_version}.refusing",
            {"multiserver/daemon/_snapshot.py": _refuse_every_snapshot},
        ),
    )


@pytest.fixture(scope="session")
def before_rooms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    commit = _builds.before_rooms()
    if commit is None:
        pytest.skip("no commit of multiserver's flat layout in this checkout's history")
    work = tmp_path_factory.mktemp("flat")
    return _builds.build_wheel_at(work, commit, f"{_builds.checkout_version()}+upgrade.0flat")


@attrs.define
class Venv:
    path: Path
    current: Path | None = None  # the wheel installed last

    @property
    def command(self) -> str:
        return str(self.path / "bin" / "multiserver")

    def install(self, wheel: Path) -> None:
        """``wheel`` installed over what is there (nothing if it is there)."""
        if wheel != self.current:
            self.current = None
            _builds.install(self.path, wheel)
            self.current = wheel


@pytest.fixture(scope="module")
def venv(builds: Builds, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    made = Venv(tmp_path_factory.mktemp("venv") / "v")
    _builds.make_venv(made.path)
    made.install(builds.a)
    where = _builds.imported_from(made.path)
    assert where.is_relative_to(made.path), f"the venv imports multiserver from {where}"
    return made


@attrs.define
class Installed:
    """The venv's ``multiserver`` run with this test's dirs."""

    venv: Venv
    dirs: MsDirs
    daemons: list[int] = attrs.Factory(list)  # stopped by pid at teardown
    orphans: list[int] = attrs.Factory(list)  # programs of a killed daemon

    @property
    def paths(self) -> DaemonPaths:
        return self.dirs.paths

    async def run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        with trio.fail_after(COMMAND_TIMEOUT):
            return await trio.run_process(
                [self.venv.command, *args],
                env=dict(os.environ),
                cwd=self.dirs.root,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )

    async def ok(self, *args: str) -> bytes:
        done = await self.run(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr, self.log_tail())
        return done.stdout

    async def start(self) -> dict[str, Any]:
        """Daemon 1 of this venv, started on demand; its ``daemon --json`` row."""
        await self.ok("daemon")
        row = await self.daemon()
        self.daemons.append(row["pid"])
        return row

    async def daemon(self) -> dict[str, Any]:
        """``daemon --json``: daemon 1's row."""
        (row,) = json.loads(await self.ok("daemon", "--json"))
        return dict(row)

    async def sessions(self) -> dict[str, dict[str, Any]]:
        """``ls --json`` by name; a name listed twice fails."""
        rows = json.loads(await self.ok("ls", "--json"))
        by_name = {row["name"]: row for row in rows}
        assert len(by_name) == len(rows), sorted(row["name"] for row in rows)
        return by_name

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.paths.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no daemon log)"


async def launch(
    paths: DaemonPaths, programs: dict[str, list[str]], *, save: bool = False
) -> dict[str, int]:
    """Start ``programs`` (name -> argv) on the running daemon at once,
    unheld; their pids by name. ``save``: saved as ``new -d`` saves them
    (one window each), for ``restore``."""
    pids: dict[str, int] = {}
    leaves: list[SessionLeaf] = []
    async with open_client(paths) as client:

        async def one(name: str, argv: list[str]) -> None:
            done = await client.launch(argv, name=name, cwd="/", hold=False)
            pids[name] = done.child.pid
            ref = RestorationRef(
                str(client.socket_path), client.instance_id, done.child.id, done.child.pid
            )
            leaves.append(SessionLeaf(name, argv, "/", ref=ref))

        async with trio.open_nursery() as nursery:
            for name, argv in programs.items():
                nursery.start_soon(one, name, argv)
    if save:
        store, warning = ArrangementStore.open_or_quarantine()
        assert warning is None, warning
        with store:
            store.save(Arrangement([Window(leaf.name, [Tab(leaf)]) for leaf in leaves]))
    return pids


async def wait_exited(paths: DaemonPaths, names: Collection[str], timeout: float = 30.0) -> None:
    """Wait until the daemon lists each of ``names`` as exited."""
    async with open_client(paths) as client:
        with trio.fail_after(timeout):
            while {c.name for c in await client.list() if c.state == "exited"} < set(names):
                await trio.sleep(POLL_INTERVAL)


@pytest.fixture
async def installed(venv: Venv, builds: Builds, ms_dirs: MsDirs) -> AsyncIterator[Installed]:
    venv.install(builds.a)
    done = Installed(venv, ms_dirs)
    try:
        yield done
    finally:
        with trio.CancelScope(shield=True):
            if any(is_alive(pid) for pid in done.daemons):
                with contextlib.suppress(Exception):
                    await done.run("stop", "--force")
            for pid in done.daemons:
                stop_daemon_sync(pid)
            for pid in done.orphans:
                if is_alive(pid):
                    kill_group_and_pid(pid)
