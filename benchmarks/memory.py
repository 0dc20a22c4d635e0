"""Figure: memory (PSS) of the server side with 200 and 1,000 idle
sessions (issue 6, figure 5).

PSS is the sum of ``Pss`` in ``/proc/PID/smaps_rollup`` over the server's
processes; the session children (``sleep``) are excluded for everyone.

- multiserver: every process of ours (marked by the run's environment),
  the session children aside, after 200 detached launches through one
  connection (which stays open), one more by the command line (``new -d``:
  what a person runs, which once started a saver beside the daemon) and a
  short settle. The detail says how many processes that was (1: the
  daemon alone, issue 35).
- each installed peer: all of its processes (dtach: one per session; tmux:
  the server; screen: one SCREEN per session).
- baseline: a bare Python (``python -I -S``, same interpreter) that opened
  200 PTYs and spawned ``sleep`` on each, holding the masters: the floor
  for any Python daemon.

At 1,000 sessions the same, over fewer runs (PSS varies little), without
the targets (they are the 200's).

PSS shares file-backed pages among every process that maps them. This
benchmark is itself Python with the same libpython, which lowers the PSS of
the daemon and of the baseline a little; ``Pss_Anon`` (the heap) is not
affected and is given in the detail column.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time

import trio

from benchmarks.common import (
    COMMAND_TIMEOUT,
    MEASURE_TIMEOUT,
    SESSION_ARGV,
    Scratch,
    daemon_client,
    descendants,
    marked_pids,
    memory_of,
    pss_tree,
    run_command,
    scratch,
    stop_pids,
    wait_for,
)
from benchmarks.peers import PEERS, server_pids, start_sessions, wait_sessions
from benchmarks.results import (
    Limit,
    Row,
    Settings,
    median,
    spread,
)
from benchmarks.terminal import multiserver_bin

NAME = "memory"
TARGET_MIB = 20.0
SETTLE = 0.5
# Past these (from the first run), a loaded machine gets fewer runs.
SECONDS = 40.0
SECONDS_MANY = 15.0


def _baseline_name(count: int) -> str:
    return f"raw: bare python -I -S holding {count} PTYs"


# Run with ``python -I -S -c HOLDER COUNT EXECUTABLE``: prints the children's
# pids, holds the masters until stdin closes, then kills and reaps them.
HOLDER = """
import os, sys
count, exe = int(sys.argv[1]), sys.argv[2]
pids, masters = [], []
for _ in range(count):
    master, slave = os.openpty()
    pid = os.posix_spawn(exe, [exe, "1000"], os.environ, setsid=True, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, os.ttyname(slave), os.O_RDWR, 0),
        (os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)])
    os.close(slave)
    pids.append(pid)
    masters.append(master)
print(" ".join(map(str, pids)), flush=True)
sys.stdin.read()
for fd in masters:
    os.close(fd)
