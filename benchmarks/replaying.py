"""Figure: what the replay filter costs (issue 34): a full kept buffer
(1 MiB, the daemon's default) of real programs' output, written as a
replay is (``multiserver.for_terminal``: only what the one table of what
draws names).

The output is captured first, once a run, from real programs on a 24x80
PTY (``TERM=xterm-256color``): ``top`` redrawing every 0.1 s; ``vim``
paging through a C file with syntax colours (where vim is installed);
``ls --color=always -lR`` of /usr/share (a log-like stream of text and
colours). Each capture is repeated to 1 MiB.

- subject: ``for_terminal`` of that MiB, in this process;
- baseline, same run: the same MiB carried by a raw PTY (``cat`` of it on
  a fresh PTY, read by this process to EIO): what showing it costs before
  any filter. Target: the filter takes no longer than the PTY itself
  (<= 1x), so that attaching to a full buffer is never the filter's wait.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import MIB, Scratch, scratch, spawn_on_pty, stop_pids
from benchmarks.results import Limit, Row, Settings, median, paired_ratio, spread

NAME = "replaying"
SIZE = MIB
BASELINE = "raw PTY: the same MiB through cat on a PTY"
TARGET = 1.0  # x raw PTY
SECONDS = 25.0
FIGURE = "replay filter: a full 1 MiB kept buffer written as a replay (ms, lower is better)"


def _run_on_pty(sc: Scratch, argv: list[str], keys: list[tuple[float, bytes]]) -> bytes:
    """What ``argv`` writes on a 24x80 PTY, the keys typed at their times
    (seconds from the start); read until it exits (at most 20 s)."""
    exe = shutil.which(argv[0])
    assert exe is not None
    env = {**sc.env(), "TERM": "xterm-256color", "LC_ALL": "C.UTF-8", "HOME": str(sc.root)}
    pid, master = spawn_on_pty(exe, argv, env, size=(24, 80))
    out = bytearray()
    start = time.monotonic()
    pending = list(keys)
    try:
        while time.monotonic() - start < 20:
            now = time.monotonic() - start
            while pending and pending[0][0] <= now:
                os.write(master, pending.pop(0)[1])
            if not select.select([master], [], [], 0.05)[0]:
                continue
            try:
                data = os.read(master, 65536)
            except OSError as exc:
                if exc.errno == errno.EIO:
                    break
                raise
            if not data:
                break
            out += data
    finally:
        os.close(master)
        stop_pids([pid])
    return bytes(out)


def _top(sc: Scratch) -> bytes:
    return _run_on_pty(sc, ["top", "-d", "0.1"], [(3.0, b"q")])


def _vim(sc: Scratch) -> bytes:
    source = sc.root / "page.c"
    source.write_text(
        "".join(
            f"static int f{k}(int x) {{ /* {k} */ return x * {k} + 0x{k:x}; }}\n"
            for k in range(2000)
        )
    )
    keys = [(1.0 + 0.05 * k, b"\x06") for k in range(40)] + [(3.5, b":qa!\r")]
    return _run_on_pty(sc, ["vim", "-u", "NONE", "-N", "-c", "syntax on", str(source)], keys)


def _ls(sc: Scratch) -> bytes:
    done = subprocess.run(
        ["ls", "--color=always", "-lR", "/usr/share"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    return done.stdout.replace(b"\n", b"\r\n")[:SIZE]


PROGRAMS: dict[str, tuple[str, Callable[[Scratch], bytes]]] = {
    "top": ("top", _top),
    "vim": ("vim", _vim),
    "ls": ("ls", _ls),
}


def one_mib(capture: bytes) -> bytes:
    if not capture:
        raise RuntimeError("the program wrote nothing")
    return (capture * (SIZE // len(capture) + 1))[:SIZE]


def _filter_ms(data: bytes) -> float:
    from multiserver import for_terminal

    t0 = time.perf_counter()
    for_terminal(data)
    return (time.perf_counter() - t0) * 1000


def _pty_ms(path: Path, env: dict[str, str]) -> float:
    cat = shutil.which("cat")
    assert cat is not None
    t0 = time.perf_counter()
    pid, master = spawn_on_pty(cat, ["cat", str(path)], env)
    try:
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError as exc:
                if exc.errno == errno.EIO:
                    break
                raise
        return (time.perf_counter() - t0) * 1000
    finally:
        os.close(master)
        stop_pids([pid])


def run(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    with scratch("replaying") as sc:
        payloads: dict[str, bytes] = {}
        for name, (program, capture) in PROGRAMS.items():
            if shutil.which(program) is None:
                rows.append(
                    Row(FIGURE, name, None, "ms", 0, BASELINE, None, detail="not installed")
                )
                continue
            payloads[name] = one_mib(capture(sc))
        for name, data in payloads.items():
            path = sc.root / f"{name}.bin"
            path.write_bytes(data)
            ours: list[float] = []
            base: list[float] = []
            _filter_ms(data)  # warm: the regexes compiled, the modules imported
            for _ in settings.runs_within(SECONDS / max(1, len(payloads))):
                ours.append(_filter_ms(data))
                base.append(_pty_ms(path, sc.env()))
            ratio = paired_ratio(ours, base)
            rows.append(
                Row.against(
                    Limit("<=", TARGET, ratio, "x raw PTY"),
                    figure=FIGURE,
                    subject=f"multiserver: for_terminal, {name}'s output",
                    value=median(ours),
                    unit="ms",
                    runs=len(ours),
                    baseline=BASELINE,
                    baseline_value=median(base),
                    detail=(
                        f"range {spread(ours, 1, '{:.1f}')} ms; {SIZE / MIB / median(ours) * 1000:.0f}"
                        f" MiB/s; kept {len(_kept(data)) * 100 // len(data)}% of the bytes"
                    ),
                    samples=tuple(ours),
                    baseline_samples=tuple(base),
                )
            )
    return rows


def _kept(data: bytes) -> bytes:
    from multiserver import for_terminal

    return for_terminal(data)[0]
