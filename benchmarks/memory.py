"""Figure: memory (PSS) of the server side with 200 idle sessions.

PSS is the sum of ``Pss`` in ``/proc/PID/smaps_rollup`` over the server's
processes; the session children (``sleep``) are excluded for everyone.

- multiserver: the daemon process, after 200 detached launches through one
  connection (which stays open) and a short settle.
- each installed peer: all of its processes (dtach: one per session; tmux:
  the server; screen: one SCREEN per session).
- baseline: a bare Python (``python -I -S``, same interpreter) that opened
  200 PTYs and spawned ``sleep`` on each, holding the masters: the floor
  for any Python daemon.

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
    Row,
    Settings,
    daemon_client,
    descendants,
    median,
    memory_of,
    pss_tree,
    scratch,
    spread,
    stop_pids,
    wait_for,
)
from benchmarks.peers import PEERS, server_pids, start_sessions, wait_sessions

NAME = "memory"
TARGET_MIB = 20.0
BASELINE = "raw: bare python -I -S holding 200 PTYs"
SETTLE = 0.5

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


async def _daemon(count: int) -> tuple[dict[str, float], float, int, float]:
    with trio.fail_after(MEASURE_TIMEOUT):
        async with daemon_client() as client:
            await trio.sleep(SETTLE)
            empty = memory_of([client.daemon_pid])["Pss"]
            for _ in range(count):
                await client.launch(SESSION_ARGV, hold=False)
            await trio.sleep(SETTLE)
            pid = client.daemon_pid
            children = descendants(pid)
            if len(children) != count:
                raise RuntimeError(f"{len(children)} of {count} children running")
            mem = memory_of([pid])
            kids = pss_tree(pid) - mem["Pss"]
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            return mem, kids, fds, empty


def _multiserver(count: int) -> tuple[dict[str, float], float, int, float]:
    with scratch("mem"):
        return trio.run(_daemon, count)


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
    k = settings.sessions
    installed = [i for i, p in enumerate(PEERS) if p.installed()]
    base: list[dict[str, float]] = []
    ms: list[tuple[dict[str, float], float, int, float]] = []
    peers: dict[int, list[tuple[dict[str, float], int]]] = {i: [] for i in installed}
    for _ in range(settings.runs):
        base.append(_baseline(k))
        ms.append(_multiserver(k))
        for i in installed:
            peers[i].append(_peer(i, k))

    figure = f"memory (PSS) with {k} idle sessions"
    base_pss = [m["Pss"] for m in base]
    base_value = median(base_pss)

    def row(subject: str, mems: list[dict[str, float]], target: bool, extra: str) -> Row:
        pss = [m["Pss"] for m in mems]
        value = median(pss)
        detail = (
            f"range {spread(pss, 1, '{:.1f}')} MiB; Pss_Anon {median([m['Pss_Anon'] for m in mems]):.1f}, "
            f"RSS {median([m['Rss'] for m in mems]):.1f} MiB; {extra}"
        )
        return Row(
            figure=figure,
            subject=subject,
            value=value,
            unit="MiB",
            runs=len(mems),
            baseline=BASELINE,
            baseline_value=base_value,
            target=f"< {TARGET_MIB:.0f} MiB" if target else "",
            met=(value < TARGET_MIB) if target else None,
            detail=detail,
            samples=tuple(pss),
            baseline_samples=tuple(base_pss),
        )

    rows = [
        row(
            "multiserver daemon",
            [m for m, _, _, _ in ms],
            True,
            f"1 process, {median([f for _, _, f, _ in ms]):.0f} open fds; "
            f"{median([e for _, _, _, e in ms]):.1f} MiB before the first launch; "
            f"its {k} children (not counted) {median([c for _, c, _, _ in ms]):.1f} MiB",
        )
    ]
    for i, p in enumerate(PEERS):
        if i in peers:
            nprocs = median([n for _, n in peers[i]])
            rows.append(row(p.name, [m for m, _ in peers[i]], False, f"{nprocs:.0f} process(es)"))
        else:
            rows.append(
                Row(figure, p.name, None, "MiB", 0, BASELINE, base_value, detail="not installed")
            )
    return rows
