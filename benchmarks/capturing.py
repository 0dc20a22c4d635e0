"""Figure: ``multiserver capture`` of a full kept buffer (issue 38): a
session's screen as text, rendered from the daemon's 1 MiB of a real
program's output.

The buffers are the replay figure's (``replaying.PROGRAMS``, captured from
real programs on a 24x80 PTY, each run repeated to 1 MiB): ``top`` for 3
s (each repetition starts with its clear: rendered from the last one),
``vim`` paging with syntax colours (from its last clear), ``ls -lR`` in
colour (a log that only scrolls: from a line 48 lines before its end);
and ``top`` running for long: its repaints after its first screen,
repeated (it never clears again: the whole MiB is rendered, the worst
case). Each is put in the buffer of a detached 24x80 session of the
installed ``multiserver`` by ``cat`` (its terminal's output processing
off, so the bytes arrive as they were captured).

- subject: ``multiserver capture NAME``, a fresh process of the installed
  command, from spawn to exit (start-up, the lookup, a peek of the MiB, the
  rendering); the rendering alone (``multiserver.capture`` of the same
  peek, in this process) in the detail;
- baseline, same run, interleaved: ``tmux capture-pane -p`` of a tmux pane
  of the same size that showed the same MiB, a fresh process too. tmux
  rendered the MiB as it came and keeps the screen; capture renders on
  demand: the baseline is what asking costs there, not the same work.

No target: the rows say what capture costs where the buffer lets it
start late and where it cannot.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from benchmarks.common import Scratch, run_command, scratch, timed_command, wait_for
from benchmarks.peers import peer
from benchmarks.replaying import PROGRAMS, one_mib
from benchmarks.results import Row, Settings, median, spread
from benchmarks.terminal import MULTISERVER, multiserver_bin
from multiserver import DaemonPaths, capture, default_daemon_number, dial_blocking

NAME = "capture"
SECONDS = 45.0
FIGURE = "capture: a session's screen as text from a full 1 MiB kept buffer (ms, lower is better)"
BASELINE = "tmux capture-pane -p of a pane that showed the same MiB"
SHOW = 'stty -opost; cat "$0"; exec sleep 1000'  # the file's bytes as they were captured


def _repaints(sc: Scratch) -> bytes:
    """top's repaints after its first screen (from its second ``CSI H`` to
    its last), as a top that has run for long leaves in a buffer."""
    shown = PROGRAMS["top"][1](sc)
    return shown[shown.index(b"\x1b[H", shown.index(b"\x1b[H") + 3) : shown.rindex(b"\x1b[H")]


def _kept(name: str) -> tuple[int, int]:
    """(the daemon's buffered bytes of session ``name``, its dropped bytes)."""
    paths = DaemonPaths.for_number(default_daemon_number())
    with dial_blocking(paths, deadline=time.monotonic() + 10) as client:
        [child] = [c for c in client.list() if c.name == name]
        return child.buffered_bytes, child.dropped_bytes


def _render_ms(name: str) -> float:
    """The rendering alone: ``multiserver.capture`` of the session's peek."""
    paths = DaemonPaths.for_number(default_daemon_number())
    with dial_blocking(paths, deadline=time.monotonic() + 10) as client:
        [child] = [c for c in client.list() if c.name == name]
        peeked = client.peek(child.id)
    t0 = time.perf_counter()
    capture(peeked)
    return (time.perf_counter() - t0) * 1000


def _sessions(sc: Scratch, name: str, path: Path) -> list[str]:
    """A multiserver session and a tmux pane (24x80) that showed ``path``;
    the tmux command line (before its subcommand)."""
    argv = [multiserver_bin(), "new", "-d", "-n", name, "--", "sh", "-c", SHOW, str(path)]
    if (code := run_command(argv, MULTISERVER.env(sc))) != 0:
        raise RuntimeError(f"multiserver new {name} exited with {code}")
    if not wait_for(lambda: sum(_kept(name)) >= path.stat().st_size, 30):
        raise RuntimeError(f"the session {name} did not show its MiB")
    tmux = peer("tmux")
    started = tmux.new_argv(sc.root, name, ["sh", "-c", SHOW, str(path)])
    if (code := run_command(started, tmux.env(sc))) != 0:
        raise RuntimeError(f"tmux new-session exited with {code}")
    base = started[:5]  # tmux -S SOCKET -f /dev/null
    if not wait_for(lambda: _pane_command(base, name, sc) == "sleep", 30):
        raise RuntimeError("tmux's pane did not show its MiB")
    return base


def _pane_command(base: list[str], name: str, sc: Scratch) -> str:
    """What tmux's pane ``name`` runs now (``cat``, then ``sleep``)."""
    done = subprocess.run(
        [*base, "display", "-t", name, "-p", "#{pane_current_command}"],
        env=peer("tmux").env(sc),
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return done.stdout.strip()


def run(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    if shutil.which("tmux") is None:
        return [Row(FIGURE, "tmux", None, "ms", 0, BASELINE, None, detail="tmux not installed")]
    with scratch("capture") as sc:
        payloads = {**PROGRAMS, "top-for-long": ("top", _repaints)}
        for program, (binary, made) in payloads.items():
            if shutil.which(binary) is None:
                rows.append(
                    Row(FIGURE, program, None, "ms", 0, BASELINE, None, detail="not installed")
                )
                continue
            path = sc.root / f"{program}.bin"
            path.write_bytes(one_mib(made(sc)))
            base = _sessions(sc, program, path)
            ours: list[float] = []
            theirs: list[float] = []
            render: list[float] = []
            asked = [multiserver_bin(), "capture", program]
            tmux_asked = [*base, "capture-pane", "-p", "-t", program]
            for _ in settings.runs_within(SECONDS / len(payloads)):
                ours.append(timed_command(asked, MULTISERVER.env(sc)) * 1000)
                theirs.append(timed_command(tmux_asked, peer("tmux").env(sc)) * 1000)
                render.append(_render_ms(program))
            rows.append(
                Row(
                    figure=FIGURE,
                    subject=f"multiserver capture, {program}'s 1 MiB",
                    value=median(ours),
                    unit="ms",
                    runs=len(ours),
                    baseline=BASELINE,
                    baseline_value=median(theirs),
                    detail=(
                        f"range {spread(ours, 1, '{:.0f}')} ms; the rendering alone"
                        f" {median(render):.0f} ms; kept {sum(_kept(program)) // 1024} KiB"
                    ),
                    samples=tuple(ours),
                    baseline_samples=tuple(theirs),
                )
            )
    return rows
