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
  attach --redraw none NAME`` runs on the outer PTY's slave as its
  controlling terminal, and holds the session's PTY master itself.
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

The number of clients is a parameter (``keeper_sample``): with several,
each is attached on its own outer PTY, one after another, each read by a
reader thread of its own (started before the trigger), and the time runs
until every reader has the marker; every terminal's byte count is
checked, and CPU counts every client and every reader (the ``shared``
figure, issue 38). This figure has one client.
"""

from __future__ import annotations

import base64
import errno
import os
import re
import shutil
import termios
import threading
import time
import tty
from collections.abc import Sequence
from pathlib import Path

import attrs

from benchmarks.common import (
    MEASURE_TIMEOUT,
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
from benchmarks.terminal import SIZE, Keeper, Outer, ReaderQuiet, ReaderTimeout, keepers

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
    text: int = PAYLOAD  # the payload alone: what MiB/s counts

    @property
    def due(self) -> int:
        """What a terminal that passes bytes through unchanged reads: every
        byte, and a CR before each LF (ONLCR)."""
        return self.size + self.lines


@attrs.frozen
class Sample:
    rate: float | None  # MiB/s, until every terminal had the marker (None: one never did)
    cpu: float  # seconds: every process of the subject + the readers
    client_cpu: float  # every client's
    reader_cpu: float  # every reader's
    exact: bool | None  # every terminal's byte count right (None: not checkable)
    program_cpu: float = 0.0  # the program's (sh, with the cat it reaped)
    right: tuple[bool, ...] = ()  # each terminal's byte count right, in attach order
    lost: int = 0  # terminals the marker never reached
    # What each client was told it missed (multiserver; None: it did not say).
    skipped: tuple[int | None, ...] = ()

    @property
    def wrong(self) -> int:
        """Terminals whose byte count was wrong."""
        return self.right.count(False)

    @property
    def mibs(self) -> float:
        """The rate, of a run whose every terminal had the marker (one
        terminal always has: its reader waits for it)."""
        if self.rate is None:
            raise ValueError("the marker never reached every terminal")
        return self.rate

    @property
    def server_cpu(self) -> float:
        """The rest: the daemon or server (none for the raw PTY and the floor)."""
        return max(0.0, self.cpu - self.reader_cpu - self.client_cpu - self.program_cpu)


def make_payload(path: Path, size: int = PAYLOAD) -> Files:
    """``size`` bytes of base64 text (76-column lines, cut at a line's
    end), then the end marker line, written at ``path``."""
    raw = os.urandom(size * 3 // 4 + 4096)
    text = base64.encodebytes(raw)[:size]
    if not text.endswith(b"\n"):
        text = text[: text.rindex(b"\n") + 1]
    data = text + MARKER + b"\n"
    path.write_bytes(data)
    return Files(path, len(data), data.count(b"\n"), size)


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


@attrs.frozen
class Seen:
    """What one reader saw of one terminal."""

    count: int  # bytes read, up to and with the chunk that held the marker
    at: float | None  # perf_counter when the marker came; None: it never did
    cpu: float  # the reader's thread's CPU seconds


# With several clients, a terminal whose output stops this long before the
# marker came is given up on: its client dropped the marker (dtach can).
GIVE_UP = 2.0


def _read_one(outer: Outer) -> Seen:
    cpu0 = time.thread_time()
    try:
        count, at = outer.read_until(MARKER, quiet=GIVE_UP)
    except ReaderQuiet as exc:
        return Seen(exc.total, None, time.thread_time() - cpu0)
    return Seen(count, at, time.thread_time() - cpu0)


def _read_all(outers: Sequence[Outer], trigger: int) -> tuple[float, list[Seen]]:
    """Write the trigger, and read every terminal until its marker: one
    terminal in this thread (as the one-client figure always has), several
    each in a thread of its own, started first, as each terminal would read
    on its own. Returns the trigger's perf_counter and what each reader saw."""
    if len(outers) == 1:
        cpu0 = time.thread_time()
        t0 = _pull(trigger)
        count, at = outers[0].read_until(MARKER)
        return t0, [Seen(count, at, time.thread_time() - cpu0)]
    seen: list[Seen | BaseException | None] = [None] * len(outers)

    def read(i: int) -> None:
        try:
            seen[i] = _read_one(outers[i])
        except BaseException as exc:  # re-raised by the caller's thread
            seen[i] = exc

    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(outers))]
    for thread in threads:
        thread.start()
    t0 = _pull(trigger)
    for thread in threads:
        thread.join(MEASURE_TIMEOUT + 5.0)  # each reader gives up after MEASURE_TIMEOUT
    for got in seen:
        if not isinstance(got, Seen):
            raise got or ReaderTimeout("a reader did not return")
    return t0, [got for got in seen if isinstance(got, Seen)]


def _pull(trigger: int) -> float:
    """Write the trigger (and close it): the program cats now. Returns when."""
    t0 = time.perf_counter()
    try:
        os.write(trigger, b"\n")
    finally:
        os.close(trigger)
    return t0


