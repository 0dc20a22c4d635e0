"""Figure: the time of a switch to shared reading and back (issue 38).

When a second client joins a session another client holds, reading the
PTY master goes from the holder to the daemon (docs/sharing.md): the
daemon asks the holder (``GiveBack``), the holder stops reading and
answers (``hand_back``), and only then is the join answered, with a feed
for each. When the joiner leaves, the daemon stops reading and ends the
holder's feed: the end of the feed is the holder's cue to read the
master itself again.

- library, two ``SyncClient``s (``multiserver.dial_blocking``), each in a
  thread of its own, on one daemon in a scratch dir; the session runs
  ``cat``, idle (what is timed is the switch, not output). A holds the
  session (it launched it) and, in its thread, waits for ``GiveBack`` and
  answers ``hand_back`` at once, then waits for the end of the feed it
  got. B, in this thread, joins (``claim([id], join=True)``) and then
  releases, 500 times a run:

  - join: from B's call until B has its answer (the master to type
    into, its feed, the replay); the detail splits off when GiveBack
    reached A and A's ``hand_back`` round trip.
  - switch back: from B's ``release`` call until A's read of its feed
    returns its end (A reads the master from there).
  - baselines, interleaved switch by switch: B's same call for a second
    ``cat`` session that nobody holds (a plain claim: the master handed
    over), and B's release of it.

- command line: ``multiserver attach --redraw none NAME`` on an outer PTY
  (echo off), from spawn until a key written to the outer PTY comes back,
  sent again every 5 ms (the ``reattach`` figure's way): the second
  attach beside a first that holds the session (the first must answer
  GiveBack in its copy loop) against the first (nobody held it), 5 pairs
  a run, each key new to the session (a replay cannot hold it). Python's
  start-up is in both. The second key must then reach the first terminal
  too: it was joined, not taken over.

Each figure is the median of the runs' medians; the range is over runs,
and the detail gives the 90th percentile of every switch of every run.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import string
import threading
import time
from collections.abc import Iterator

import attrs

from benchmarks.common import (
    COMMAND_TIMEOUT,
    MEASURE_TIMEOUT,
    SCRATCH_PREFIX,
    STOP_GRACE,
    Scratch,
    run_command,
    scratch,
    stop_pids,
    wait_gone,
)
from benchmarks.results import Row, Settings, median, spread
from benchmarks.terminal import MULTISERVER, Outer
from multiserver import (
    DaemonConfig,
    DaemonPaths,
    GiveBack,
    MultiserverError,
    SyncClient,
    dial_blocking,
)

NAME = "switch"
SWITCHES = 500  # per run
PAIRS = 5  # command-line attaches, first and second, per run
SECONDS = 30.0
PROGRAM = ("cat",)
CLI_BASELINE = "the first attach: nobody held the session"
JOIN_FIG = "switch to shared reading: a second client joins a held session (ms, lower is better)"
BACK_FIG = "switch back: the joiner releases, the holder reads the master again (ms)"
CLI_FIG = "second `multiserver attach` beside a holder: spawn until a key echoes (ms)"


@attrs.frozen
class Switch:
    """One switch and its baselines, seconds."""

    join: float  # B's join, from call to answer
    asked: float  # from B's call until GiveBack reached A
    handed: float  # A's hand_back round trip
    back: float  # from B's release call until A's feed ended
    released: float  # B's release round trip (the shared session)
    claim: float  # B's call for a session nobody holds
    release: float  # B's release of it


@attrs.frozen
class Answered:
    """What A's thread saw of one switch (perf_counter)."""

    asked: float
    handed: float
    ended: float


# --- library ----------------------------------------------------------------------


