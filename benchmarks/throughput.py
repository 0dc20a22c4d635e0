"""Figure: raw PTY throughput, the data-path baseline later figures compare
an attached client against.

A child (``cat``) writes 32 MiB of base64 text (76-column lines, made once
from os.urandom) to the slave of a fresh PTY that is its
controlling terminal; this process reads the master with blocking
``os.read`` until EIO. Timed from the spawn to the last byte; MiB/s counts
the 32 MiB payload (the line discipline adds a CR per line, which is
checked: the bytes read must be exactly payload + lines). CPU seconds are
the reader's plus the child's.

- baseline: the same child writing the same file into a pipe read by this
  process: what the PTY layer itself costs.
"""

from __future__ import annotations

import base64
import errno
import os
import resource
import shutil
import time
from pathlib import Path

from benchmarks.common import (
    MIB,
    scratch,
    spawn_on_pty,
    stop_pids,
)
from benchmarks.results import (
    Row,
    Settings,
    median,
    spread,
)

NAME = "throughput"
PAYLOAD = 32 * MIB
READ_SIZE = 65536
BASELINE = "pipe: the same child writing into a pipe"


def _make_payload(path: Path) -> int:
    """Write PAYLOAD bytes of base64 text to ``path``; returns its line count."""
    raw = os.urandom(PAYLOAD * 3 // 4 + 4096)
    text = base64.encodebytes(raw)[:PAYLOAD]
    path.write_bytes(text)
    return text.count(b"\n")


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _drain(fd: int) -> int:
    total = 0
    while True:
        try:
            data = os.read(fd, READ_SIZE)
        except OSError as exc:
            if exc.errno == errno.EIO:  # the slave side is closed: the child is done
                return total
            raise
        if not data:
            return total
        total += len(data)


def _reap(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"cat exited with {code}")


def _pty(cat: str, path: Path, env: dict[str, str], lines: int) -> tuple[float, float]:
    cpu0, kids0 = _cpu_self(), _cpu_children()
    t0 = time.perf_counter()
    pid, master = spawn_on_pty(cat, ["cat", str(path)], env)
    try:
        got = _drain(master)
        elapsed = time.perf_counter() - t0
    except BaseException:
        os.close(master)
        stop_pids([pid])
        raise
    os.close(master)
    _reap(pid)
    cpu = _cpu_self() - cpu0 + _cpu_children() - kids0
    if got != PAYLOAD + lines:  # ONLCR: one CR added before each LF
        raise RuntimeError(f"pty: read {got} bytes, expected {PAYLOAD + lines}")
    return elapsed, cpu


def _pipe(cat: str, path: Path, env: dict[str, str]) -> tuple[float, float]:
    cpu0, kids0 = _cpu_self(), _cpu_children()
    rd, wr = os.pipe()
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawn(
            cat,
            ["cat", str(path)],
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, wr, 1)],
        )
    finally:
        os.close(wr)
    try:
        got = _drain(rd)
        elapsed = time.perf_counter() - t0
    except BaseException:
        os.close(rd)
        stop_pids([pid])
        raise
    os.close(rd)
    _reap(pid)
    cpu = _cpu_self() - cpu0 + _cpu_children() - kids0
    if got != PAYLOAD:
        raise RuntimeError(f"pipe: read {got} bytes, expected {PAYLOAD}")
    return elapsed, cpu


def run(settings: Settings) -> list[Row]:
    cat = shutil.which("cat")
    assert cat is not None
    pty_rate: list[float] = []
    pty_cpu: list[float] = []
    pipe_rate: list[float] = []
    pipe_cpu: list[float] = []
    with scratch("tput") as sc:
        path = sc.root / "payload.b64"
        lines = _make_payload(path)
        env = sc.env()
        _pty(cat, path, env, lines)  # warm the page cache and the code paths
        for _ in range(settings.runs):
            elapsed, cpu = _pty(cat, path, env, lines)
            pty_rate.append(PAYLOAD / MIB / elapsed)
            pty_cpu.append(cpu)
            elapsed, cpu = _pipe(cat, path, env)
            pipe_rate.append(PAYLOAD / MIB / elapsed)
            pipe_cpu.append(cpu)
    return [
        Row(
            figure="throughput, 32 MiB of base64 text (higher is better)",
            subject="raw PTY: cat on a PTY, read by this process",
            value=median(pty_rate),
            unit="MiB/s",
            runs=len(pty_rate),
            baseline=BASELINE,
            baseline_value=median(pipe_rate),
            detail=(
                f"range {spread(pty_rate)} MiB/s; CPU {median(pty_cpu):.2f} s "
                f"(pipe {median(pipe_cpu):.2f} s); {READ_SIZE}-byte reads"
            ),
            samples=tuple(pty_rate),
            baseline_samples=tuple(pipe_rate),
        )
    ]
