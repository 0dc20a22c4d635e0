"""Figure: the pause of an upgrade in place, at 200 and 1,000 sessions
(issue 25): how long a new connection waits for its answer while the
daemon replaces its code.

For each size N, untimed: daemon 1 started by the installed command
(``multiserver daemon``, the wheel's venv of ``benchmarks/installed.py``:
the upgrade execs that venv's python and its installed code), then N
detached ``sleep 1000`` sessions launched through one connection. Each run:

- timed, the pause: this process sends ``Upgrade`` (the library's client)
  and, from then until the answer, probes with new connections back to
  back (a 2 ms gap): connect, Hello, the first byte of the answer, close.
  The figure is the longest such wait. A connection made once the daemon
  stops accepting waits in the backlog for the new code; one accepted just
  before waits parked and crosses the exec; either way its first byte comes
  when the new code serves. Beside it, in the detail: the daemon's own
  figure (``Upgraded.paused``: from its last snapshot, just before the
  exec, to its answer in the new code), and the time from sending the
  Upgrade to that first byte (the installed code's check run, which comes
  before the pause, included). The daemon must answer with its own pid
  and still list N sessions.
- timed, the command: ``multiserver upgrade`` as a person runs it (its own
  start, the check run, the pause), wall time.
- baseline, timed: the floor of any new code, ``python -P -c "import
  multiserver.daemon._daemon_main"`` in the venv: the interpreter's start and the
  daemon's imports, which the resumed process pays before it reads the
  snapshot.

Where the floor goes, in the detail (once per size, medians of 3): the
interpreter's start (``python -P -c pass``) and ``python -X importtime``
of those imports, summed by top-level package.

Target: a pause under 100 ms at 200 sessions.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

import attrs
import trio

from benchmarks.common import (
    COMMAND_TIMEOUT,
    MEASURE_TIMEOUT,
    SESSION_ARGV,
    Scratch,
    scratch,
    timed_command,
)
from benchmarks.installed import installed
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread
from multiserver import PROTOCOL_VERSION, DaemonPaths, open_client
from multiserver.internal import MIN_PROTOCOL_VERSION

NAME = "upgrade"
TARGET_MS = {200: 100.0}
# Seconds each size may take, from its first run (3 runs at least).
SECONDS = {200: 25.0, 1000: 45.0}
PROBE_GAP = 0.002
UPGRADE_TIMEOUT = 60.0
FLOOR_IMPORT = "import multiserver.daemon._daemon_main"
# Top-level modules counted under another name in the floor's breakdown.
PACKAGE_OF = {"attr": "attrs", "cattr": "cattrs", "outcome": "trio", "sniffio": "trio"}
PACKAGE_OF |= {"sortedcontainers": "trio", "idna": "trio", "platformdirs": "multiserver"}
SHOWN = ("trio", "cattrs", "attrs", "multiserver")


@attrs.define
class Samples:
    pause: list[float] = attrs.Factory(list)  # ms, the longest first-byte wait
    reported: list[float] = attrs.Factory(list)  # ms, Upgraded.paused
    from_send: list[float] = attrs.Factory(list)  # ms, Upgrade sent -> that first byte
    command: list[float] = attrs.Factory(list)  # ms, `multiserver upgrade`
    floor: list[float] = attrs.Factory(list)  # ms, the baseline


def _hello() -> bytes:
    """A Hello frame as docs/protocol.md spells it out (section 8: magic
    "MS", version, type 1, no fds, the JSON body's length, no blob), for a
    probe that only waits for the first byte of the answer."""
    body = json.dumps(
        {
            "min_version": MIN_PROTOCOL_VERSION,
            "max_version": PROTOCOL_VERSION,
            "client": "bench-probe",
            "children": False,
        },
        separators=(",", ":"),
    ).encode()
    return struct.pack(">2sHHHII", b"MS", PROTOCOL_VERSION, 1, 0, len(body), 0) + body


async def _probe(path: Path, hello: bytes) -> tuple[float, float]:
    """(when it connected, when the first byte of the answer came)."""
    with trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        t0 = time.perf_counter()
        await sock.connect(str(path))
        await sock.send(hello)
        first = await sock.recv(1)
        t1 = time.perf_counter()
    if not first:
        raise RuntimeError("a probe's connection closed unanswered")
    return t0, t1


async def _probed_upgrade(paths: DaemonPaths, count: int) -> tuple[float, float, float]:
    """(the longest first-byte wait, the daemon's paused, Upgrade sent ->
    the end of that wait), in seconds."""
    hello = _hello()
    waits: list[tuple[float, float]] = []
    with trio.fail_after(UPGRADE_TIMEOUT):
        async with open_client(paths) as client:
            pid = client.daemon_pid
            answered = trio.Event()

            async def probing() -> None:
                while not answered.is_set():
                    waits.append(await _probe(paths.socket, hello))
                    await trio.sleep(PROBE_GAP)

            async with trio.open_nursery() as nursery:
                sent = time.perf_counter()
                nursery.start_soon(probing)
                done = await client.upgrade()
                answered.set()
            listed = len(await client.list())
    if done.pid != pid or listed != count:
        raise RuntimeError(f"after the upgrade: pid {done.pid} (was {pid}), {listed} sessions")
    start, end = max(waits, key=lambda w: w[1] - w[0])
    return end - start, done.paused, end - sent


def _env(sc: Scratch) -> dict[str, str]:
    return sc.env(
        HOME=str(sc.root),
        TMPDIR=str(sc.root),
        MULTISERVER_IDLE_EXIT="never",
    )


async def _launch(paths: DaemonPaths, count: int) -> None:
    with trio.fail_after(MEASURE_TIMEOUT):
        async with open_client(paths) as client, trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(lambda: client.launch(SESSION_ARGV, cwd="/", hold=False))


async def _stop(paths: DaemonPaths) -> None:
    with trio.move_on_after(COMMAND_TIMEOUT):
        async with open_client(paths) as client:
            await client.shutdown(force=True)


def _measure(settings: Settings, sc: Scratch, count: int) -> Samples:
    env = _env(sc)
    command = installed().command
    timed_command([command, "daemon"], env)
    paths = DaemonPaths.for_number(1)
    out = Samples()
    try:
        trio.run(_launch, paths, count)
        for _ in settings.runs_within(SECONDS[count]):
            pause, reported, from_send = trio.run(_probed_upgrade, paths, count)
            out.pause.append(pause * 1000)
            out.reported.append(reported * 1000)
            out.from_send.append(from_send * 1000)
            out.command.append(timed_command([command, "upgrade"], env, UPGRADE_TIMEOUT) * 1000)
            floor = [installed().python, "-P", "-c", FLOOR_IMPORT]
            out.floor.append(timed_command(floor, env) * 1000)
    finally:
        trio.run(_stop, paths)
    return out


def _import_times(env: dict[str, str]) -> Counter[str]:
    """Microseconds of the floor's imports (``-X importtime``, self), by package."""
    done = subprocess.run(
        [installed().python, "-X", "importtime", "-P", "-c", FLOOR_IMPORT],
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=True,
    )
    by: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if found:
            top = found.group(2).split(".")[0]
            by[PACKAGE_OF.get(top, top if top in SHOWN else "stdlib")] += int(found.group(1))
    return by


def _breakdown(sc: Scratch) -> str:
    """The floor's parts: the interpreter's start and the imports by package (ms)."""
    env = _env(sc)
    bare = [installed().python, "-P", "-c", "pass"]
    start = median([timed_command(bare, env) for _ in range(3)])
    runs = [_import_times(env) for _ in range(3)]
    parts = {name: median([r[name] for r in runs]) / 1000 for name in (*SHOWN, "stdlib")}
    total = median([sum(r.values()) for r in runs]) / 1000
    listed = ", ".join(f"{name} {ms:.0f}" for name, ms in parts.items())
    return f"interpreter start {start * 1000:.0f} ms, imports {total:.0f} ms ({listed})"


def run(settings: Settings) -> list[Row]:
    rows = []
    for count in (settings.sessions, settings.many):
        with scratch(f"upgrade{count}") as sc:
            samples = _measure(settings, sc, count)
            where = _breakdown(sc)
        rows.append(_row(count, samples, where))
    return rows


def _row(count: int, s: Samples, where: str) -> Row:
    target = TARGET_MS.get(count)
    value = median(s.pause)
    return Row.against(
        None if target is None else Limit("<", target, value, "ms"),
        figure="upgrade in place: the longest wait of a new connection for its answer (ms)",
        subject=f"Upgrade, {count} sessions (probes back to back)",
        value=value,
        unit="ms",
        runs=len(s.pause),
        baseline="python -P -c 'import multiserver.daemon._daemon_main' (the new code's floor)",
        baseline_value=median(s.floor),
        detail=(
            f"range {spread(s.pause)} ms; {paired_ratio(s.pause, s.floor):.1f}x the floor;"
            f" the daemon's own figure (snapshot to answer) {median(s.reported):.0f} ms;"
            f" Upgrade sent to that first byte (the check run first) {median(s.from_send):.0f} ms;"
            f" `multiserver upgrade` {median(s.command):.0f} ms; the floor: {where}"
        ),
        samples=tuple(s.pause),
        baseline_samples=tuple(s.floor),
    )
