"""Figure: what keeping scrollback costs the disk (issue 35): the bytes
each writer of a session's output file writes, per byte of output, for
three patterns of output. Issue 35 found the saver of earlier versions
writing 10,000x the output of a clock (it rewrote the whole kept tail of
every session whose counts moved, every 5 s).

The writers (``multiserver/_durable.py``): the daemon, while nobody holds
the session; the attach client, while it does. The program, the same for
both, writes one pattern for WINDOW seconds, counting what it wrote:

- ``clock``: ``\\r ESC[K 12:00:SS``, 12 bytes every 0.2 s (a status line);
- ``redraw``: a whole 24x80 screen (about 2 KiB) every 0.05 s (``top``);
- ``flood``: 64 KiB writes as fast as they go (a build log, ``cat``).

Bytes written: the writer's ``wchar`` (``/proc/PID/io``: every byte its
``write`` calls took) over the window. The daemon has no client then, so
that is its files (and its log); the attach client's is its files plus the
terminal, so what the outer terminal received is taken off. Target: at
most twice the output (plus a small constant a flush: the state file).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from benchmarks.common import Scratch, run_command, scratch, wait_for
from benchmarks.results import Limit, Row, Settings, median, spread
from benchmarks.terminal import MULTISERVER, Outer, multiserver_bin
from multiserver import DaemonPaths, default_daemon_number, dial_blocking

NAME = "scrollback"
WINDOW = 8.0
SECONDS = 120.0
TARGET = 2.0  # x output (issue 35)
FIGURE = "scrollback kept on disk: bytes written per byte of output (lower is better)"
PROBE = b"#"  # never in a pattern
PROGRAM = """
import os, sys, time, tty
pattern, seconds, count = sys.argv[1], float(sys.argv[2]), sys.argv[3]
tty.setraw(0)
while (b := os.read(0, 1)) != b"g":  # go; anything else (a probe) comes back
    os.write(1, b)
screen = b"\\x1b[H" + b"".join(b"\\x1b[%dH%-79s" % (r, b"row %d" % r) for r in range(1, 25))
chunk = os.urandom(24 * 1024).hex().encode() + b"\\n"
end, n, i = time.monotonic() + seconds, 0, 0
while time.monotonic() < end:
    i += 1
    if pattern == "clock":
        data = b"\\r\\x1b[K12:00:%02d" % (i % 60)
        time.sleep(0.2)
    elif pattern == "redraw":
        data = screen
        time.sleep(0.05)
    else:
        data = chunk
    n += os.write(1, data)
open(count, "w").write(str(n))
os.read(0, 1)
"""
PATTERNS = ("clock", "redraw", "flood")


def _wchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["wchar"])


def _daemon_pid() -> int:
    paths = DaemonPaths.for_number(default_daemon_number())
    with dial_blocking(paths, children=False, deadline=time.monotonic() + 10) as client:
        return client.daemon_pid


def _program(sc: Scratch, pattern: str, count: Path) -> list[str]:
    """The program's command line: a file, so that the argv its daemon
    notes beside the output (a state file, written when it changes) is short."""
    script = sc.root / "pattern.py"
    script.write_text(PROGRAM)
    return [sys.executable, str(script), pattern, str(WINDOW), str(count)]


def _start(sc: Scratch, pattern: str) -> Path:
    count = sc.root / f"{pattern}.count"
    program = _program(sc, pattern, count)
    argv = [multiserver_bin(), "new", "-d", "-n", pattern, "--", *program]
    if (code := run_command(argv, MULTISERVER.env(sc))) != 0:
        raise RuntimeError(f"multiserver new {pattern} exited with {code}")
    return count


def _output(count: Path) -> int:
    if not wait_for(count.exists, WINDOW + 10):
        raise RuntimeError("the program did not finish its window")
    return int(count.read_text())


def _settled(pid: int, quiet: float = 2.5) -> int:
    """``pid``'s wchar once it has not moved for ``quiet`` seconds (the
    writers flush every 2 or 3 s: their last write of the window is in)."""
    last, since = _wchar(pid), time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(0.1)
        now = _wchar(pid)
        if now != last:
            last, since = now, time.monotonic()
    return last


def _go(name: str) -> None:
    """Type the byte that starts the program (it waits for it, raw)."""
    paths = DaemonPaths.for_number(default_daemon_number())
    with dial_blocking(paths, children=True, deadline=time.monotonic() + 10) as client:
        [child] = [c for c in client.list() if c.name == name]
        [claimed] = client.claim([child.id], keep_output=True)
        assert claimed.master is not None
        os.write(claimed.master, b"g")
        os.close(claimed.master)
        client.release([child.id])


def _daemon(pattern: str) -> float:
    """Nobody attached: the daemon writes the file."""
    with scratch(f"sb-d-{pattern}") as sc:
        count = _start(sc, pattern)
        daemon = _daemon_pid()
        before = _settled(daemon, quiet=0.5)
        _go(pattern)
        output = _output(count)
        return (_settled(daemon) - before) / output


def _client(pattern: str) -> float:
    """Attached from the start: the attach client writes the file."""
    with scratch(f"sb-c-{pattern}") as sc:
        env = MULTISERVER.env(sc)
        count = sc.root / f"{pattern}.count"
        program = _program(sc, pattern, count)
        argv = [multiserver_bin(), "new", "-d", "-n", pattern, "--", *program]
        if (code := run_command(argv, env)) != 0:
            raise RuntimeError(f"multiserver new {pattern} exited with {code}")
        outer = Outer.spawn(
            [multiserver_bin(), "attach", "--redraw", "none", pattern], env, echo=False
        )
        try:
            outer.wait_echo(PROBE)  # attached, raw: the probe went to the program and back
            before = _settled(outer.pid, quiet=0.5)
            outer.write(b"g")
            buf = bytearray(1 << 20)
            shown = 0
            while not count.exists():
                n = outer.read_some(buf, 0.5)
                if n < 0:
                    raise RuntimeError("the attach client's terminal closed")
                shown += n
            output = int(count.read_text())
            end = time.monotonic() + 4  # its last write of the window (SAVE_EVERY: 3 s)
            while (left := end - time.monotonic()) > 0:
                shown += max(0, outer.read_some(buf, left))
            written = _wchar(outer.pid) - before - shown
        finally:
            outer.close()
        return max(0, written) / output


def run(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    for writer, measure in (
        ("the daemon (nobody attached)", _daemon),
        ("the attach client", _client),
    ):
        for pattern in PATTERNS:
            got: list[float] = []
            for _ in settings.runs_within(SECONDS / 6, at_least=1 if settings.quick else 3):
                got.append(measure(pattern))
            value = median(got)
            rows.append(
                Row.against(
                    Limit("<=", TARGET, value, "x output"),
                    figure=FIGURE,
                    subject=f"{writer}, {pattern}",
                    value=value,
                    unit="x output",
                    runs=len(got),
                    baseline="the output itself",
                    baseline_value=1.0,
                    detail=f"range {spread(got, 1, '{:.2f}')}x; {WINDOW:g} s of output",
                    samples=tuple(got),
                )
            )
    return rows