def _measure(outers: Sequence[Outer], sc: Scratch, fifo: Path, prog: int, files: Files) -> Sample:
    """Trigger the program and time until every terminal in ``outers``
    (each a client's, or the program's own) has read the marker."""
    trigger = _open_trigger(fifo)
    meter = CpuMeter(sc.marker)
    meter.start()
    t0, seen = _read_all(outers, trigger)
    if not wait_for(lambda: comm(prog) == "sleep", 10.0, 0.005):
        raise RuntimeError("the program did not finish its cat")
    cpu = meter.stop()
    reader = sum(s.cpu for s in seen)
    arrived = [s.at for s in seen if s.at is not None]
    return Sample(
        rate=files.text / MIB / (max(arrived) - t0) if len(arrived) == len(seen) else None,
        cpu=cpu + reader,
        client_cpu=sum(meter.used.get(outer.pid, 0.0) for outer in outers if outer.pid != prog),
        reader_cpu=reader,
        exact=all(s.count == files.due for s in seen),
        program_cpu=meter.used.get(prog, 0.0),
        right=tuple(s.count == files.due for s in seen),
        lost=len(seen) - len(arrived),
    )


def raw_sample(files: Files) -> Sample:
    """The baseline: the program on the outer PTY itself."""
    with scratch("att-raw") as sc:
        argv, pidfile, fifo = _program(sc, files)
        outer = Outer.spawn(argv, sc.env(), echo=True)
        try:
            prog = _program_pid(pidfile)
            return _measure([outer], sc, fifo, prog, files)
        finally:
            outer.close()


def keeper_sample(keeper: Keeper, files: Files, clients: int = 1) -> Sample:
    """``clients`` attach clients of one session of ``keeper``'s, each on
    its own outer PTY, attached one after another (each until its probe
    comes back: attached and in raw mode), every first screen drained,
    then the program triggered: timed until every terminal has it all."""
    with scratch(f"att-{keeper.name}") as sc:
        env = keeper.env(sc)
        argv, pidfile, fifo = _program(sc, files)
        code = run_command(keeper.new_argv(sc, SESSION, argv), env)
        if code != 0:
            raise RuntimeError(f"{keeper.name}: starting the session exited with {code}")
        prog = _program_pid(pidfile)
        outers: list[Outer] = []
        try:
            for _ in range(clients):
                outers.append(Outer.spawn(keeper.attach_argv(sc, SESSION), env, echo=False))
                outers[-1].wait_echo(b"x")
            for outer in outers:  # a probe's echo reaches every client
                outer.drain_quiet()
            sample = _measure(outers, sc, fifo, prog, files)
            if keeper.peer is None and clients > 1:
                sample = attrs.evolve(sample, skipped=tuple(_told_skipped(o) for o in outers))
        finally:
            close_all(outers)
        if not keeper.transparent:
            sample = attrs.evolve(sample, exact=None, right=())
        return sample


# multiserver attach's detach key (^\, the default), and what it says then.
DETACH_KEY = b"\x1c"
DETACHED = re.compile(rb"\[detached from [^\]]*?(?:; (\d+) bytes skipped[^\]]*)?\]")


def _told_skipped(outer: Outer, timeout: float = 5.0) -> int | None:
    """Detach a ``multiserver attach`` (untimed): the bytes it says it was
    told it missed while it was behind (``Skipped``), which the daemon
    replaced with a redraw in its feed; None if it did not say."""
    outer.write(DETACH_KEY)
    said = bytearray()
    buf = bytearray(64 * 1024)
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        n = outer.read_some(buf, left)
        if n <= 0:
            break
        said += buf[:n]
        if (found := DETACHED.search(said)) is not None:
            return int(found.group(1) or 0)
    return None


def close_all(outers: Sequence[Outer]) -> None:
    """Stop every client by pid (all at once: none waits on another's grace
    period), then close their terminals."""
    try:
        left = stop_pids([outer.pid for outer in outers])
        if left:
            raise RuntimeError(f"clients survived SIGKILL: {left}")
    finally:
        for outer in outers:
            outer.close()


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
            return _measure([outer], sc, fifo, _program_pid(pidfile), files)
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
        files = make_payload(sc.root / "payload.b64")
        raw_sample(files)  # warm the page cache and the code paths
        for _ in settings.runs_within(SECONDS):
            raw.append(raw_sample(files))
            pipe.append(_reader_ceiling(files))
            copier.append(_copier(files))
            for k in subjects:
                if k.name in got:
                    got[k.name].append(keeper_sample(k, files))
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
    raw_rate = [s.mibs for s in raw]
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
    raw_rate = [s.mibs for s in raw]
    raw_cpu = [s.cpu for s in raw]
    base_rate, base_cpu = median(raw_rate), median(raw_cpu)
    if not samples:
        return (
            Row(RATE_FIG, subject, None, "MiB/s", 0, BASELINE, base_rate, detail=why),
            Row(CPU_FIG, subject, None, "s", 0, BASELINE, base_cpu, detail=why),
        )
    rates = [s.mibs for s in samples]
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