@contextlib.contextmanager
def _daemon(deadline: float) -> Iterator[tuple[SyncClient, SyncClient]]:
    """A daemon in the scratch dirs (``scratch()`` active) and two clients
    of it; on the way out the daemon is shut down, and its pid must be gone
    (SIGKILL by pid if not)."""
    paths = DaemonPaths.for_number(1)
    runtime = os.environ.get("MULTISERVER_RUNTIME_DIR", "")
    if not runtime.startswith(SCRATCH_PREFIX) or not paths.socket.is_relative_to(runtime):
        raise RuntimeError(f"daemon socket {paths.socket} is outside the scratch dir")
    a = dial_blocking(paths, start=True, config=DaemonConfig(), deadline=deadline)
    pid = a.daemon_pid
    try:
        with a, dial_blocking(paths, deadline=deadline) as b:
            yield a, b
            with contextlib.suppress(MultiserverError):
                b.shutdown(force=True)
    finally:
        if wait_gone([pid], STOP_GRACE) and stop_pids([pid], signal.SIGKILL):
            raise RuntimeError(f"daemon {pid} survived SIGKILL")


def _hold(a: SyncClient, child_id: int, count: int, out: queue.Queue[Answered | Exception]) -> None:
    """A's thread: ``count`` times, answer GiveBack at once and wait for
    the end of the feed it got."""
    try:
        for _ in range(count):
            until = time.monotonic() + COMMAND_TIMEOUT
            while True:
                notice = a.wait_notice(until)
                if notice is None:
                    raise RuntimeError("no GiveBack came")
                if isinstance(notice, GiveBack) and notice.id == child_id:
                    break
            asked = time.perf_counter()
            feed = a.hand_back(child_id, b"")
            handed = time.perf_counter()
            try:
                ended = _feed_end(feed, until)
            finally:
                os.close(feed)
            out.put(Answered(asked, handed, ended))
    except Exception as exc:  # the measuring thread raises it
        out.put(exc)


