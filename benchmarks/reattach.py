"""Figure: reattach K = 1, 50, 200, 1,000 detached sessions with one round
trip through each (issue 6, figure 3).

Every session runs ``cat`` on a PTY in its default (cooked) mode, so a byte
written to the master is echoed by the PTY: a round trip proves the fd in
hand is the session's PTY and is live. The key byte differs from run to
run, so a screen redrawn on attach cannot hold an old echo. Sessions are
started before the timing (untimed) and reused run after run; K takes the
first K of them.

- raw PTYs (the baseline): K PTYs this process opened with ``cat`` on each;
  timed: write the key to every master, then poll until each has echoed.
- multiserver, library: one daemon with 1,000 detached ``cat`` sessions;
  timed: ``open_client`` (connect + hello), one ``Client.claim`` of K ids,
  the key written to every master fd received, poll until each echoed. The
  ``release`` that follows is timed apart (detail column).
- multiserver, command line: ``multiserver restore --json`` in a fresh
  process, with K sessions saved in the arrangement (written by the
  benchmark; the other sessions are held by the benchmark meanwhile so the
  restore's orphan sweep leaves them alone). It claims all K, checks each,
  releases them and sweeps: the path a user takes to get every session
  back at login. It does no terminal round trip (a person then attaches to
  one). Timed from spawn to exit, so Python's start-up is in it.
- multiserver, command line, K = 1: ``multiserver attach --redraw none NAME`` on
  an outer PTY (echo off), timed from spawn until a key written to the
  outer master comes back (sent again every 5 ms until it does).
- dtach and tmux: K clients started one after another, each on its own
  outer PTY and timed like ``multiserver attach``; the clients stay
  attached until the K-th has echoed, then are stopped (untimed).
  Peers are bounded to K <= 200 (time budget); screen is not measured
  here (time budget); abduco where installed.

The raw baseline and multiserver run first (2,000 PTYs), then the peers
(about 800), so that the PTY count stays far from the system's limit.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Sequence

import attrs
import trio

from benchmarks.common import (
    COMMAND_TIMEOUT,
    MEASURE_TIMEOUT,
    Scratch,
    daemon_client,
    run_command,
    scratch,
    spawn_on_pty,
    stop_pids,
)
from benchmarks.peers import PEERS, Peer
from benchmarks.results import (
    Limit,
    Row,
    Settings,
    median,
    spread,
)
from benchmarks.terminal import MULTISERVER, Outer, multiserver_bin
from multiserver import Client, DaemonPaths, open_client
from restore import Arrangement, ArrangementStore, RestorationRef, SessionLeaf, Tab, Window

NAME = "reattach"
KEYS = b"%+&/{}|_"
BASELINE = "raw: K PTYs held by this process, one round trip through each"
PEER_MAX = 200
MEASURED_PEERS = ("dtach", "tmux", "abduco")
TARGET_SPEEDUP = 10.0  # reattach 200 sessions, x faster than dtach (issue 6)
SECONDS = 30.0  # per phase
PROGRAM = ("cat",)
LAUNCH_CONCURRENCY = 100


def _counts(settings: Settings) -> list[int]:
    return sorted({k for k in (1, 50, settings.sessions, settings.many) if k <= settings.many})


def round_trips(fds: Sequence[int], key: bytes, timeout: float = MEASURE_TIMEOUT) -> None:
    """Write ``key`` to every fd, then read each until it comes back."""
    for fd in fds:
        os.write(fd, key)
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    pending = set(fds)
    buf = bytearray(4096)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{len(pending)} of {len(fds)} fds did not echo")
        for fd, _mask in poller.poll(left * 1000):
            try:
                n = os.readv(fd, [buf])
            except BlockingIOError:
                continue
            if buf.find(key, 0, n) >= 0:
                pending.discard(fd)
                poller.unregister(fd)


# --- phase A: raw PTYs and multiserver -------------------------------------------------


@attrs.define
class RawSet:
    pids: list[int] = attrs.Factory(list)
    masters: list[int] = attrs.Factory(list)

    def start(self, sc: Scratch, count: int) -> None:
        exe = shutil.which(PROGRAM[0])
        assert exe is not None
        env = sc.env()
        for _ in range(count):
            pid, master = spawn_on_pty(exe, PROGRAM, env)
            os.set_blocking(master, False)
            self.pids.append(pid)
            self.masters.append(master)

    def stop(self) -> None:
        for fd in self.masters:
            os.close(fd)
        self.masters.clear()
        stop_pids(self.pids)

    def measure(self, k: int, key: bytes) -> float:
        t0 = time.perf_counter()
        round_trips(self.masters[:k], key)
        return time.perf_counter() - t0


@attrs.frozen
class Session:
    id: int
    pid: int
    name: str


async def _launch_all(client: Client, count: int) -> list[Session]:
    out: list[Session | None] = [None] * count
    limit = trio.Semaphore(LAUNCH_CONCURRENCY)

    async def one(i: int) -> None:
        async with limit:
            r = await client.launch(PROGRAM, name=f"r{i}", hold=False)
        out[i] = Session(r.child.id, r.child.pid, r.child.name)

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
    return [s for s in out if s is not None]


@attrs.frozen
class LibraryTimes:
    hello: float  # open_client: connect + hello (the Welcome lists every child)
    claim: float
    trips: float
    release: float

    @property
    def total(self) -> float:
        """What the figure counts: everything but the release."""
        return self.hello + self.claim + self.trips


async def _library(paths: DaemonPaths, sessions: list[Session], key: bytes) -> LibraryTimes:
    ids = [s.id for s in sessions]
    t0 = time.perf_counter()
    # An app reattaching ids it saved needs no listing of the daemon's children.
    async with open_client(paths, children=False) as client:
        t1 = time.perf_counter()
        results = await client.claim(ids)
        t2 = time.perf_counter()
        masters = [r.master for r in results if r.master is not None]
        try:
            if len(masters) != len(ids):
                raise RuntimeError(f"claim: {len(masters)} fds of {len(ids)}")
            for fd in masters:
                os.set_blocking(fd, False)
            round_trips(masters, key)
            t3 = time.perf_counter()
        finally:
            for fd in masters:
                os.close(fd)
        released, failures = await client.release(ids)
        t4 = time.perf_counter()
        if failures or len(released) != len(ids):
            raise RuntimeError(f"release: {len(released)} of {len(ids)}; {failures[:3]}")
    return LibraryTimes(t1 - t0, t2 - t1, t3 - t2, t4 - t3)


def _save_arrangement(sc: Scratch, client: Client, sessions: list[Session]) -> None:
    sock = str(client.socket_path)
    leaves = [
        SessionLeaf(
            s.name,
            list(PROGRAM),
            str(sc.root),
            ref=RestorationRef(sock, client.instance_id, s.id, s.pid),
        )
        for s in sessions
    ]
    store, warning = ArrangementStore.open_or_quarantine()
    if warning:
        raise RuntimeError(warning)
    try:
        store.save(Arrangement([Window("main", [Tab(leaf) for leaf in leaves])]))
    finally:
        store.close()


def run_json(argv: Sequence[str], env: dict[str, str], timeout: float = COMMAND_TIMEOUT) -> object:
    """Run a command that prints JSON; returns it parsed. RuntimeError if it
    fails; a command still running after ``timeout`` is killed by pid."""
    proc = subprocess.run(
        list(argv),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[1:3]} exited with {proc.returncode}: {proc.stderr[-300:]!r}")
    return json.loads(proc.stdout)


async def _cli_restore(sc: Scratch, paths: DaemonPaths, sessions: list[Session], k: int) -> float:
    """`multiserver restore --json` of the first k sessions, seconds."""
    async with open_client(paths) as holder:
        rest = [s.id for s in sessions[k:]]
        if rest:
            for r in await holder.claim(rest):
                if r.master is not None:
                    os.close(r.master)
        _save_arrangement(sc, holder, sessions[:k])
        env = MULTISERVER.env(sc)
        t0 = time.perf_counter()
        out = run_json([multiserver_bin(), "restore", "--json"], env)
        elapsed = time.perf_counter() - t0
    assert isinstance(out, dict)
    outcomes = [s["outcome"] for s in out["sessions"]]
    if len(outcomes) != k or any(o != "attached" for o in outcomes):
        raise RuntimeError(f"restore: {len(outcomes)} sessions, outcomes {set(outcomes)}")
    return elapsed


def _cli_attach(sc: Scratch, name: str, key: bytes) -> float:
    env = MULTISERVER.env(sc)
    t0 = time.perf_counter()
    outer = Outer.spawn(MULTISERVER.attach_argv(sc, name), env, echo=False)
    try:
        outer.wait_echo(key, every=0.005)
        return time.perf_counter() - t0
    finally:
        outer.close()


@attrs.define
class PhaseA:
    raw: dict[int, list[float]] = attrs.Factory(dict)
    lib: dict[int, list[LibraryTimes]] = attrs.Factory(dict)
    cli: dict[int, list[float]] = attrs.Factory(dict)
    attach: list[float] = attrs.Factory(list)


async def _phase_a(settings: Settings, raw: RawSet, sc: Scratch) -> PhaseA:
    counts = _counts(settings)
    out = PhaseA()
    async with daemon_client() as client:
        paths = DaemonPaths.for_socket(client.socket_path)
        with trio.fail_after(MEASURE_TIMEOUT):
            sessions = await _launch_all(client, max(counts))
        if len(sessions) != max(counts):
            raise RuntimeError(f"launched {len(sessions)} of {max(counts)}")
        await trio.sleep(0.3)
        for run in settings.runs_within(SECONDS):
            key = KEYS[run % len(KEYS) : run % len(KEYS) + 1]
            for k in counts:
                out.raw.setdefault(k, []).append(raw.measure(k, key))
                with trio.fail_after(MEASURE_TIMEOUT):
                    out.lib.setdefault(k, []).append(await _library(paths, sessions[:k], key))
                with trio.fail_after(MEASURE_TIMEOUT):
                    out.cli.setdefault(k, []).append(await _cli_restore(sc, paths, sessions, k))
            out.attach.append(_cli_attach(sc, sessions[0].name, key))
    return out


# --- phase B: peers ------------------------------------------------------------------------


def _peer_phase(settings: Settings, peer: Peer, runs: int) -> dict[int, list[float]]:
    counts = [k for k in _counts(settings) if k <= PEER_MAX]
    out: dict[int, list[float]] = {}
    with scratch(f"re-{peer.name}") as sc:
        env = peer.env(sc)
        for i in range(max(counts)):
            code = run_command(peer.new_argv(sc.root, f"s{i}", PROGRAM), env)
            if code != 0:
                raise RuntimeError(f"{peer.name}: starting session {i} exited with {code}")
        for run in range(runs):
            key = KEYS[run % len(KEYS) : run % len(KEYS) + 1]
            for k in counts:
                outers: list[Outer] = []
                try:
                    t0 = time.perf_counter()
                    for i in range(k):
                        outers.append(
                            Outer.spawn(peer.attach_argv(sc.root, f"s{i}"), env, echo=False)
                        )
                        outers[-1].wait_echo(key, every=0.005)
                    out.setdefault(k, []).append(time.perf_counter() - t0)
                finally:
                    stop_pids([o.pid for o in outers])
                    for o in outers:
                        os.close(o.master)
    return out


def run(settings: Settings) -> list[Row]:
    counts = _counts(settings)
    raw = RawSet()
    with scratch("re-raw") as raw_sc:
        try:
            raw.start(raw_sc, max(counts))
            with scratch("re-ms") as sc:
                a = trio.run(_phase_a, settings, raw, sc)
        finally:
            raw.stop()
    runs = len(a.attach)
    peers: dict[str, dict[int, list[float]]] = {}
    for p in PEERS:
        if p.name in MEASURED_PEERS and p.installed():
            peers[p.name] = _peer_phase(settings, p, runs)
    return _rows(counts, a, peers)


def _rows(counts: Sequence[int], a: PhaseA, peers: dict[str, dict[int, list[float]]]) -> list[Row]:
    rows: list[Row] = []
    for k in counts:
        figure = f"reattach {k} session{'s' if k > 1 else ''} + one round trip each (ms)"
        base = [x * 1000 for x in a.raw[k]]
        lib_times = a.lib[k]
        lib = median([t.total for t in lib_times])
        dtach = peers.get("dtach", {}).get(k)
        speedup = (
            Limit(">=", TARGET_SPEEDUP, median(dtach) / lib, "x faster than dtach")
            if dtach and k == 200
            else None
        )
        rows.append(
            _row(
                figure,
                base,
                "multiserver, library: open_client(children=False) + claim(K ids) + a round trip through each fd",
                [t.total for t in lib_times],
                "medians of its parts: connect + hello "
                f"{median([t.hello for t in lib_times]) * 1000:.1f} ms (no listing of the daemon's "
                f"{max(counts)} children), claim {median([t.claim for t in lib_times]) * 1000:.1f} ms, "
                f"round trips {median([t.trips for t in lib_times]) * 1000:.1f} ms; the release "
                f"afterwards {median([t.release for t in lib_times]) * 1000:.1f} ms (not counted)",
                speedup,
            )
        )
        rows.append(
            _row(
                figure,
                base,
                "multiserver, command line: `multiserver restore --json` of K saved sessions "
                "(claim, check, release, sweep; no round trip)",
                a.cli[k],
                "fresh process, start-up included",
            )
        )
        if k == 1:
            rows.append(
                _row(
                    figure,
                    base,
                    "multiserver, command line: `multiserver attach --redraw none NAME` + a round trip",
                    a.attach,
                    "fresh process, start-up included",
                )
            )
        for p in PEERS:
            got = peers.get(p.name, {}).get(k)
            if got:
                rows.append(
                    _row(
                        figure,
                        base,
                        p.name,
                        got,
                        f"K x (`{p.attach_shape}` on its own PTY + a round trip), in turn",
                    )
                )
                continue
            if not p.installed():
                why = "not installed"
            elif k > PEER_MAX:
                why = f"not measured: peers only up to K = {PEER_MAX} (time budget)"
            else:
                why = "not measured here (time budget)"
            rows.append(Row(figure, p.name, None, "ms", 0, BASELINE, median(base), detail=why))
    return rows


def _row(
    figure: str,
    base: list[float],
    subject: str,
    seconds: list[float],
    detail: str,
    limit: Limit | None = None,
) -> Row:
    values = [x * 1000 for x in seconds]
    return Row.against(
        limit,
        figure=figure,
        subject=subject,
        value=median(values),
        unit="ms",
        runs=len(values),
        baseline=BASELINE,
        baseline_value=median(base),
        detail=f"range {spread(values, 1, '{:.1f}')} ms; {detail}",
        samples=tuple(values),
        baseline_samples=tuple(base[: len(values)]),
    )
