"""Fixtures and probes shared by the whole suite.

- ``ms_dirs``: a private runtime dir and state dir for one test (never the
  user's real ones), set through MULTISERVER_RUNTIME_DIR / MULTISERVER_STATE_DIR.
- ``start_daemon`` / ``daemon``: real detached daemons started the way a client
  starts them (``open_client(start=True)``), stopped by pid at teardown: first
  every child they hold (SIGKILL to its process group), then the daemon
  (SIGTERM, then SIGKILL).
- /proc probes: a process's fds (``fd_links``, ``fd_count``, ``wait_fds_back``),
  its children and zombies, a daemon's client connections.
- PTY and client helpers: ``read_until``, ``read_to_eof``, ``wait_exit_notices``.
- ``frozen``: a process (a daemon) stopped for a block, then let go.
- ``wait_until``: poll a condition the daemon cannot signal, quickly and with a
  bound, and fail with a message. Tests never sleep to wait for readiness.
- ``autojump_clock``: pytest-trio's, standing still while a worker thread
  runs (``tests.timing``).

Nothing here kills by name: every process is found by pid, either from the
daemon's own answers or from /proc entries whose parent is the daemon, or (as a
last resort) whose command line names this test's own socket path.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from multiserver import ChildExited, Client, DaemonPaths, open_client

# The /proc probes, re-exported for the tests that import them from here.
from tests.procs import (
    child_pids as child_pids,
    cmdlines as cmdlines,
    is_alive as is_alive,
    is_dead as is_dead,
    parent_pid as parent_pid,
    proc_state as proc_state,
    zombies as zombies,
)
from tests.timing import still_while_threads_run

# Bounds, not delays: each is how long a condition may take before the test
# fails. Generous, because the suite runs on 2 busy cores.
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0
POLL_INTERVAL = 0.005


# --- waiting on conditions ------------------------------------------------------


async def wait_until(
    predicate: Callable[[], object], timeout: float = 5.0, message: str | None = None
) -> None:
    """Poll ``predicate`` every few ms until it is true; fail after ``timeout`` s."""
    deadline = trio.current_time() + timeout
    while not predicate():
        if trio.current_time() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {message or predicate}")
        await trio.sleep(POLL_INTERVAL)


def wait_until_sync(predicate: Callable[[], object], timeout: float) -> bool:
    """``wait_until`` outside trio (sync teardown); returns whether it held."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


# --- /proc probes (the basic ones: tests.procs) ----------------------------------


def fd_links(pid: int) -> dict[int, str]:
    """fd number -> what /proc/PID/fd says it points to."""
    links = {}
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            links[int(name)] = os.readlink(f"{base}/{name}")
        except FileNotFoundError:  # closed while we looked
            pass
    return links


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def wait_fds_back(pid: int, before: dict[int, str], timeout: float = 5.0) -> None:
    """Wait until ``pid`` holds exactly as many fds as ``before`` (from
    ``fd_links``); fail with the difference."""
    with trio.move_on_after(timeout):
        while fd_count(pid) != len(before):
            await trio.sleep(POLL_INTERVAL)
    now = fd_links(pid)
    if len(now) != len(before):
        extra = {fd: link for fd, link in now.items() if before.get(fd) != link}
        gone = {fd: link for fd, link in before.items() if now.get(fd) != link}
        pytest.fail(f"pid {pid} holds {len(now)} fds, had {len(before)}: new {extra}, gone {gone}")


