"""What every benchmark shares: scratch dirs, finding and stopping the
processes a benchmark started (by pid), their CPU time and PSS (from /proc),
spawning on a PTY the raw way, and a multiserver daemon that is always
stopped. The rows and statistics are in ``results``.

Every process a benchmark starts inherits ``MSBENCH_RUN=<scratch dir>``;
leaving ``scratch()`` stops every live process that carries that exact value,
one pid at a time (SIGTERM, then SIGKILL), so nothing outlives a benchmark
even when it fails half-way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import signal
import struct
import tempfile
import termios
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import attrs
import trio

from multiserver import Client, DaemonConfig, DaemonPaths, MultiserverError, open_client

MARKER = "MSBENCH_RUN"
# Short, so that every socket path fits in sun_path.
SCRATCH_PREFIX = "/tmp"
SESSION_ARGV = ("sleep", "1000")
SESSION_COMM = "sleep"
# Upper bounds for anything that waits; the whole run must stay well under 10 min.
COMMAND_TIMEOUT = 10.0
STOP_GRACE = 3.0
MEASURE_TIMEOUT = 60.0
MIB = 1024 * 1024


# --- scratch dirs ---------------------------------------------------------------


@attrs.frozen
class Scratch:
    root: Path

    @property
    def marker(self) -> str:
        return str(self.root)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for a process a benchmark starts (marked)."""
        return {**os.environ, MARKER: self.marker, **extra}


@contextlib.contextmanager
def scratch(tag: str) -> Iterator[Scratch]:
    """A fresh private dir under /tmp, used as the daemon's runtime and state
    dirs (never the user's own). On the way out, every process still marked
    with it is stopped by pid, and the dir is removed."""
    root = Path(tempfile.mkdtemp(prefix=f"msb-{tag}-", dir=SCRATCH_PREFIX))
    sc = Scratch(root)
    saved = {
        k: os.environ.get(k) for k in (MARKER, "MULTISERVER_RUNTIME_DIR", "MULTISERVER_STATE_DIR")
    }
    # The daemon and its children inherit the bench's environment, so these
    # reach them too; the daemon strips MULTISERVER_* from its children.
    os.environ[MARKER] = sc.marker
    os.environ["MULTISERVER_RUNTIME_DIR"] = str(root / "run")
    os.environ["MULTISERVER_STATE_DIR"] = str(root / "state")
    try:
        yield sc
    finally:
        try:
            left = stop_pids(marked_pids(sc.marker))
            if left:
                raise RuntimeError(f"processes survived SIGKILL: {left}")
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(root, ignore_errors=True)


