"""Every Python process of ours runs the installed code, wherever it was
started, and does not keep the directory it was started from.

Each test starts one of them from a directory holding hostile packages
named ``multiserver``, ``multiserver_cli``, ``restore`` and ``adopter``
(``_hostile_cwd``), sees it work, and finds no marker of their import.
The long-lived ones (daemons, an attached client) are seen
running in ``/``; a session's program keeps the cwd it was given. The
remote side, started through ssh, is in ``tests/remote``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from multiserver import open_client
from multiserver_cli.service._units import ServiceSpec, launcher, settings_from
from restore import ArrangementStore
from tests.cli.conftest import MULTISERVER, Terminal, person_env
from tests.conftest import (
    POLL_INTERVAL,
    MsDirs,
    daemon_pids_under,
    is_alive,
    stop_daemon_sync,
    wait_until_sync,
)
from tests.reliability._hostile_cwd import cwd_of, make_hostile_dir, markers

BOUND = 20.0  # how long a process may take to come up or do its work


@pytest.fixture
def evil(ms_dirs: MsDirs) -> Path:
    return make_hostile_dir(ms_dirs.root)


def run_in(cwd: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


async def wait_for(check: Callable[[], object], what: str) -> None:
    with trio.move_on_after(BOUND):
        while not check():
            await trio.sleep(POLL_INTERVAL * 4)
        return
    pytest.fail(f"not {what} within {BOUND} s")


def session_pid(ms_dirs: MsDirs, cwd: Path, name: str) -> int:
    done = run_in(cwd, [MULTISERVER, "ls", "--json"], person_env(ms_dirs))
    assert done.returncode == 0, done.stderr
    (pid,) = [s["pid"] for s in json.loads(done.stdout) if s["name"] == name]
    return int(pid)


async def test_the_repro_a_daemon_on_demand_imports_nothing_from_the_cwd(
    ms_dirs: MsDirs, evil: Path
) -> None:
    """The issue's repro: `multiserver new -d` in a directory holding a
    hostile `multiserver` package."""
    made = run_in(
        evil, [MULTISERVER, "new", "-d", "-n", "s", "--", "sleep", "300"], person_env(ms_dirs)
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout == "s\n"
    assert markers(ms_dirs.root) == []
    (daemon,) = daemon_pids_under(ms_dirs.root)
    assert cwd_of(daemon) == "/"
    # The program keeps the directory the person started it in.
    assert cwd_of(session_pid(ms_dirs, evil, "s")) == str(evil)


async def test_a_daemon_the_library_starts_imports_nothing_from_the_cwd(
    ms_dirs: MsDirs, evil: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(evil)
    with trio.fail_after(BOUND):
        async with open_client(ms_dirs.paths, start=True) as client:
            pid = client.daemon_pid
    assert markers(ms_dirs.root) == []
    assert cwd_of(pid) == "/"


def test_a_relative_runtime_dir_is_taken_from_where_the_command_runs(
    ms_dirs: MsDirs, evil: Path
) -> None:
    """The daemon runs in ``/``; the dirs a relative setting names are the
    ones beside the command, as for any relative path a person types."""
    env = {
        **person_env(ms_dirs),
        "MULTISERVER_RUNTIME_DIR": "run",
        "MULTISERVER_STATE_DIR": "state",
    }
    made = run_in(evil, [MULTISERVER, "new", "-d", "-n", "r", "--", "sleep", "300"], env)
    assert made.returncode == 0, made.stderr
    assert (evil / "run" / "multiserver-daemon-1.socket").exists()
    listed = run_in(evil, [MULTISERVER, "ls"], env)
    assert listed.returncode == 0 and "r" in listed.stdout.split(), listed
    assert markers(ms_dirs.root) == []


@contextlib.contextmanager
def foreground(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A daemon run in the foreground (as a service manager runs it),
    stopped by pid with everything it runs."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        stop_daemon_sync(proc.pid)
        proc.wait(10)


def the_launchers() -> dict[str, tuple[str, ...]]:
    """How a service runs this multiserver: the script beside the
    interpreter, and the interpreter (``launcher``'s answer where no
    script is found, given this interpreter)."""
    bare = launcher("/nonexistent/python3")
    return {"script": launcher(sys.executable), "interpreter": (sys.executable, *bare[1:])}


@pytest.mark.parametrize("how", ["script", "interpreter"])
async def test_the_service_command_lines_import_nothing_from_the_cwd(
    ms_dirs: MsDirs, evil: Path, how: str
) -> None:
    """The units' two command lines (daemon --service, restore through a
    login shell), each run from the hostile directory, as a person's own
    service manager or shell might; the service's daemon keeps what its
    session shows on disk."""
    spec = ServiceSpec(launcher=the_launchers()[how], settings=settings_from(os.environ))
    env = {**person_env(ms_dirs), **spec.environment()}
    with foreground(spec.daemon_argv(), evil, env) as service:
        assert service.stdout is not None
        with trio.fail_after(BOUND):
            line = await trio.to_thread.run_sync(service.stdout.readline)
        assert line == f"{ms_dirs.paths.socket}\n"
        assert cwd_of(service.pid) == "/"

        made = run_in(evil, [MULTISERVER, "new", "-d", "-n", "kept", "--", "sh", "-c", "echo kept-line; exec sleep 300"], env)  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert daemon_pids_under(ms_dirs.root) == []  # the service's daemon took it

        restored = run_in(evil, [*spec.restore_argv(), "--json"], env)
        assert restored.returncode == 0, restored.stderr
        report = json.loads(restored.stdout)
        assert [(s["name"], s["outcome"]) for s in report["sessions"]] == [("kept", "attached")]

        found = await trio.to_thread.run_sync(lambda: _kept_line(ms_dirs, "kept"))
        assert found, "the service's daemon kept nothing of the session on disk"
    assert markers(ms_dirs.root) == []


def _kept_line(ms_dirs: MsDirs, name: str) -> bool:
    """Whether the output file of ``name`` holds its line (within the bound)."""
    from multiserver.internal import output_path, read_output

    def kept() -> bool:
        with ArrangementStore.open() as store:
            leaf = store.load().find(name)
        if leaf is None or leaf.ref is None:
            return False
        path = output_path(ms_dirs.state, leaf.ref.instance_id, leaf.ref.child_id)
        return b"kept-line" in (read_output(path, 4096) or b"")

    return wait_until_sync(kept, BOUND)


@pytest.mark.parametrize("mode", ["--foreground", "--service"])
async def test_a_daemon_run_by_hand_imports_nothing_and_leaves_the_cwd(
    ms_dirs: MsDirs, evil: Path, mode: str
) -> None:
    with foreground([MULTISERVER, "daemon", mode], evil, person_env(ms_dirs)) as daemon:
        assert daemon.stdout is not None
        with trio.fail_after(BOUND):
            line = await trio.to_thread.run_sync(daemon.stdout.readline)
        assert line == f"{ms_dirs.paths.socket}\n"
        assert cwd_of(daemon.pid) == "/"
    assert markers(ms_dirs.root) == []


async def test_an_attached_client_leaves_the_cwd_to_its_program(
    ms_dirs: MsDirs, evil: Path, open_terminal: Callable[..., Terminal]
) -> None:
    """A person types `multiserver` in the hostile directory: attached, the
    client holds ``/``; the shell it made holds the directory."""
    term = open_terminal(["sh", "-c", f"cd '{evil}' && exec multiserver new -n here -- sh"])
    await term.wait_raw_mode()
    (client,) = term.client_pids()
    await wait_for(lambda: cwd_of(client) == "/", "the attached client in /")
    assert cwd_of(session_pid(ms_dirs, evil, "here")) == str(evil)
    assert markers(ms_dirs.root) == []


TMUX = shutil.which("tmux")


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make test installs it)")
async def test_the_layout_saved_in_the_background_imports_nothing(
    ms_dirs: MsDirs, evil: Path
) -> None:
    """`multiserver new` in a tmux pane whose cwd is the hostile directory
    saves the pane's layout from a process of its own (a double fork)."""
    from tests.cli.test_layout_tmux import TmuxServer

    server = TmuxServer(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    try:
        server.tmux(
            "new-session", "-d", "-s", "dev", "-n", "code", "-c", str(evil),
            "-x", "100", "-y", "30", "multiserver new -n fresh -- sh",
        )  # fmt: skip

        def placed() -> bool:
            with ArrangementStore.open() as store:
                window = store.load().window("dev")
            return window is not None and window.tabs[0].title == "code"

        await wait_for(placed, "the layout saved")
        assert cwd_of(session_pid(ms_dirs, evil, "fresh")) == str(evil)
    finally:
        server.kill()
    assert markers(ms_dirs.root) == []
    assert not any(is_alive(p) for p in server.pids)
