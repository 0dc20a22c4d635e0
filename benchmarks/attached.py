"""Figure: throughput to an attached client that is itself on a PTY, and the
CPU seconds it costs (issue 3; issue 6, figure 1).

The program, the same for every subject::

    sh -c 'echo $$ > PIDFILE; read _ < FIFO; cat PAYLOAD; exec sleep 1000'

PAYLOAD is 32 MiB of base64 text (76-column lines) followed by one end
marker line (``@`` is not in the base64 alphabet). The benchmark plays the
user's terminal: an outer 24x80 PTY, read with the fast reader of
``benchmarks/terminal.py``.

- raw PTY (the baseline): the program runs directly on the outer PTY.
- multiserver: ``multiserver new -d`` starts the program; ``multiserver
  attach -r none NAME`` runs on the outer PTY's slave as its controlling
  terminal, and holds the session's PTY master itself.
- floor for any attach client: the program on an inner PTY that this
  process opens, and ``cat`` (C, 128 KiB reads) copying its master to
  the outer PTY's slave (raw mode): the extra PTY hop with the cheapest
  copier there is.
- peers: dtach (``dtach -a SOCKET -r none``), abduco (``abduco -a``),
  screen (``screen -r``), tmux (``attach-session``), each with its own
  detached-session command.

For a client, the benchmark first sends a probe byte through the outer
PTY until the session's echo comes back (the client is attached and in
raw mode), drains its first screen, then writes the FIFO (the trigger)
and times until the end marker arrives. MiB/s counts the 32 MiB payload.
Where the client passes bytes through unchanged (raw, multiserver, dtach,
abduco) the byte count read is checked (payload + marker + one CR per
line); tmux and screen draw their own screen, so only the marker counts.

CPU seconds, between the trigger and the program's ``exec sleep``: every
process of the subject (program and its ``cat``, client, daemon or server;
utime + stime from /proc, 10 ms ticks) plus the reader's own thread: what
the whole machine spends to put the bytes on the user's terminal. The
client's share is given in the detail column. Kernel work done in
kworkers (the PTY's flush to the line discipline) is in nobody's figure.

The reader's ceiling: the same reader and payload on a pipe fed by
``cat``. Rows with no figure say why (not installed).
"""

from __future__ import annotations

import base64
import errno
import os
import shutil
import termios
import time
import tty
from pathlib import Path

import attrs

from benchmarks.common import (
    MIB,
    CpuMeter,
    Scratch,
    comm,
    run_command,
    scratch,
    set_size,
    stop_pids,
    wait_for,
)
from benchmarks.peers import PEERS
from benchmarks.results import (
    Limit,
    Row,
    Settings,
    median,
    paired_ratio,
    spread,
)
from benchmarks.terminal import SIZE, Keeper, Outer, keepers

NAME = "attached"
PAYLOAD = 32 * MIB
MARKER = b"@@msbench-end@@"
BASELINE = "raw PTY: the program on the outer PTY"
TARGET_RATE = 0.95  # x raw PTY (issue 3)
TARGET_CPU = 1.2  # x raw PTY (issue 3)
# Beyond this (from the first run), a loaded machine gets fewer runs (3 at least).
SECONDS = 60.0
SESSION = "tput"


@attrs.frozen
class Files:
    payload: Path
    size: int  # payload + marker line, as written by cat
    lines: int


@attrs.frozen
class Sample:
    rate: float  # MiB/s
    cpu: float  # seconds: every process of the subject + the reader
    client_cpu: float
    reader_cpu: float
    exact: bool | None  # the byte count checked (None: not checkable)


def _make_payload(path: Path) -> Files:
    raw = os.urandom(PAYLOAD * 3 // 4 + 4096)
    text = base64.encodebytes(raw)[:PAYLOAD]
    if not text.endswith(b"\n"):
        text = text[: text.rindex(b"\n") + 1]
    data = text + MARKER + b"\n"
    path.write_bytes(data)
    return Files(path, len(data), data.count(b"\n"))


def _program(sc: Scratch, files: Files) -> tuple[list[str], Path, Path]:
    pidfile = sc.root / "prog.pid"
    fifo = sc.root / "trigger"
    os.mkfifo(fifo, 0o600)
    script = f"echo $$ > {pidfile}; read _ < {fifo}; cat {files.payload}; exec sleep 1000"
    return ["sh", "-c", script], pidfile, fifo


def _program_pid(pidfile: Path) -> int:
    if not wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "", 10.0):
        raise RuntimeError("the program did not start")
    return int(pidfile.read_text())