def proc_status(pid: int) -> dict[str, str]:
    """/proc/PID/status as a dict."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def daemon_pids_for(socket_path: Path) -> list[int]:
    """Live daemons started for ``socket_path`` (found by their command line,
    which names the socket; the path is unique to one test), or serving it
    since an upgrade in place (``_resumed_socket``)."""
    want = os.fsencode(str(socket_path))
    return _daemon_pids(lambda sock: sock == want)


def daemon_pids_under(root: Path) -> list[int]:
    """Live daemons whose socket lies under ``root`` (a test's own dir):
    every daemon number a test started, not only daemon 1."""
    prefix = os.fsencode(str(root)) + b"/"
    return _daemon_pids(lambda sock: sock.startswith(prefix))


def _daemon_pids(wanted: Callable[[bytes], bool]) -> list[int]:
    found = []
    bound: dict[int, bytes] | None = None
    for pid, cmdline in cmdlines():
        args = cmdline.split(b"\0")
        if b"--resume" in args:
            bound = _bound_unix_sockets() if bound is None else bound
            names_socket = any(wanted(sock) for sock in _resumed_socket(pid, bound))
        else:
            names_socket = any(a == b"--socket" and wanted(b) for a, b in itertools.pairwise(args))
        if names_socket and is_alive(pid):
            found.append(pid)
    return sorted(found)


def _bound_unix_sockets() -> dict[int, bytes]:
    """Inode -> the path it is bound to, of every Unix socket bound to one."""
    found = {}
    with open("/proc/net/unix", "rb") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8:
                found[int(fields[6])] = fields[7]
    return found


def _resumed_socket(pid: int, bound: dict[int, bytes]) -> list[bytes]:
    """The socket paths ``pid`` serves, for a daemon upgraded in place: its
    command line is ``-m multiserver --resume FD`` then, naming no socket,
    and the cleanup of a test would miss it."""
    try:
        return [bound[inode] for inode in socket_inodes(pid) if inode in bound]
    except OSError:  # gone meanwhile
        return []


def unix_socket_inodes(path: Path) -> set[int]:
    """Inodes of the Unix sockets bound to ``path``: the listener and every
    connection it accepted (/proc/net/unix names them by the bound path)."""
    want = str(path)
    found = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == want:
                found.add(int(fields[6]))
    return found


def socket_inodes(pid: int) -> list[int]:
    """Inodes of every socket fd of ``pid``."""
    return [
        int(link[len("socket:[") : -1])
        for link in fd_links(pid).values()
        if link.startswith("socket:[")
    ]


def connected_clients(pid: int, path: Path) -> int:
    """How many client connections the daemon ``pid`` listening on ``path``
    still has open (its sockets bound to ``path``, less the listener)."""
    bound = unix_socket_inodes(path)
    return sum(1 for inode in socket_inodes(pid) if inode in bound) - 1


# --- stopping processes by pid ----------------------------------------------------


def kill_group_and_pid(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group led by ``pid`` (children are session leaders)
    and ``pid`` itself; a process that is gone is fine."""
    for send in (os.killpg, os.kill):
        try:
            send(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_children_of(daemon_pid: int, known: Sequence[int] = ()) -> None:
    """SIGKILL every child of the daemon: the ones it told us about (checked
    against /proc so a reused pid is never hit) and any other found in /proc."""
    pids = set(child_pids(daemon_pid))
    pids.update(p for p in known if parent_pid(p) == daemon_pid)
    for pid in sorted(pids):
        if is_alive(pid):
            kill_group_and_pid(pid)


@contextlib.asynccontextmanager
async def frozen(pid: int) -> AsyncIterator[None]:
    """``pid`` stopped (SIGSTOP, and seen stopped) for the block, then let
    go (SIGCONT) however the block ends: a daemon that does nothing
    meanwhile, so that only what needs no daemon happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        await wait_until(lambda: proc_state(pid) == "T", STOP_TIMEOUT, f"pid {pid} stopped")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def stop_daemon_sync(pid: int) -> None:
    """Children first (SIGKILL), then the daemon (SIGTERM, then SIGKILL)."""
    if not is_alive(pid):
        return
    kill_children_of(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_until_sync(lambda: not is_alive(pid), STOP_TIMEOUT):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_until_sync(lambda: not is_alive(pid), STOP_TIMEOUT)


async def stop_daemon(daemon: RunningDaemon) -> None:
    """Stop one daemon started by a test, and everything it runs, by pid."""
    pid = daemon.pid
    if not is_alive(pid):
        return
    known: list[int] = []
    with trio.move_on_after(2.0):
        try:
            async with open_client(daemon.paths.socket) as client:
                if client.daemon_pid == pid:
                    known = [c.pid for c in await client.list() if c.state == "running"]
        except Exception:  # a wedged or dying daemon: /proc still finds its children
            pass
    kill_children_of(pid, known)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with trio.move_on_after(STOP_TIMEOUT):
        while is_alive(pid):
            await trio.sleep(POLL_INTERVAL)
    if is_alive(pid):
        kill_children_of(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with trio.move_on_after(STOP_TIMEOUT):
            while is_alive(pid):
                await trio.sleep(POLL_INTERVAL)


# --- fixtures ------------------------------------------------------------------------


@attrs.frozen
class MsDirs:
    root: Path
    runtime: Path
    state: Path
    paths: DaemonPaths


@attrs.frozen
class RunningDaemon:
    paths: DaemonPaths
    pid: int
    instance_id: str


@pytest.fixture
def autojump_clock(monkeypatch: pytest.MonkeyPatch) -> trio.testing.MockClock:
    """pytest-trio's fixture of this name, with worker threads that take no
    virtual time: the autojump clock cannot jump past a test's deadlines
    while a store write runs in a thread."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    still_while_threads_run(clock, monkeypatch)
    return clock


# The terminal and login the suite was started from must not change what it
# finds (issue 36: inside tmux, attach loaded more before raw mode): each of
# these, set by the person's terminal, multiplexer, ssh login or own
# settings, is removed before any test runs; TERM is one terminal for all.
PERSON_ENV_PREFIXES = ("TMUX", "STY", "WINDOW", "KITTY_", "XDG_", "SSH_", "MULTISERVER_")
PERSON_ENV_NAMES = ("COLUMNS", "LINES", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "COLORTERM")


def pytest_configure(config: pytest.Config) -> None:
    for name in list(os.environ):
        if name.startswith(PERSON_ENV_PREFIXES) or name in PERSON_ENV_NAMES:
            del os.environ[name]
    os.environ["TERM"] = "xterm-256color"


@pytest.fixture(scope="session", autouse=True)
def _pin_basetemp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fix pytest's own temp root before any test points TMPDIR elsewhere
    (``ms_dirs`` does, and removes that dir afterwards)."""
    tmp_path_factory.getbasetemp()


@pytest.fixture
def ms_dirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[MsDirs]:
    """Fresh runtime and state dirs under /tmp (short, so ``sun_path`` fits).

    MULTISERVER_IDLE_EXIT is "never" so a daemon does not vanish between two
    steps of a test; MULTISERVER_BUFFER_LIMIT is unset (1 MiB). A test that
    wants other settings sets them before it starts its daemon.
    """
    root = Path(tempfile.mkdtemp(prefix="ms-", dir="/tmp"))
    runtime, state = root / "run", root / "state"
    monkeypatch.setenv("MULTISERVER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("MULTISERVER_STATE_DIR", str(state))
    monkeypatch.setenv("MULTISERVER_IDLE_EXIT", "never")
    # hosts.json: never the user's (a test that saves a host writes here).
    monkeypatch.setenv("MULTISERVER_CONFIG_DIR", str(root / "config"))
    monkeypatch.delenv("MULTISERVER_BUFFER_LIMIT", raising=False)
    monkeypatch.delenv("MULTISERVER_DAEMON", raising=False)
    # The short-path fallback dir ($TMPDIR/ms-UID) is swept too: keep it
    # private, in this process (tempfile caches it) and in its children.
    tmp = root / "tmpdir"
    tmp.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    paths = DaemonPaths.for_number(1)
    assert paths.socket.parent == runtime, "runtime path too long for sun_path"
    try:
        yield MsDirs(root, runtime, state, paths)
    finally:
        # Last resort for daemons a test started outside ``start_daemon``
        # (races, subprocesses, other daemon numbers): found by a socket path
        # in this test's dirs (the fallback dir is under root too), by pid.
        for pid in daemon_pids_under(root):
            stop_daemon_sync(pid)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def start_daemon(ms_dirs: MsDirs) -> AsyncIterator[Callable[[], Awaitable[RunningDaemon]]]:
    """A function that starts (or connects to) the daemon of ``ms_dirs`` with
    ``open_client(start=True)``; every daemon it returned is stopped at teardown."""
    started: list[RunningDaemon] = []

    async def start() -> RunningDaemon:
        with trio.fail_after(START_TIMEOUT):
            async with open_client(ms_dirs.paths, start=True) as client:
                running = RunningDaemon(ms_dirs.paths, client.daemon_pid, client.instance_id)
        started.append(running)
        return running

    try:
        yield start
    finally:
        with trio.CancelScope(shield=True):
            for running in reversed(started):
                await stop_daemon(running)


@pytest.fixture
async def daemon(start_daemon: Callable[[], Awaitable[RunningDaemon]]) -> RunningDaemon:
    """A real detached daemon with the settings of the environment."""
    return await start_daemon()


# --- PTY and client helpers ------------------------------------------------------------


async def read_some(fd: int) -> bytes:
    """One read from a non-blocking fd, waiting for readability; b"" at EOF
    (EIO: the slave side is closed and everything was read)."""
    while True:
        try:
            return os.read(fd, 65536)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise


async def read_until(fd: int, needle: bytes, timeout: float = 5.0) -> bytes:
    """Read ``fd`` until ``needle`` appears; returns everything read."""
    os.set_blocking(fd, False)
    data = b""
    with trio.move_on_after(timeout):
        while needle not in data:
            chunk = await read_some(fd)
            if not chunk:
                break
            data += chunk
    if needle not in data:
        pytest.fail(f"{needle!r} not seen within {timeout} s; read {data[-500:]!r}")
    return data


async def read_to_eof(fd: int, timeout: float = 10.0) -> bytes:
    """Read ``fd`` until EOF/EIO (the child exited and its output is drained)."""
    os.set_blocking(fd, False)
    chunks = []
    with trio.fail_after(timeout):
        while chunk := await read_some(fd):
            chunks.append(chunk)
    return b"".join(chunks)


def close_fd(fd: int | None) -> None:
    if fd is not None:
        trio.lowlevel.notify_closing(fd)
        os.close(fd)


async def wait_exit_notices(
    client: Client, ids: Sequence[int], timeout: float = 5.0
) -> dict[int, int]:
    """Exit codes pushed for ``ids`` (id -> code); other notices are skipped."""
    want = set(ids)
    codes: dict[int, int] = {}
    if not want:
        return codes
    with trio.fail_after(timeout):
        async for notice in client.notices:
            if isinstance(notice, ChildExited) and notice.id in want:
                codes[notice.id] = notice.exit_code
                if len(codes) == len(want):
                    return codes
    pytest.fail(f"notices ended before the exits of {sorted(want - set(codes))} came")


async def wait_exit_notice(client: Client, child_id: int, timeout: float = 5.0) -> int:
    """The exit code pushed for ``child_id``."""
    return (await wait_exit_notices(client, [child_id], timeout))[child_id]


async def wait_listed_exited(client: Client, child_id: int, timeout: float = 5.0) -> int:
    """Poll ``list`` until the child shows as exited; returns its exit code."""
    with trio.fail_after(timeout):
        while True:
            for info in await client.list():
                if info.id == child_id and info.state == "exited":
                    assert info.exit_code is not None
                    return info.exit_code
            await trio.sleep(POLL_INTERVAL)
