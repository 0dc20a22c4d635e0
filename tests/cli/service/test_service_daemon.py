"""The daemon as the service runs it, for real: ``multiserver daemon
--service`` in the bare environment a service manager gives, with a
``$NOTIFY_SOCKET`` this test listens on, as systemd's.

- It says when it is ready, stays up with no session (whatever
  ``MULTISERVER_IDLE_EXIT`` says), and ``multiserver daemon`` says it was
  started by the service; one started on demand says so too.
- Its sessions get the environment of the client that started them, not
  its own.
- Where a daemon started on demand runs, it says it waits, and takes over
  once that one exits.
- ``multiserver service uninstall`` leaves it running while it has sessions.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import AsyncIterator

import trio

from multiserver.daemon._origin import DaemonOrigin
from tests.cli.conftest import MULTISERVER, person_env, wait_buffered
from tests.cli.service.test_service import logged, run_service, tools
from tests.conftest import (
    START_TIMEOUT,
    MsDirs,
    daemon_pids_for,
    is_dead,
    kill_children_of,
    wait_until,
)


def bare_env(ms_dirs: MsDirs) -> dict[str, str]:
    """What a systemd user unit's process gets: little, plus the unit's own."""
    return {
        "HOME": str(ms_dirs.root / "home"),
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "MULTISERVER_RUNTIME_DIR": str(ms_dirs.runtime),
        "MULTISERVER_STATE_DIR": str(ms_dirs.state),
        # Ignored by the service's daemon: it never exits when idle.
        "MULTISERVER_IDLE_EXIT": "0.1",
        "DAEMON_ONLY": "the-daemon-s-own",
    }


async def run(ms_dirs: MsDirs, *args: str, **extra: str) -> subprocess.CompletedProcess[bytes]:
    """``multiserver ARGS`` from the person's shell, with ``extra`` set."""
    env = {**person_env(ms_dirs), **extra}
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [MULTISERVER, *args], env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=30
        )
    )
    assert done.returncode == 0, done.stderr
    return done