def _open_trigger(fifo: Path, timeout: float = 10.0) -> int:
    """The FIFO's write end, once the program waits on it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


def _measure(outer: Outer, sc: Scratch, fifo: Path, prog: int, files: Files) -> Sample:
    trigger = _open_trigger(fifo)
    meter = CpuMeter(sc.marker)
    meter.start()
    reader0 = time.thread_time()
    t0 = time.perf_counter()
    try:
        os.write(trigger, b"\n")
    finally:
        os.close(trigger)
    got, t1 = outer.read_until(MARKER)
    reader = time.thread_time() - reader0
    if not wait_for(lambda: comm(prog) == "sleep", 10.0, 0.005):
        raise RuntimeError("the program did not finish its cat")
    cpu = meter.stop()
    return Sample(
        rate=PAYLOAD / MIB / (t1 - t0),
        cpu=cpu + reader,
        client_cpu=meter.used.get(outer.pid, 0.0),
        reader_cpu=reader,
        exact=got == files.size + files.lines,  # ONLCR: a CR before each LF
    )


def _raw(files: Files) -> Sample:
    with scratch("att-raw") as sc:
        argv, pidfile, fifo = _program(sc, files)
        outer = Outer.spawn(argv, sc.env(), echo=True)
        try:
            prog = _program_pid(pidfile)
            return _measure(outer, sc, fifo, prog, files)
        finally:
            outer.close()


def _keeper(keeper: Keeper, files: Files) -> Sample:
    with scratch(f"att-{keeper.name}") as sc:
        env = keeper.env(sc)
        argv, pidfile, fifo = _program(sc, files)
        code = run_command(keeper.new_argv(sc, SESSION, argv), env)
        if code != 0:
            raise RuntimeError(f"{keeper.name}: starting the session exited with {code}")
        prog = _program_pid(pidfile)
        outer = Outer.spawn(keeper.attach_argv(sc, SESSION), env, echo=False)
        try:
            outer.wait_echo(b"x")
            outer.drain_quiet()
            sample = _measure(outer, sc, fifo, prog, files)
        finally:
            outer.close()
        if not keeper.transparent:
            sample = attrs.evolve(sample, exact=None)
        return sample


def _copier(files: Files) -> Sample:
    """The floor for any attach client: ``cat`` (C, 128 KiB reads) copying
    an inner PTY's master, where the program runs, to the outer PTY's
    slave (in raw mode, as an attach client sets it)."""
    cat = shutil.which("cat")
    sh = shutil.which("sh")
    assert cat is not None and sh is not None
    with scratch("att-copier") as sc:
        argv, pidfile, fifo = _program(sc, files)
        env = sc.env()
        inner_m, inner_s = os.openpty()
        outer_m, outer_s = os.openpty()
        try:
            set_size(inner_m, *SIZE)
            set_size(outer_m, *SIZE)
            tty.setraw(outer_s, termios.TCSANOW)
            os.posix_spawn(
                sh,
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.ttyname(inner_s), os.O_RDWR, 0),
                    (os.POSIX_SPAWN_DUP2, 0, 1),
                    (os.POSIX_SPAWN_DUP2, 0, 2),
                ],
                setsid=True,
            )
            copier = os.posix_spawn(
                cat,
                ["cat"],
                env,
                file_actions=[(os.POSIX_SPAWN_DUP2, inner_m, 0), (os.POSIX_SPAWN_DUP2, outer_s, 1)],
                setsid=True,
            )
        except BaseException:
            os.close(outer_m)
            raise
        finally:
            os.close(inner_s)
            os.close(outer_s)
            os.close(inner_m)
        os.set_blocking(outer_m, False)
        outer = Outer(copier, outer_m)
        try:
            return _measure(outer, sc, fifo, _program_pid(pidfile), files)
        finally:
            outer.close()


def _reader_ceiling(files: Files) -> float:
    """The reader on a pipe from cat: MiB/s."""
    cat = shutil.which("cat")
    assert cat is not None
    with scratch("att-pipe") as sc:
        rd, wr = os.pipe()
        try:
            pid = os.posix_spawn(
                cat,
                ["cat", str(files.payload)],
                sc.env(),
                file_actions=[(os.POSIX_SPAWN_DUP2, wr, 1)],
            )
        finally:
            os.close(wr)
        os.set_blocking(rd, False)
        reader = Outer(pid, rd)
        try:
            t0 = time.perf_counter()
            _, t1 = reader.read_until(MARKER)
        finally:
            os.close(rd)
            reader.master = -1
            stop_pids([pid])
        return PAYLOAD / MIB / (t1 - t0)


def run(settings: Settings) -> list[Row]:
    subjects = keepers(PEERS)
    raw: list[Sample] = []
    copier: list[Sample] = []
    pipe: list[float] = []
    got: dict[str, list[Sample]] = {k.name: [] for k in subjects if k.installed()}
    with scratch("att") as sc:
        files = _make_payload(sc.root / "payload.b64")
        _raw(files)  # warm the page cache and the code paths
        for _ in settings.runs_within(SECONDS):
            raw.append(_raw(files))
            pipe.append(_reader_ceiling(files))
            copier.append(_copier(files))
            for k in subjects:
                if k.name in got:
                    got[k.name].append(_keeper(k, files))
    return _rows(subjects, raw, pipe, copier, got)


RATE_FIG = "attached throughput, 32 MiB of base64 text (MiB/s, higher is better)"
CPU_FIG = "attached throughput: CPU seconds for those 32 MiB"


def _exact(samples: list[Sample]) -> str:
    checked = [s.exact for s in samples if s.exact is not None]
    if not checked:
        return "not byte-checked (draws its own screen)"
    return (
        "byte count exact" if all(checked) else f"byte count WRONG in {checked.count(False)} run(s)"
    )


def _rows(
    subjects: list[Keeper],
    raw: list[Sample],
    pipe: list[float],
    copier: list[Sample],
    got: dict[str, list[Sample]],
) -> list[Row]:
    raw_rate = [s.rate for s in raw]
    rows = [
        Row(
            figure=RATE_FIG,
            subject="reader ceiling: the same reader on a pipe from cat",
            value=median(pipe),
            unit="MiB/s",
            runs=len(pipe),
            baseline=BASELINE,
            baseline_value=median(raw_rate),
            detail=f"range {spread(pipe)} MiB/s: the reader is not the bottleneck of any row",
            samples=tuple(pipe),
            baseline_samples=tuple(raw_rate),
        )
    ]
    entries: list[tuple[str, str, list[Sample] | None, bool, str]] = [
        (
            "floor: `cat` copying the session PTY to the outer PTY",
            "cat <SESSION-PTY-MASTER >OUTER-PTY-SLAVE (raw mode)",
            copier,
            False,
            "",
        )
    ]
    for k in subjects:
        ours = k.name == "multiserver"
        why = "" if got.get(k.name) else ("not installed" if not k.installed() else "no run")
        entries.append(
            (f"multiserver: `{k.shape}`" if ours else k.name, k.shape, got.get(k.name), ours, why)
        )
    pairs = [_subject_rows(*entry, raw) for entry in entries]
    return [*rows, *(rate for rate, _ in pairs), *(cpu for _, cpu in pairs)]


def _subject_rows(
    subject: str, shape: str, samples: list[Sample] | None, ours: bool, why: str, raw: list[Sample]
) -> tuple[Row, Row]:
    """One subject's throughput row and its CPU row (``ours``: with the
    targets), against the raw PTY's samples of the same runs."""
    raw_rate = [s.rate for s in raw]
    raw_cpu = [s.cpu for s in raw]
    base_rate, base_cpu = median(raw_rate), median(raw_cpu)
    if not samples:
        return (
            Row(RATE_FIG, subject, None, "MiB/s", 0, BASELINE, base_rate, detail=why),
            Row(CPU_FIG, subject, None, "s", 0, BASELINE, base_cpu, detail=why),
        )
    rates = [s.rate for s in samples]
    cpus = [s.cpu for s in samples]
    rate = Row.against(
        Limit(">=", TARGET_RATE, paired_ratio(rates, raw_rate), "x raw PTY") if ours else None,
        figure=RATE_FIG,
        subject=subject,
        value=median(rates),
        unit="MiB/s",
        runs=len(rates),
        baseline=BASELINE,
        baseline_value=base_rate,
        detail=f"range {spread(rates)} MiB/s; `{shape}`; {_exact(samples)}",
        samples=tuple(rates),
        baseline_samples=tuple(raw_rate),
    )
    cpu = Row.against(
        Limit("<=", TARGET_CPU, paired_ratio(cpus, raw_cpu), "x raw PTY") if ours else None,
        figure=CPU_FIG,
        subject=subject,
        value=median(cpus),
        unit="s",
        runs=len(cpus),
        baseline=BASELINE,
        baseline_value=base_cpu,
        detail=(
            f"all processes + reader; the client's share "
            f"{median([s.client_cpu for s in samples]):.2f} s, the reader's "
            f"{median([s.reader_cpu for s in samples]):.2f} s "
            f"(raw: reader {median([s.reader_cpu for s in raw]):.2f} s, program "
            f"{median([s.cpu - s.reader_cpu for s in raw]):.2f} s)"
        ),
        samples=tuple(cpus),
        baseline_samples=tuple(raw_cpu),
    )
    return rate, cpu