for pid in pids:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
"""


def _baseline(count: int) -> dict[str, float]:
    with scratch("holder") as sc:
        exe = shutil.which(SESSION_ARGV[0])
        assert exe is not None
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", HOLDER, str(count), exe],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=sc.env(),
        )
        try:
            assert proc.stdout is not None and proc.stdin is not None
            ready, _, _ = select.select([proc.stdout], [], [], COMMAND_TIMEOUT)
            if not ready:
                raise RuntimeError("holder did not start")
            line = proc.stdout.readline().split()
            if len(line) != count:
                raise RuntimeError(f"holder started {len(line)} of {count} children")
            time.sleep(SETTLE)
            return memory_of([proc.pid])
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                stop_pids([proc.pid])
            if proc.stdout is not None:
                proc.stdout.close()


async def _daemon(count: int, sc: Scratch) -> tuple[dict[str, float], float, int, float, int]:
    with trio.fail_after(MEASURE_TIMEOUT):
        async with daemon_client() as client:
            await trio.sleep(SETTLE)
            empty = memory_of([client.daemon_pid])["Pss"]
            for _ in range(count - 1):
                await client.launch(SESSION_ARGV, hold=False)
            made = await trio.to_thread.run_sync(
                lambda: run_command([multiserver_bin(), "new", "-d", "--", *SESSION_ARGV], sc.env())
            )
            if made != 0:
                raise RuntimeError(f"multiserver new -d exited with {made}")
            await trio.sleep(SETTLE)
            pid = client.daemon_pid
            children = descendants(pid)
            if len(children) != count:
                raise RuntimeError(f"{len(children)} of {count} children running")
            # Every process of ours: the marked ones, the sessions aside.
            ours = [p for p in marked_pids(sc.marker) if p not in children and p != os.getpid()]
            mem = memory_of(ours)
            kids = pss_tree(pid) - memory_of([pid])["Pss"]
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            return mem, kids, fds, empty, len(ours)


def _multiserver(count: int) -> tuple[dict[str, float], float, int, float, int]:
    with scratch("mem") as sc:
        return trio.run(_daemon, count, sc)


# Why a peer that is not installed is not: where nothing can install it.
NOT_HERE = {
    "abduco": "not installed: not in Debian's archive (bookworm), so `make bench` cannot add it"
}


def _peer(peer_index: int, count: int) -> tuple[dict[str, float], int]:
    peer = PEERS[peer_index]
    with scratch(peer.name) as sc:
        start_sessions(peer, sc, count)
        if wait_sessions(sc, count) != count:
            raise RuntimeError(f"{peer.name}: not all {count} sessions started")
        time.sleep(SETTLE)
        # tmux forks its server from the first client: wait until only
        # servers remain (the short-lived clients have exited).
        wait_for(lambda: bool(server_pids(sc)), COMMAND_TIMEOUT)
        servers = server_pids(sc)
        return memory_of(servers), len(servers)


def run(settings: Settings) -> list[Row]:
    return [
        *_run(settings, settings.sessions, True, SECONDS, 3),
        *_run(settings, settings.many, False, SECONDS_MANY, 2),
    ]


def _run(
    settings: Settings, k: int, with_targets: bool, seconds: float, at_least: int
) -> list[Row]:
    installed = [i for i, p in enumerate(PEERS) if p.installed()]
    base: list[dict[str, float]] = []
    ms: list[tuple[dict[str, float], float, int, float, int]] = []
    peers: dict[int, list[tuple[dict[str, float], int]]] = {i: [] for i in installed}
    for _ in settings.runs_within(seconds, at_least):
        base.append(_baseline(k))
        ms.append(_multiserver(k))
        for i in installed:
            peers[i].append(_peer(i, k))

    figure = f"memory (PSS) with {k} idle sessions"
    baseline = _baseline_name(k)
    base_pss = [m["Pss"] for m in base]
    base_value = median(base_pss)

    def row(
        subject: str, mems: list[dict[str, float]], limits: list[Limit | None], extra: str
    ) -> Row:
        pss = [m["Pss"] for m in mems]
        value = median(pss)
        detail = (
            f"range {spread(pss, 1, '{:.1f}')} MiB; Pss_Anon {median([m['Pss_Anon'] for m in mems]):.1f}, "
            f"RSS {median([m['Rss'] for m in mems]):.1f} MiB; {extra}"
        )
        return Row.against(
            limits,
            figure=figure,
            subject=subject,
            value=value,
            unit="MiB",
            runs=len(mems),
            baseline=baseline,
            baseline_value=base_value,
            detail=detail,
            samples=tuple(pss),
            baseline_samples=tuple(base_pss),
        )

    # Issue 6: the daemon's PSS below every peer's.
    peer_pss = {
        PEERS[i].name: median([m["Pss"] for m, _ in got]) for i, got in peers.items() if got
    }
    ms_pss = median([m["Pss"] for m, *_ in ms])
    smallest = min(peer_pss, key=lambda name: peer_pss[name]) if peer_pss else None
    below_peers = (
        Limit("<", 1.0, ms_pss / peer_pss[smallest], f"x the smallest peer's ({smallest})")
        if smallest is not None
        else None
    )
    rows = [
        row(
            "multiserver daemon",
            [m for m, *_ in ms],
            [Limit("<", TARGET_MIB, ms_pss, "MiB"), below_peers] if with_targets else [],
            f"{max(n for *_, n in ms)} process(es) of ours, all counted (one session started"
            f" by `new -d`); {median([f for _, _, f, _, _ in ms]):.0f} open fds; "
            f"{median([e for _, _, _, e, _ in ms]):.1f} MiB before the first launch; "
            f"its {k} children (not counted) {median([c for _, c, _, _, _ in ms]):.1f} MiB",
        )
    ]
    for i, p in enumerate(PEERS):
        if i in peers:
            nprocs = median([n for _, n in peers[i]])
            rows.append(row(p.name, [m for m, _ in peers[i]], [], f"{nprocs:.0f} process(es)"))
        else:
            why = NOT_HERE.get(p.name, "not installed")
            rows.append(Row(figure, p.name, None, "MiB", 0, baseline, base_value, detail=why))
    return rows
