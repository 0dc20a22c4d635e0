"""Figure: drain, a detached child writing as fast as it can (issue 6,
figure 7): the server's CPU, and whether the child ever blocks.

The program, the same for every subject, writes 76-byte lines forever::

    sh -c 'echo $$ > PIDFILE; exec yes LINE'

After a settle of 0.3 s, for SECONDS seconds: the child's write progress
(``wchar`` of /proc/PID/io: bytes it got written), its state sampled every
2 ms from /proc/PID/stat (any state but R, running, is the child blocked
in its tty write: ``yes`` does nothing else), and the CPU seconds of the
processes that drain it (utime + stime, 10 ms ticks).

- raw PTY (the baseline): the program on a PTY whose master this process
  reads with the fast reader of ``benchmarks/terminal.py`` in a thread of
  its own (its CPU is that thread's); the sampler runs in another.
- multiserver: ``multiserver new -d`` starts the program and nobody
  attaches: the daemon drains it into its bounded buffer. Server = the
  daemon process.
- peers: dtach (``-n``; the master reads and discards), screen (``-dm``),
  tmux (``new-session -d``): every process of the peer but the child.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import attrs

from benchmarks.common import (
    MIB,
    CpuMeter,
    Scratch,
    proc_stat,
    run_command,
    scratch,
    wait_for,
)
from benchmarks.peers import PEERS
from benchmarks.results import (
    Row,
    Settings,
    median,
    paired_ratio,
    spread,
)
from benchmarks.terminal import Keeper, Outer, keepers

NAME = "drain"
SECONDS = 2.0
QUICK_SECONDS = 1.0
SETTLE = 0.3
SAMPLE_EVERY = 0.002
LINE = "drain-" + "0123456789abcdef" * 4 + "ABCDEF"  # 75 bytes + LF
BASELINE = "raw PTY: this process reads the master"
BUDGET = 30.0
SESSION = "drain"


@attrs.frozen
class Sample:
    cpu: float  # server CPU seconds per second
    rate: float  # the child's writes, MiB/s
    blocked: float  # fraction of state samples not running


def _program(sc: Scratch) -> tuple[list[str], Path]:
    pidfile = sc.root / "prog.pid"
    return ["sh", "-c", f"echo $$ > {pidfile}; exec yes {LINE}"], pidfile


def _child(pidfile: Path) -> int:
    if not wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "", 10.0):
        raise RuntimeError("the program did not start")
    return int(pidfile.read_text())


def _wchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError(f"no wchar for {pid}")


def _watch(pid: int, seconds: float) -> tuple[float, float]:
    """(MiB/s the child wrote, fraction of samples it was not running)."""
    w0 = _wchar(pid)
    t0 = time.perf_counter()
    states = []
    end = t0 + seconds
    while (now := time.perf_counter()) < end:
        st = proc_stat(pid)
        if st is None:
            raise RuntimeError("the child exited")
        states.append(st[0])
        time.sleep(max(0.0, min(SAMPLE_EVERY, end - now)))
    rate = (_wchar(pid) - w0) / MIB / (time.perf_counter() - t0)
    return rate, sum(s != "R" for s in states) / len(states)


def _raw(seconds: float) -> Sample:
    with scratch("drain-raw") as sc:
        argv, pidfile = _program(sc)
        outer = Outer.spawn(argv, sc.env(), echo=True)
        stop = threading.Event()
        cpu: list[float] = []

        def read() -> None:
            buf = bytearray(1024 * 1024)
            c0 = time.thread_time()
            t0 = time.perf_counter()
            while not stop.is_set():
                if outer.read_some(buf, 0.05) < 0:
                    break
            cpu.append((time.thread_time() - c0) / (time.perf_counter() - t0))

        reader = threading.Thread(target=read, name="drain-reader")
        reader.start()
        try:
            pid = _child(pidfile)
            time.sleep(SETTLE)
            rate, blocked = _watch(pid, seconds)
        finally:
            stop.set()
            reader.join()
            outer.close()
        return Sample(cpu[0], rate, blocked)


def _keeper(keeper: Keeper, seconds: float) -> Sample:
    with scratch(f"drain-{keeper.name}") as sc:
        env = keeper.env(sc)
        argv, pidfile = _program(sc)
        code = run_command(keeper.new_argv(sc, SESSION, argv), env)
        if code != 0:
            raise RuntimeError(f"{keeper.name}: starting the session exited with {code}")
        pid = _child(pidfile)
        time.sleep(SETTLE)
        meter = CpuMeter(sc.marker)
        meter.start()
        t0 = time.perf_counter()
        rate, blocked = _watch(pid, seconds)
        meter.stop()
        server = sum(cpu for p, cpu in meter.used.items() if p != pid)
        return Sample(server / (time.perf_counter() - t0), rate, blocked)


def run(settings: Settings) -> list[Row]:
    seconds = QUICK_SECONDS if settings.quick else SECONDS
    subjects = keepers(PEERS)
    raw: list[Sample] = []
    got: dict[str, list[Sample]] = {k.name: [] for k in subjects if k.installed()}
    for _ in settings.runs_within(BUDGET):
        raw.append(_raw(seconds))
        for k in subjects:
            if k.name in got:
                got[k.name].append(_keeper(k, seconds))
    pairs = [
        _subject_rows(
            "multiserver: `multiserver new -d`, nobody attached"
            if k.name == "multiserver"
            else k.name,
            got.get(k.name),
            raw,
            seconds,
        )
        for k in subjects
    ]
    return [*(cpu for cpu, _ in pairs), *(rate for _, rate in pairs)]


def _subject_rows(
    subject: str, samples: list[Sample] | None, raw: list[Sample], seconds: float
) -> tuple[Row, Row]:
    """One subject's server-CPU row and its child's write-rate row, against
    the raw PTY's samples of the same runs."""
    cpu_fig = f"drain: a detached child writing as fast as it can; server CPU seconds per second ({seconds:g} s)"
    rate_fig = f"drain: that child's write rate (MiB/s, higher is better; {seconds:g} s)"
    raw_cpu = [s.cpu for s in raw]
    raw_rate = [s.rate for s in raw]
    if not samples:
        return (
            Row(
                cpu_fig,
                subject,
                None,
                "CPU s/s",
                0,
                BASELINE,
                median(raw_cpu),
                detail="not installed",
            ),
            Row(
                rate_fig,
                subject,
                None,
                "MiB/s",
                0,
                BASELINE,
                median(raw_rate),
                detail="not installed",
            ),
        )
    cpus = [s.cpu for s in samples]
    rates = [s.rate for s in samples]
    blocked = [s.blocked for s in samples]
    raw_blocked = median([s.blocked for s in raw])
    cpu = Row(
        figure=cpu_fig,
        subject=subject,
        value=median(cpus),
        unit="CPU s/s",
        runs=len(cpus),
        baseline=BASELINE,
        baseline_value=median(raw_cpu),
        detail=f"range {spread(cpus, 1, '{:.2f}')}; the server's processes only (not the child)",
        samples=tuple(cpus),
        baseline_samples=tuple(raw_cpu),
    )
    rate = Row(
        figure=rate_fig,
        subject=subject,
        value=median(rates),
        unit="MiB/s",
        runs=len(rates),
        baseline=BASELINE,
        baseline_value=median(raw_rate),
        detail=(
            f"range {spread(rates)} MiB/s; child blocked in its write in "
            f"{median(blocked) * 100:.0f}% of state samples (raw PTY: {raw_blocked * 100:.0f}%); "
            f"rate ratio {paired_ratio(rates, raw_rate):.2f}x"
        ),
        samples=tuple(rates),
        baseline_samples=tuple(raw_rate),
    )
    return cpu, rate