def _feed_end(feed: int, until: float) -> float:
    """Read the feed to its end (the session is idle: nothing comes but
    the end); returns when it ended (perf_counter)."""
    while True:
        ready, _, _ = select.select([feed], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            raise RuntimeError("the feed did not end")
        if not os.read(feed, 65536):
            return time.perf_counter()


def _switch(
    b: SyncClient, held: int, free: int, answers: queue.Queue[Answered | Exception]
) -> Switch:
    t0 = time.perf_counter()
    (plain,) = b.claim([free], join=True)
    t1 = time.perf_counter()
    b.release([free])
    t2 = time.perf_counter()
    _close(plain.master, plain.feed)
    if plain.error is not None or plain.master is None or plain.feed is not None:
        raise RuntimeError(f"a claim of a session nobody holds: {plain}")
    t3 = time.perf_counter()
    (joined,) = b.claim([held], join=True)
    t4 = time.perf_counter()
    _close(joined.master, joined.feed)
    if joined.error is not None or joined.master is None or joined.feed is None:
        raise RuntimeError(f"a join: {joined}")
    t5 = time.perf_counter()
    b.release([held])
    t6 = time.perf_counter()
    answer = answers.get(timeout=COMMAND_TIMEOUT)
    if isinstance(answer, Exception):
        raise answer
    return Switch(
        join=t4 - t3,
        asked=answer.asked - t3,
        handed=answer.handed - answer.asked,
        back=answer.ended - t5,
        released=t6 - t5,
        claim=t1 - t0,
        release=t2 - t1,
    )


def _close(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)


def _library(count: int) -> list[Switch]:
    """One daemon, ``count`` switches."""
    with scratch("sw-lib"), _daemon(time.monotonic() + MEASURE_TIMEOUT) as (a, b):
        launched = a.launch(list(PROGRAM), name="held", share=True)
        held, master = launched.child.id, launched.master
        free = b.launch(list(PROGRAM), name="free", hold=False).child.id
        answers: queue.Queue[Answered | Exception] = queue.Queue()
        holder = threading.Thread(target=_hold, args=(a, held, count, answers), daemon=True)
        holder.start()
        try:
            return [_switch(b, held, free, answers) for _ in range(count)]
        finally:
            _close(master)
            holder.join(COMMAND_TIMEOUT)


# --- command line -----------------------------------------------------------------


def _attach(sc: Scratch, key: bytes) -> tuple[Outer, float]:
    env = MULTISERVER.env(sc)
    t0 = time.perf_counter()
    outer = Outer.spawn(MULTISERVER.attach_argv(sc, "held"), env, echo=False)
    try:
        outer.wait_echo(key, every=0.005)
    except BaseException:
        outer.close()
        raise
    return outer, time.perf_counter() - t0


def _command_line(pairs: int) -> list[tuple[float, float]]:
    """``pairs`` x (first attach, second attach beside it), seconds."""
    keys = iter(string.ascii_letters)
    with scratch("sw-cli") as sc:
        new = MULTISERVER.new_argv(sc, "held", PROGRAM)
        if (code := run_command(new, MULTISERVER.env(sc))) != 0:
            raise RuntimeError(f"multiserver new exited with {code}")
        out = []
        for _ in range(pairs):
            first, alone = _attach(sc, next(keys).encode())
            try:
                key = next(keys).encode()
                second, beside = _attach(sc, key)
                try:
                    # Joined, not taken over: the first terminal shows the key too.
                    first.read_until(key, timeout=COMMAND_TIMEOUT)
                finally:
                    second.close()
            finally:
                first.close()
            out.append((alone, beside))
        return out


# --- rows -------------------------------------------------------------------------


def run(settings: Settings) -> list[Row]:
    lib: list[list[Switch]] = []
    cli: list[list[tuple[float, float]]] = []
    for _ in settings.runs_within(SECONDS):
        lib.append(_library(SWITCHES))
        cli.append(_command_line(PAIRS))
    return _rows(lib, cli)


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def _row(
    figure: str, subject: str, base: str, runs: list[list[tuple[float, float]]], note: str
) -> Row:
    """Medians of each run's (subject, baseline) pairs, in ms."""
    values = [median([s for s, _ in run]) * 1000 for run in runs]
    bases = [median([b for _, b in run]) * 1000 for run in runs]
    every = [s * 1000 for run in runs for s, _ in run]
    fmt = "{:.3f}" if max(every) < 10 else "{:.1f}"
    return Row(
        figure=figure,
        subject=subject,
        value=median(values),
        unit="ms",
        runs=len(values),
        baseline=base,
        baseline_value=median(bases),
        detail=(
            f"range of the runs' medians {spread(values, 1, fmt)} ms; p90 of all "
            f"{len(every)} {fmt.format(_p90(every))} ms; {note}"
        ),
        samples=tuple(values),
        baseline_samples=tuple(bases),
    )


def _rows(lib: list[list[Switch]], cli: list[list[tuple[float, float]]]) -> list[Row]:
    n = len(lib[0]) if lib else 0
    asked = median([s.asked for run in lib for s in run]) * 1000
    handed = median([s.handed for run in lib for s in run]) * 1000
    released = median([s.released for run in lib for s in run]) * 1000
    return [
        _row(
            JOIN_FIG,
            "multiserver, library: B's `claim([id], join=True)` while A holds it",
            "the same call for a session nobody holds (a claim: the master handed over)",
            [[(s.join, s.claim) for s in run] for run in lib],
            f"{n} switches a run, two SyncClients in threads, the session idle; of it, "
            f"GiveBack reached A after {asked:.3f} ms (median), A's hand_back took "
            f"{handed:.3f} ms",
        ),
        _row(
            BACK_FIG,
            "multiserver, library: B's `release`, until A's feed ends",
            "B's release of a session it alone held (the claim of the baseline above)",
            [[(s.back, s.release) for s in run] for run in lib],
            f"{n} switches a run; B's release answered after {released:.3f} ms (median)",
        ),
        _row(
            CLI_FIG,
            "multiserver: `multiserver attach --redraw none NAME`, a second terminal",
            CLI_BASELINE,
            [[(beside, alone) for alone, beside in run] for run in cli],
            f"{len(cli[0]) if cli else 0} pairs a run; a fresh process each, start-up included",
        ),
    ]
