"""Figure: the daemon's memory across an upgrade in place (issue 35): what
it keeps once the output it carried across is drained, beside a daemon
that never upgraded, and the most the upgrade holds at once.

Each run, untimed: daemons 1 and 2 started by the installed command
(``multiserver --daemon N daemon``, buffer limit 8 MiB), each given
SESSIONS programs that print 8 MiB and sleep, waited for until every byte
is buffered (160 MiB a daemon). Then:

- daemon 1 upgrades (the library's ``Upgrade``), sampled every few ms
  meanwhile: the anonymous memory (``RssAnon``) of the daemon and of the
  installed code's check run, plus the pages of every snapshot file (a
  memfd) they hold, each counted once. The peak less the same sum just
  before is what the upgrade added; the limit is the buffered bytes once
  more.
- both drain: one client claims every session of each (the output leaves
  the daemon), closes the terminals, releases them; the daemon gives the
  freed heap back (its trim, 1 s after 8 MiB left). The anonymous memory
  and the RSS (``smaps_rollup``) of each are read once RSS has settled.

Target: the upgraded daemon's anonymous memory within 10 % of the one
never upgraded. Its RSS is in the detail, not the target: RSS also counts
the shared library pages a process has mapped, which a process that
exec'd faults in itself while a forked daemon's parent faulted them in
for it (about 6 MiB here; a daemon started in the foreground, never
forked, has them too): they cost no memory of the daemon's own.
"""

from __future__ import annotations

import os
import threading
import time

import attrs
import trio

from benchmarks.common import (
    COMMAND_TIMEOUT,
    MEASURE_TIMEOUT,
    MIB,
    scratch,
    smaps_rollup,
    timed_command,
)
from benchmarks.installed import installed
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread
from multiserver import DaemonPaths, open_client
from tests.procs import cmdline_of

NAME = "upgrade_memory"
SESSIONS = 20
BUFFER = 8 * MIB
SECONDS = 60.0
SAMPLE_GAP = 0.002
SETTLE_TIMEOUT = 15.0
# Lines of 63 characters, 65 bytes on the terminal (CR LF): as many as
# fit in the buffer, which keeps all of them.
LINES = BUFFER // 65
PRINTED = LINES * 65
PRINTER = ["sh", "-c", f"yes {'x' * 63} | head -n {LINES}; exec sleep 1000"]
UPGRADE_TIMEOUT = 60.0


def _status_kib(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _check_runs(pid: int) -> list[int]:
    """The children of ``pid`` that run the installed code's check, once
    they have exec'd it (trio starts it from a worker thread: every
    thread's children are looked at). Before its exec a child shares the
    daemon's pages, and counting them would count them twice."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return [p for p in out if b"--check-snapshot" in cmdline_of(p)]


def _snapshot_files(pid: int) -> dict[int, int]:
    """inode -> bytes in memory of every memfd ``pid`` holds open."""
    out: dict[int, int] = {}
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        try:
            if os.readlink(f"{base}/{name}").startswith("/memfd:"):
                st = os.stat(f"{base}/{name}")
                out[st.st_ino] = st.st_blocks * 512  # its pages, not its holes
        except OSError:
            pass
    return out


def held_now(pid: int) -> int:
    """Bytes: RssAnon of ``pid`` and of its check run, and every memfd
    they hold, each once."""
    pids = [pid, *_check_runs(pid)]
    anon = sum(_status_kib(p, "RssAnon") for p in pids) * 1024
    files: dict[int, int] = {}
    for p in pids:
        files.update(_snapshot_files(p))
    return anon + sum(files.values())


class PeakSampler:
    """``held_now(pid)`` sampled on a thread until ``stop``; ``peak``."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._done = threading.Event()
        self.peak = held_now(pid)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, held_now(self._pid))
            time.sleep(SAMPLE_GAP)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, held_now(self._pid))


async def _fill(paths: DaemonPaths) -> int:
    """SESSIONS printers on the daemon, waited for until all is buffered;
    the daemon's pid."""
    with trio.fail_after(MEASURE_TIMEOUT):
        async with open_client(paths) as client:
            ids = [
                (await client.launch(PRINTER, cwd="/", hold=False)).child.id
                for _ in range(SESSIONS)
            ]
            while True:
                listed = {c.id: c.buffered_bytes for c in await client.list()}
                if all(listed[i] >= PRINTED for i in ids):
                    return client.daemon_pid
                await trio.sleep(0.05)


async def _upgrade(paths: DaemonPaths) -> float:
    with trio.fail_after(UPGRADE_TIMEOUT):
        async with open_client(paths) as client:
            done = await client.upgrade()
    return done.paused