# --- processes, by pid ------------------------------------------------------------


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses ("tmux: server"): split after the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1])


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _is_marked(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def marked_pids(marker: str) -> list[int]:
    """Every live process (not this one) whose environment carries ``marker``."""
    needle = f"{MARKER}={marker}".encode()
    me = os.getpid()
    return [pid for pid in _pids() if pid != me and alive(pid) and _is_marked(pid, needle)]


def children_of(pids: Sequence[int]) -> list[int]:
    """The live direct children of ``pids``."""
    parents = set(pids)
    out = []
    for pid in _pids():
        st = proc_stat(pid)
        if st is not None and st[1] in parents and st[0] not in ("Z", "X"):
            out.append(pid)
    return out


def _reap(pid: int) -> None:
    """Reap ``pid`` if it is our child; anything else is reaped by its parent."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Poll until every pid is gone (or a zombie); returns those still alive."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while True:
        for pid in left:
            _reap(pid)
        left = [pid for pid in left if alive(pid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.01)


def stop_pids(pids: Sequence[int], first: signal.Signals = signal.SIGTERM) -> list[int]:
    """Stop each pid: ``first``, a grace period, then SIGKILL. Returns the
    pids still alive after that (there should be none)."""
    left = list(pids)
    for sig in (first, signal.SIGKILL):
        for pid in left:
            if alive(pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        left = wait_gone(left, STOP_GRACE)
        if not left:
            break
    return left


def reboot(sc: Scratch) -> None:
    """A reboot of the scratch dir: every process of it SIGKILLed by pid,
    its runtime dir emptied; the state dir stays."""
    left = stop_pids(marked_pids(sc.marker), signal.SIGKILL)
    if left:
        raise RuntimeError(f"processes survived SIGKILL: {left}")
    shutil.rmtree(sc.root / "run", ignore_errors=True)


def _devnull_actions() -> list[tuple[int, ...] | tuple[int, int, str, int, int]]:
    return [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0),
        (os.POSIX_SPAWN_DUP2, 0, 1),
        (os.POSIX_SPAWN_DUP2, 0, 2),
    ]


# Python ignores these; an ignored signal survives exec, so reset them.
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


def run_command(argv: Sequence[str], env: dict[str, str], timeout: float = COMMAND_TIMEOUT) -> int:
    """Run ``argv`` (stdio on /dev/null) and wait for it; returns its exit
    code. A command still running after ``timeout`` is killed by pid and
    RuntimeError raised."""
    pid = os.posix_spawnp(
        argv[0], list(argv), env, file_actions=_devnull_actions(), setsigdef=_RESET_SIGNALS
    )
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            stop_pids([pid], signal.SIGKILL)
            raise RuntimeError(f"{argv[0]} did not finish within {timeout} s")
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def timed_command(
    argv: Sequence[str], env: dict[str, str], timeout: float = COMMAND_TIMEOUT
) -> float:
    """Seconds ``argv`` took (``run_command``); RuntimeError unless it exited 0."""
    t0 = time.perf_counter()
    code = run_command(argv, env, timeout)
    elapsed = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}... exited with {code}")
    return elapsed


def spawn_on_pty(
    executable: str,
    argv: Sequence[str],
    env: dict[str, str],
    *,
    size: tuple[int, int] | None = None,
    echo: bool = True,
) -> tuple[int, int]:
    """The raw way: openpty + posix_spawn with the slave as the controlling
    terminal (setsid, then open the tty as fd 0). Returns (pid, master).

    ``size`` (rows, cols) is set on the PTY first (a fresh one is 0x0);
    ``echo=False`` turns the line discipline's echo off, so that a byte
    written to the master comes back only if the program sends it."""
    master, slave = os.openpty()
    try:
        if size is not None:
            set_size(master, *size)
        if not echo:
            mode = termios.tcgetattr(slave)
            mode[3] &= ~termios.ECHO
            termios.tcsetattr(slave, termios.TCSANOW, mode)
        pid = os.posix_spawn(
            executable,
            list(argv),
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.ttyname(slave), os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1),
                (os.POSIX_SPAWN_DUP2, 0, 2),
            ],
            setsid=True,
            setsigdef=_RESET_SIGNALS,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return pid, master


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


# --- CPU time, by pid -------------------------------------------------------------

_TICK = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, children: bool = True) -> float | None:
    """utime + stime of ``pid`` (every thread, live or gone), plus, with
    ``children``, what its reaped children used (cutime + cstime); None if
    it is gone. Clock-tick resolution (10 ms)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    # fields[0] is the state (stat field 3): utime is field 14, i.e. index 11.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks * _TICK


@attrs.define
class CpuMeter:
    """CPU seconds used by a set of processes between ``start`` and
    ``stop``: every process marked with the scratch dir's marker, each
    counted with the children it reaped meanwhile. A process that appears
    in between counts from zero; one that is gone at ``stop`` (reaped by an
    unmarked parent) is lost, so measure while they live."""

    marker: str
    _before: dict[int, float] = attrs.Factory(dict)
    used: dict[int, float] = attrs.Factory(dict)

    def start(self) -> None:
        self._before = {
            pid: cpu for pid in marked_pids(self.marker) if (cpu := cpu_seconds(pid)) is not None
        }

    def stop(self) -> float:
        self.used = {}
        for pid in marked_pids(self.marker):
            cpu = cpu_seconds(pid)
            if cpu is not None:
                self.used[pid] = max(0.0, cpu - self._before.get(pid, 0.0))
        return sum(self.used.values())


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate()`` until true or ``timeout``; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --- memory -------------------------------------------------------------------------


def smaps_rollup(pid: int) -> dict[str, int]:
    """The fields of /proc/PID/smaps_rollup, in KiB ({} if the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        return {}
    return out


def memory_of(pids: Sequence[int]) -> dict[str, float]:
    """Pss, Rss, Pss_Anon and Pss_File summed over ``pids``, in MiB."""
    keys = ("Pss", "Rss", "Pss_Anon", "Pss_File")
    total = dict.fromkeys(keys, 0.0)
    for pid in pids:
        rollup = smaps_rollup(pid)
        for key in keys:
            total[key] += rollup.get(key, 0) / 1024
    return total


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    out: list[int] = []
    frontier = [pid]
    while frontier:
        frontier = children_of(frontier)
        out.extend(frontier)
    return out


def pss_tree(pid: int) -> float:
    """PSS of ``pid`` and everything below it, in MiB."""
    return memory_of([pid, *descendants(pid)])["Pss"]


# --- a multiserver daemon that is always stopped -------------------------------------


@contextlib.asynccontextmanager
async def daemon_client(number: int = 1) -> AsyncIterator[Client]:
    """Start daemon ``number`` in the scratch dirs (``scratch()`` must be
    active) and yield a client. On the way out: Shutdown(force), then the
    daemon's pid must be gone (SIGKILL by pid if not)."""
    paths = DaemonPaths.for_number(number)
    runtime = os.environ.get("MULTISERVER_RUNTIME_DIR", "")
    if not runtime.startswith(SCRATCH_PREFIX) or not paths.socket.is_relative_to(runtime):
        # e.g. the short-path fallback: that dir is the user's own.
        raise RuntimeError(f"daemon socket {paths.socket} is outside the scratch dir")
    async with open_client(paths, start=True, config=DaemonConfig()) as client:
        pid = client.daemon_pid
        try:
            yield client
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(COMMAND_TIMEOUT):
                try:
                    await client.shutdown(force=True)
                except MultiserverError:
                    pass
    if wait_gone([pid], STOP_GRACE):
        left = stop_pids([pid], signal.SIGKILL)
        if left:
            raise RuntimeError(f"daemon {pid} survived SIGKILL")


def session_pids(marker: str) -> list[int]:
    """The session children (``sleep``) among the processes marked ``marker``."""
    return [pid for pid in marked_pids(marker) if comm(pid) == SESSION_COMM]
