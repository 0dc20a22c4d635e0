"""Figure: what keeping scrollback costs (issue 14): the CPU of the attach
client and of the daemon while sessions print continuously, with and
without their scrollback being saved, and how often the store is written.

Two sessions on one daemon, each running the same printer: a line of 100
bytes every millisecond (about 100 KB/s, a busy build log)::

    python -c 'while True: write one numbered line; sleep to the next ms'

- ``held`` is attached: ``multiserver attach -r none held`` on an outer
  24x80 PTY that the benchmark reads as fast as it comes (``terminal``).
- ``free`` is held by nobody: its daemon keeps its output.

Subjects, interleaved run by run (the order swapped every other run):

- without (the baseline): the attach client saves nothing of its screen,
  and no saver runs: what the same work cost before scrollback was kept.
- with: the attach client saves what its terminal shows every
  ``SAVE_EVERY`` (3 s) while output flows, and ``multiserver save
  --scrollback --every 5`` (what the login service runs) saves ``free``.

Both clients run through ``benchmarks._counted``, which runs the command
in its own process with each store write transaction logged (its time,
CLOCK_MONOTONIC); the baseline's client runs the same way, with its screen
saving turned off there. Nothing else differs between the subjects.

Measured over a WINDOW of 10 s that starts once the client is attached
(a probe byte came back) and, with saving, once the saver's first pass is
written: CPU seconds (utime + stime from /proc, 10 ms ticks) of the attach
client, the daemon and the saver; and the store writes each made in the
window, per second per session (the saver writes every session of a pass in
one transaction: that counts one for each).

The with/without ratios are exposed to the machine's load (a few ms of
saving against a second of CPU, with 10 ms ticks), so two figures time the
saving's own cost where nothing else interferes: the attach client's store
writes (``time.thread_time`` around each transaction, logged by
``benchmarks._counted``), as a share of the client's CPU; and the daemon's
part of a saver pass (a connection, List, a Peek of 256 KiB), PASSES of
them against a daemon doing nothing else, at one pass every 5 s, as a share
of what the daemon spends on the two sessions without saving.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import attrs

from benchmarks.common import (
    _RESET_SIGNALS,
    Scratch,
    _devnull_actions,
    cpu_seconds,
    run_command,
    scratch,
    stop_pids,
    wait_for,
)
from benchmarks.report import REPO
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread
from benchmarks.terminal import MULTISERVER, Outer, multiserver_bin
from multiserver import DaemonPaths, SyncClient, dial_blocking
from multiserver._paths import default_daemon_number
from restore import SCROLLBACK_LIMIT

NAME = "scrollback"
WINDOW = 10.0
EVERY = 5  # the login service's `multiserver save --scrollback --every 5`
SECONDS = 90.0
TARGET_CPU = 1.05  # x without (issue 14: under 5% more CPU)
TARGET_WRITES = 1.0  # store writes per second per session (issue 14)
HELD, FREE = "held", "free"
PASSES = 50  # saver passes timed together (the daemon's part)
PROBE = b"#"  # never in the printer's output
PRINTER = (
    "import os, time\n"
    "i, t = 0, time.monotonic()\n"
    "while True:\n"
    "    i += 1\n"
    "    os.write(1, b'%08d ' % i + b'.' * 90 + b'\\n')\n"
    "    t += 0.001\n"
    "    d = t - time.monotonic()\n"
    "    if d > 0:\n"
    "        time.sleep(d)\n"
)


@attrs.frozen
class Sample:
    client: float  # CPU seconds in the window
    daemon: float
    saver: float  # 0 without
    # Store write transactions in the window: the CPU seconds each took (the
    # writing thread's).
    client_writes: tuple[float, ...]
    saver_writes: tuple[float, ...]
    shown: int  # bytes the outer terminal got in the window

    @property
    def total(self) -> float:
        return self.client + self.daemon + self.saver


def _env(sc: Scratch) -> dict[str, str]:
    # benchmarks._counted is imported from the checkout, wherever the bench
    # was started from.
    return MULTISERVER.env(sc) | {"PYTHONPATH": str(REPO)}


def _counted(log: Path, saving: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benchmarks._counted",
        str(log),
        *([] if saving else ["--no-screen-saving"]),
        "--",
    ]


def _writes(log: Path, t0: float, t1: float) -> tuple[float, ...]:
    """The writes ``benchmarks._counted`` logged between t0 and t1: the CPU
    seconds of each."""
    if not log.exists():
        return ()
    lines = [line.split() for line in log.read_text().splitlines()]
    return tuple(float(cpu) for end, cpu in lines if t0 <= float(end) <= t1)


def _daemon_pid() -> int:
    paths = DaemonPaths.for_number(default_daemon_number())
    with dial_blocking(paths, children=False, deadline=time.monotonic() + 10) as client:
        return client.daemon_pid


def _pump(outer: Outer, seconds: float) -> int:
    """Read the outer terminal as fast as it comes for ``seconds``."""
    buf = bytearray(1024 * 1024)
    total = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        n = outer.read_some(buf, left)
        if n < 0:
            raise RuntimeError("the attach client's terminal closed in the window")
        total += n
    return total


def _cpu(pid: int) -> float:
    cpu = cpu_seconds(pid)
    if cpu is None:
        raise RuntimeError(f"process {pid} ended in the window")
    return cpu


def _measure(saving: bool) -> Sample:
    with scratch("sb-on" if saving else "sb-off") as sc:
        env = _env(sc)
        for name in (HELD, FREE):
            argv = [multiserver_bin(), "new", "-d", "-n", name, "--", sys.executable, "-c", PRINTER]
            code = run_command(argv, env)
            if code != 0:
                raise RuntimeError(f"multiserver new {name} exited with {code}")
        daemon = _daemon_pid()
        client_log, saver_log = sc.root / "client-writes", sc.root / "saver-writes"
        outer = Outer.spawn(
            [*_counted(client_log, saving), "attach", "-r", "none", HELD], env, echo=False
        )
        saver: int | None = None
        try:
            outer.wait_echo(PROBE)
            if saving:
                argv = [*_counted(saver_log, True), "save", "--scrollback", "--every", str(EVERY)]
                saver = os.posix_spawn(
                    argv[0], argv, env, file_actions=_devnull_actions(), setsigdef=_RESET_SIGNALS
                )
                if not wait_for(lambda: bool(_writes(saver_log, 0, float("inf"))), 10):
                    raise RuntimeError("the saver wrote nothing within 10 s")
            pids = [outer.pid, daemon, *([saver] if saver is not None else [])]
            before = [_cpu(p) for p in pids]
            t0 = time.monotonic()
            shown = _pump(outer, WINDOW)
            t1 = time.monotonic()
            used = [_cpu(p) - b for p, b in zip(pids, before, strict=True)]
        finally:
            try:
                outer.close()
            finally:
                if saver is not None:
                    stop_pids([saver])
        return Sample(
            client=used[0],
            daemon=used[1],
            saver=used[2] if saving else 0.0,
            client_writes=_writes(client_log, t0, t1),
            saver_writes=_writes(saver_log, t0, t1),
            shown=shown,
        )


def _daemon_per_pass() -> float:
    """The daemon's CPU seconds for what one saver pass asks of it (a
    connection, List with foreground processes, a Peek of 256 KiB), on a
    daemon that does nothing else: PASSES of them, timed together."""
    with scratch("sb-pass") as sc:
        script = f"base64 /dev/urandom | head -c {2 * SCROLLBACK_LIMIT}; exec sleep 1000"
        code = run_command(
            [multiserver_bin(), "new", "-d", "-n", FREE, "--", "sh", "-c", script], _env(sc)
        )
        if code != 0:
            raise RuntimeError(f"multiserver new exited with {code}")
        paths = DaemonPaths.for_number(default_daemon_number())

        def dial() -> SyncClient:
            return dial_blocking(paths, children=False, deadline=time.monotonic() + 10)

        def full() -> bool:
            with dial() as client:
                return any(c.buffered_bytes >= SCROLLBACK_LIMIT for c in client.list())

        if not wait_for(full, 10):
            raise RuntimeError("the session did not write 256 KiB within 10 s")
        daemon = _daemon_pid()
        before = _cpu(daemon)
        for _ in range(PASSES):
            with dial() as client:
                for child in client.list(foreground=True):
                    client.peek(child.id, SCROLLBACK_LIMIT)
        return (_cpu(daemon) - before) / PASSES


def run(settings: Settings) -> list[Row]:
    without: list[Sample] = []
    with_: list[Sample] = []
    per_pass: list[float] = []
    for i in settings.runs_within(SECONDS):
        for saving in (False, True) if i % 2 == 0 else (True, False):
            (with_ if saving else without).append(_measure(saving))
        per_pass.append(_daemon_per_pass())
    return _rows(without, with_, per_pass)


def _rows(without: list[Sample], with_: list[Sample], per_pass: list[float]) -> list[Row]:
    cpu_fig = (
        f"keeping scrollback: CPU seconds in {WINDOW:g} s, one session attached and one"
        " not, each printing 100 KB/s"
    )
    writes_fig = "keeping scrollback: store writes per second per session"
    base = "without: no screen saving, no saver"
    shown = median([s.shown for s in with_]) / WINDOW / 1000
    rows: list[Row] = []
    parts = (
        ("the attach client (saves the held session every 3 s)", lambda s: s.client, True),
        ("the daemon (peeked by the saver)", lambda s: s.daemon, True),
        (
            f"all: client + daemon + the saver (`save --scrollback --every {EVERY}`)",
            lambda s: s.total,
            False,
        ),
    )
    for subject, part, limited in parts:
        on = [part(s) for s in with_]
        off = [part(s) for s in without]
        ratio = paired_ratio(on, off) if all(off) else float("inf")
        rows.append(
            Row.against(
                Limit("<=", TARGET_CPU, ratio, "x without") if limited else None,
                figure=cpu_fig,
                subject=subject,
                value=median(on),
                unit="s",
                runs=len(on),
                baseline=base,
                baseline_value=median(off),
                detail=(
                    f"range {spread(on, fmt='{:.2f}')} s (without {spread(off, fmt='{:.2f}')} s)"
                    + (
                        f"; the saver's own {median([s.saver for s in with_]):.3f} s"
                        " (10 ms ticks);"
                        f" the terminal got {shown:.0f} KB/s"
                        if not limited
                        else ""
                    )
                ),
                samples=tuple(on),
                baseline_samples=tuple(off),
            )
        )
    # The store writes' own CPU, measured in the client (no noise from the
    # machine's load, which the with/without ratio above is exposed to).
    shares = [100 * sum(s.client_writes) / s.client for s in with_ if s.client]
    rows.append(
        Row.against(
            Limit("<=", 100 * (TARGET_CPU - 1), median(shares), "% of its CPU"),
            figure=cpu_fig,
            subject="the attach client's store writes, timed in the client",
            value=median(shares),
            unit="% of its CPU",
            runs=len(shares),
            baseline="",
            baseline_value=None,
            detail=(
                f"{median([1000 * sum(s.client_writes) for s in with_]):.1f} ms in"
                f" {median([len(s.client_writes) for s in with_]):.0f} writes"
                f" (thread CPU time around each transaction; the 256 KiB snapshot"
                f" before it is not counted)"
            ),
            samples=tuple(shares),
        )
    )
    # What the saver asks of the daemon, timed on a daemon doing nothing else,
    # as a share of what the daemon spends on the sessions' output.
    daemon_base = median([s.daemon for s in without]) / WINDOW
    pass_shares = [100 * p / EVERY / daemon_base for p in per_pass]
    rows.append(
        Row.against(
            Limit("<=", 100 * (TARGET_CPU - 1), median(pass_shares), "% of its CPU"),
            figure=cpu_fig,
            subject=f"the daemon's part of a saver pass, timed alone, at one pass every {EVERY} s",
            value=median(pass_shares),
            unit="% of its CPU",
            runs=len(pass_shares),
            baseline="",
            baseline_value=None,
            detail=(
                f"{1000 * median(per_pass):.2f} ms a pass (connect, List, Peek of 256 KiB;"
                f" {PASSES} passes timed together), against the daemon's"
                f" {1000 * daemon_base:.0f} ms/s for the two printing sessions without saving"
            ),
            samples=tuple(pass_shares),
        )
    )
    for subject, count in (
        ("the attach client, for the held session", lambda s: len(s.client_writes)),
        (f"the saver, for the other (one pass every {EVERY} s)", lambda s: len(s.saver_writes)),
    ):
        rates = [count(s) / WINDOW for s in with_]
        rows.append(
            Row.against(
                Limit("<=", TARGET_WRITES, median(rates), "writes/s"),
                figure=writes_fig,
                subject=subject,
                value=median(rates),
                unit="writes/s",
                runs=len(rates),
                baseline="",
                baseline_value=None,
                detail=(
                    f"{spread([count(s) for s in with_])} write transactions in {WINDOW:g} s;"
                    f" without: {sum(count(s) for s in without)} in all runs"
                ),
                samples=tuple(rates),
            )
        )
    return rows
