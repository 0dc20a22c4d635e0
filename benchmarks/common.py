"""What every benchmark shares: settings and result rows, medians, scratch
dirs, finding and stopping the processes a benchmark started (by pid), PSS
from ``/proc/PID/smaps_rollup``, spawning on a PTY the raw way, and a
multiserver daemon that is always stopped.

Every process a benchmark starts inherits ``MSBENCH_RUN=<scratch dir>``;
leaving ``scratch()`` stops every live process that carries that exact value,
one pid at a time (SIGTERM, then SIGKILL), so nothing outlives a benchmark
even when it fails half-way.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import attrs
import trio

from multiserver import DaemonConfig, DaemonPaths, MultiserverError, open_client
from multiserver._client import Client

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


@attrs.frozen
class Settings:
    runs: int
    quick: bool
    sessions: int = 200


@attrs.frozen
class Row:
    """One line of the results table. ``value`` and ``baseline_value`` are
    medians of ``runs`` runs, in ``unit``; None when not measured."""

    figure: str
    subject: str
    value: float | None
    unit: str
    runs: int
    baseline: str
    baseline_value: float | None
    target: str = ""
    met: bool | None = None
    detail: str = ""
    samples: tuple[float, ...] = ()
    baseline_samples: tuple[float, ...] = ()

    @property
    def ratio(self) -> float | None:
        """The median of the per-run ratios (subject over the baseline of the
        same run), which cancels drift in the machine's load; the ratio of
        the medians when the runs do not pair up."""
        if self.value is None or not self.baseline_value:
            return None
        pairs = list(zip(self.samples, self.baseline_samples, strict=False))
        if pairs and len(self.samples) == len(self.baseline_samples) and all(b for _, b in pairs):
            return median([a / b for a, b in pairs])
        return self.value / self.baseline_value


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def spread(samples: Sequence[float], scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    """'min-max' of the samples, for the detail column."""
    if not samples:
        return ""
    return f"{fmt.format(min(samples) * scale)}-{fmt.format(max(samples) * scale)}"


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


def spawn_on_pty(executable: str, argv: Sequence[str], env: dict[str, str]) -> tuple[int, int]:
    """The raw way: openpty + posix_spawn with the slave as the controlling
    terminal (setsid, then open the tty as fd 0). Returns (pid, master)."""
    master, slave = os.openpty()
    try:
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
async def daemon_client() -> AsyncIterator[Client]:
    """Start a daemon in the scratch dirs (``scratch()`` must be active) and
    yield a client. On the way out: Shutdown(force), then the daemon's pid
    must be gone (SIGKILL by pid if not)."""
    paths = DaemonPaths.for_number(1)
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
