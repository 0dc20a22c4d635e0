"""Figure: the library restore of 10,000 sessions across 100 daemons
(issue 22), with simulated daemons.

Real daemons cannot hold that many here: every session is a PTY, and
Linux allows 4,096 by default (``/proc/sys/kernel/pty/max``). So the
daemons are ``multiserver.testing.SimDaemon``: the daemon's own request
core, connections and codec on real Unix sockets, with children that are
socketpairs instead of PTYs and processes. What is not simulated: the PTY
itself and the process per daemon. The 100 daemons are served by 4 helper
processes of 25 each (``benchmarks/_simhost.py``; a process cannot hold
the 30,000 fds of one process for everything under this machine's
``RLIMIT_NOFILE``), so on 2 cores they answer with less parallelism than
100 real daemons would have, never more.

Set-up (untimed): the 4 helpers, each daemon with 100 running, unheld
children; an ``Arrangement`` (one window, one tab per session) built from
the children's references.

- library: ``restore.restore_arrangement(arrangement, nursery=...,
  timeout=10)`` timed from the call to its return, as the ``restoring``
  figure times it; all 10,000 sessions must come back ``attached`` (this
  process then holds 10,000 fds). ``release_claims`` gives them back
  (untimed).
- baseline, same run: 100 concurrent ``open_client`` + one
  ``Client.claim`` of that daemon's 100 ids, timed until the last claim
  returns: the work the restore sits on.

Target: under 250 ms (the ``restoring`` figure's 1,000 across 10 has the
same bound).
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import trio

from benchmarks.common import COMMAND_TIMEOUT, SESSION_ARGV, Scratch, scratch, stop_pids
from benchmarks.installed import REPO
from benchmarks.restoring import Daemon, claim_all, timed_restore
from benchmarks.results import Limit, Row, Settings, median, spread
from multiserver import DaemonPaths
from restore import Arrangement, Options, RestorationRef, SessionLeaf, Tab, Window

NAME = "simrestore"
DAEMONS = 100
PER_DAEMON = 100
HOSTS = 4
TARGET_MS = 250.0
SECONDS = 40.0
# The fds this process holds at the restore's end, and some to spare.
FDS_NEEDED = DAEMONS * PER_DAEMON + 2 * DAEMONS + 500


@contextlib.contextmanager
def _simulated(sc: Scratch) -> Iterator[tuple[list[Daemon], Arrangement]]:
    """The helpers, serving until the block ends; their daemons (with the
    children's ids) and the arrangement of every child."""
    root = sc.root / "sim"
    per_host = DAEMONS // HOSTS
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for h in range(HOSTS):
            argv = [sys.executable, "-m", "benchmarks._simhost", str(root)]
            argv += [str(1 + h * per_host), str(per_host), str(PER_DAEMON)]
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=REPO,
                    env=sc.env(),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
            )
        daemons: list[Daemon] = []
        tabs: list[Tab] = []
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # once every daemon of it listens
            if not line:
                raise RuntimeError(f"simulated daemons exited with {proc.wait(COMMAND_TIMEOUT)}")
            for d in json.loads(line):
                sock = d["socket"]
                for child_id, pid, name in d["children"]:
                    ref = RestorationRef(sock, d["instance_id"], child_id, pid)
                    tabs.append(Tab(SessionLeaf(name, list(SESSION_ARGV), "/", ref=ref)))
                ids = tuple(c[0] for c in d["children"])
                daemons.append(Daemon(DaemonPaths.for_socket(Path(sock)), 0, ids))
        if len(tabs) != DAEMONS * PER_DAEMON:
            raise RuntimeError(f"{len(tabs)} simulated sessions of {DAEMONS * PER_DAEMON}")
        yield daemons, Arrangement([Window("main", tabs)])
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                stop_pids([proc.pid])
            if proc.stdout is not None:
                proc.stdout.close()


async def _measure(
    settings: Settings, daemons: list[Daemon], arrangement: Arrangement
) -> tuple[list[float], list[float]]:
    library: list[float] = []
    claim: list[float] = []
    total = DAEMONS * PER_DAEMON
    for _ in settings.runs_within(SECONDS):
        claim.append(await claim_all(daemons))
        library.append((await timed_restore(arrangement, 10.0, Options(), total))[0])
    return library, claim


def run(settings: Settings) -> list[Row]:
    figure = f"restore {DAEMONS * PER_DAEMON} sessions across {DAEMONS} daemons (ms)"
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FDS_NEEDED:
        return [Row(figure, "not measured", None, "", 0, "", None, detail=f"RLIMIT_NOFILE {soft}")]
    with scratch("simrestore") as sc, _simulated(sc) as (daemons, arrangement):
        library, claim = trio.run(_measure, settings, daemons, arrangement)
    ms = [x * 1000 for x in library]
    base = [x * 1000 for x in claim]
    return [
        Row.against(
            Limit("<", TARGET_MS, median(ms), "ms"),
            figure=figure,
            subject="multiserver, library: restore_arrangement, all attached (simulated daemons)",
            value=median(ms),
            unit="ms",
            runs=len(ms),
            baseline=f"{DAEMONS} concurrent open_client + claim({PER_DAEMON} ids)",
            baseline_value=median(base),
            detail=(
                f"range {spread(ms, 1, '{:.1f}')} ms; {HOSTS} helper processes serve the "
                f"{DAEMONS} SimDaemons, children are socketpairs (no PTYs)"
            ),
            samples=tuple(ms),
            baseline_samples=tuple(base),
        )
    ]