@contextlib.asynccontextmanager
async def service_daemon(
    ms_dirs: MsDirs,
) -> AsyncIterator[tuple[subprocess.Popen[bytes], trio.socket.SocketType]]:
    """The daemon as the unit runs it, and the socket it notifies; stopped
    by pid (its children first) at the end."""
    notify = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    await notify.bind(str(ms_dirs.root / "notify"))
    (ms_dirs.root / "home").mkdir(exist_ok=True)
    env = {**bare_env(ms_dirs), "NOTIFY_SOCKET": str(ms_dirs.root / "notify")}
    with open(ms_dirs.root / "service.log", "wb") as log:
        proc = subprocess.Popen(
            [MULTISERVER, "daemon", "--service"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        with notify:
            yield proc, notify
    finally:
        kill_children_of(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            await trio.to_thread.run_sync(lambda: proc.wait(timeout=5))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def notified(notify: trio.socket.SocketType, want: str) -> str:
    """The next notification that contains ``want``."""
    with trio.fail_after(START_TIMEOUT):
        while True:
            said = (await notify.recv(4096)).decode()
            if want in said:
                return said


async def test_the_service_daemon_stays_up_and_sessions_get_the_client_environment(
    ms_dirs: MsDirs,
) -> None:
    sock = ms_dirs.paths.socket
    async with service_daemon(ms_dirs) as (proc, notify):
        assert await notified(notify, "READY=1") == f"READY=1\nSTATUS=listening on {sock}"
        said = await run(ms_dirs, "daemon")
        assert said.stdout.decode() == f"{sock}\n"
        assert said.stderr.decode() == (
            f"daemon 1 (pid {proc.pid}) at {sock}, started by the service (stays up)\n"
        )
        # No session and no client, ten times its MULTISERVER_IDLE_EXIT: up.
        with trio.move_on_after(1.0):
            while proc.poll() is None:
                await trio.sleep(0.05)
        assert proc.poll() is None

        # A session gets the environment of the client that started it.
        await run(
            ms_dirs,
            *("new", "-d", "-n", "env", "--", "sh", "-c", "env; exec sleep 600"),
            CLIENT_ONLY="from-the-client",
        )
        kept = await wait_buffered(ms_dirs, "env", b"CLIENT_ONLY=from-the-client")
        assert b"DAEMON_ONLY" not in kept
        assert b"NOTIFY_SOCKET" not in kept
        assert f"HOME={ms_dirs.root / 'home'}\n".encode() in kept.replace(b"\r\n", b"\n")
        assert b"PS1=outer$ " in kept  # the person's, not the daemon's bare one


async def test_a_daemon_started_on_demand_says_so(ms_dirs: MsDirs) -> None:
    said = await run(ms_dirs, "daemon", MULTISERVER_IDLE_EXIT="5")
    (pid,) = daemon_pids_for(ms_dirs.paths.socket)
    assert said.stderr.decode() == (
        f"daemon 1 (pid {pid}) at {ms_dirs.paths.socket}, started on demand"
        " (exits when idle for 5 s)\n"
    )


async def test_a_lock_file_that_does_not_say_is_not_guessed_from(ms_dirs: MsDirs) -> None:
    """A line another daemon left (SIGKILLed before this one wrote its
    own), or none (an older multiserver): not this daemon's, so not said."""
    await run(ms_dirs, "daemon", MULTISERVER_IDLE_EXIT="30")
    (pid,) = daemon_pids_for(ms_dirs.paths.socket)
    head = f"daemon 1 (pid {pid}) at {ms_dirs.paths.socket}"
    other = DaemonOrigin(pid, "0" * 32, "service", None).to_bytes()
    for line in (other, b"", b"4242\n"):
        with open(ms_dirs.paths.lock, "r+b") as lock:  # the daemon's own file
            lock.truncate(0)
            lock.write(line)
        said = await run(ms_dirs, "daemon")
        assert said.stderr.decode() == (
            f"{head}; how it was started is not known (its lock file does not say)\n"
        )


async def test_the_service_daemon_takes_over_from_one_started_on_demand(
    ms_dirs: MsDirs,
) -> None:
    sock = ms_dirs.paths.socket
    await run(ms_dirs, "new", "-d", "-n", "s", "--", "sleep", "600", MULTISERVER_IDLE_EXIT="0.5")
    (on_demand,) = daemon_pids_for(sock)
    async with service_daemon(ms_dirs) as (proc, notify):
        # Up, as far as systemd is concerned: the login goes on meanwhile.
        assert await notified(notify, "READY=1") == (
            f"READY=1\nSTATUS=waiting for the daemon on {sock} (pid {on_demand}, started on"
            " demand (exits when idle for 0.5 s)) to exit"
        )
        said = await run(ms_dirs, "daemon")
        assert said.stderr.decode() == (
            f"daemon 1 (pid {on_demand}) at {sock}, started on demand (exits when idle for 0.5 s)\n"
        )
        await run(ms_dirs, "kill", "s")
        assert await notified(notify, "listening") == f"READY=1\nSTATUS=listening on {sock}"
        await wait_until(lambda: is_dead(on_demand), message="the on-demand daemon to exit")
        said = await run(ms_dirs, "daemon")
        assert said.stderr.decode() == (
            f"daemon 1 (pid {proc.pid}) at {sock}, started by the service (stays up)\n"
        )


async def test_uninstall_leaves_the_service_daemon_running_while_it_has_sessions(
    ms_dirs: MsDirs,
) -> None:
    env = tools(ms_dirs)
    sock = ms_dirs.paths.socket
    installed = await trio.to_thread.run_sync(lambda: run_service(env, "install"))
    assert installed.returncode == 0, installed.stderr
    async with service_daemon(ms_dirs) as (proc, notify):
        await notified(notify, "listening")
        await run(ms_dirs, "new", "-d", "-n", "keep", "--", "sleep", "600")
        status = await trio.to_thread.run_sync(lambda: run_service(env, "status"))
        assert status.stdout.splitlines()[-1] == (
            f"daemon 1 (pid {proc.pid}) at {sock}, started by the service (stays up); 1 session(s)"
        )
        logged(ms_dirs)
        gone = await trio.to_thread.run_sync(lambda: run_service(env, "uninstall"))
        assert gone.returncode == 0, gone.stderr
        assert gone.stdout.splitlines()[1:] == [
            f"the service's daemon (pid {proc.pid}) keeps running with its 1 session(s), and"
            " does not start again at login; `multiserver stop` ends it once they are done"
        ]
        calls = logged(ms_dirs)
        assert "--user disable multiserver-restore.service multiserver.service" in calls
        # The daemon with a session is not stopped.
        assert [line for line in calls if line.startswith("--user stop")] == []
        assert proc.poll() is None
        assert os.listdir(ms_dirs.root / "config" / "systemd" / "user") == []