async def _drain(paths: DaemonPaths) -> None:
    """Every session claimed (its output taken), its terminal closed, released."""
    with trio.fail_after(MEASURE_TIMEOUT):
        async with open_client(paths) as client:
            ids = [c.id for c in await client.list()]
            results = await client.claim(ids)
            for r in results:
                if r.master is not None:
                    os.close(r.master)
            await client.release(ids)


def _settled(pid: int) -> tuple[float, float]:
    """(anonymous memory, RSS) in MiB, once RSS stopped falling for 1.5 s
    (the trim runs 1 s after the output left), within SETTLE_TIMEOUT."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    low, since = smaps_rollup(pid).get("Rss", 0), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < 1.5:
        time.sleep(0.1)
        now = smaps_rollup(pid).get("Rss", 0)
        if now < low:
            low, since = now, time.monotonic()
    rollup = smaps_rollup(pid)
    return rollup.get("Anonymous", 0) / 1024, rollup.get("Rss", 0) / 1024


async def _stop(paths: DaemonPaths) -> None:
    with trio.move_on_after(COMMAND_TIMEOUT):
        async with open_client(paths) as client:
            await client.shutdown(force=True)


@attrs.define
class Samples:
    anon: list[float] = attrs.Factory(list)  # MiB, upgraded, after the drain
    anon_never: list[float] = attrs.Factory(list)  # MiB, never upgraded
    rss: list[float] = attrs.Factory(list)
    rss_never: list[float] = attrs.Factory(list)
    peak: list[float] = attrs.Factory(list)  # MiB the upgrade added at its peak
    paused: list[float] = attrs.Factory(list)  # ms, Upgraded.paused


def _one_run(out: Samples) -> None:
    with scratch("upmem") as sc:
        env = sc.env(
            HOME=str(sc.root),
            TMPDIR=str(sc.root),
            MULTISERVER_IDLE_EXIT="never",
            MULTISERVER_BUFFER_LIMIT=str(BUFFER),
        )
        command = installed().command
        both = [DaemonPaths.for_number(n) for n in (1, 2)]
        try:
            for n in (1, 2):
                timed_command([command, "--daemon", str(n), "daemon"], env)
            pids = [trio.run(_fill, p) for p in both]
            before = held_now(pids[0])
            with PeakSampler(pids[0]) as sampler:
                paused = trio.run(_upgrade, both[0])
            for p in both:
                trio.run(_drain, p)
            (anon, rss), (anon_never, rss_never) = (_settled(pid) for pid in pids)
        finally:
            for p in both:
                trio.run(_stop, p)
    out.anon.append(anon)
    out.anon_never.append(anon_never)
    out.rss.append(rss)
    out.rss_never.append(rss_never)
    out.peak.append((sampler.peak - before) / MIB)
    out.paused.append(paused * 1000)


def run(settings: Settings) -> list[Row]:
    s = Samples()
    for _ in settings.runs_within(SECONDS):
        _one_run(s)
    buffered = SESSIONS * PRINTED / MIB
    after = Row.against(
        Limit("<=", 1.1, paired_ratio(s.anon, s.anon_never), "x never upgraded"),
        figure="memory after an upgrade and a drain: anonymous RSS (MiB)",
        subject=f"daemon upgraded with {buffered:.0f} MiB buffered ({SESSIONS} sessions), then drained",
        value=median(s.anon),
        unit="MiB",
        runs=len(s.anon),
        baseline=f"a daemon never upgraded, the same {buffered:.0f} MiB buffered and drained, same run",
        baseline_value=median(s.anon_never),
        detail=(
            f"range {spread(s.anon, 1, '{:.1f}')} MiB; RSS {median(s.rss):.1f} MiB, never"
            f" upgraded {median(s.rss_never):.1f} MiB (the rest is shared library pages: the"
            " new code faulted its own in, a forked daemon's parent did; a daemon started"
            " in the foreground, never forked, has them too)"
        ),
        samples=tuple(s.anon),
        baseline_samples=tuple(s.anon_never),
    )
    peak = Row.against(
        Limit("<=", 1.05, median(s.peak) / buffered, "x the buffered bytes"),
        figure="memory an upgrade adds at its peak (MiB)",
        subject=(
            f"upgrade with {buffered:.0f} MiB buffered: anonymous RSS of the daemon and its"
            " children (the check run), and its snapshot file's pages"
        ),
        value=median(s.peak),
        unit="MiB",
        runs=len(s.peak),
        baseline="the buffered bytes",
        baseline_value=buffered,
        detail=f"range {spread(s.peak, 1, '{:.0f}')} MiB; reported pause {median(s.paused):.0f} ms",
        samples=tuple(s.peak),
    )
    return [after, peak]
