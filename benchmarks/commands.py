"""Figure: command start-up, the command line as a person or a script
meets it (issues 13 and 22).

``multiserver`` is the command installed from a wheel in a venv of its own
(``benchmarks/installed.py``; not the dev venv's editable install). Each
command is a fresh process, timed from spawn to exit, at least 20 times
(at least 15 on a loaded machine), interleaved run by run with the
baseline, so load drifts alike:

- ``new -d`` (a new detached ``sleep 1000``), ``ls``, ``peek NAME``, ``kill
  NAME`` (a session the same run's ``new -d`` made), ``daemon`` (no
  options: make sure the daemon runs and print its socket), and ``attach
  NAME`` timed from spawn to raw mode (the outer PTY's termios lose ICANON
  and ECHO: the client is ready for keys), then stopped by pid; each with
  the daemon holding 1 session, then 1,000 (the ratio of the two is a
  target: a command must not grow with the sessions it does not touch);
- with 1 session only, as they touch no session: ``version``; ``stop`` of
  a second daemon with no session (``--daemon 2``, started untimed before
  each run by ``multiserver --daemon 2 daemon``, then timed until ``stop``
  exits); ``restore`` with nothing saved and no daemon running (its own
  empty runtime and state dirs: a login with nothing to bring back);
- 200 ``new -d`` in a shell loop, as a script makes sessions;
- the peers in the same run, where they have the command: dtach (``-n``,
  ``-a`` to raw mode), tmux (``new-session -d``, ``ls``, ``capture-pane -p``,
  ``attach`` to raw mode, ``kill-session``, ``start-server`` with the server
  up, ``-V``, and ``kill-server`` of a second server started untimed with
  one session).

Baseline: ``python -c pass`` with the installed venv's interpreter (the
floor of any Python command; the peers' rows are measured against their
own run's). Target: each at most 3x; at 1,000 sessions at most 1.3x the
same command at 1 (``ls``, which lists every session, no more than tmux's
``ls`` grows in the same run); the 200 in a loop at most a quarter of the issue's
figure, 100 in 28 s with ``python -c pass`` at 20 ms (14x pass each), so
3.5x pass each.
"""

from __future__ import annotations

import os
import termios
import time
from collections.abc import Callable, Sequence

import attrs
import trio

from benchmarks.common import (
    COMMAND_TIMEOUT,
    MEASURE_TIMEOUT,
    SESSION_ARGV,
    Scratch,
    daemon_client,
    run_command,
    scratch,
    timed_command,
    wait_for,
)
from benchmarks.installed import installed
from benchmarks.peers import peer
from benchmarks.results import Limit, Row, Settings, fmt_value, median, paired_ratio, spread
from benchmarks.terminal import Outer, multiserver_bin
from multiserver import ChildInfo, DaemonPaths, open_client
from restore import Arrangement, ArrangementStore, RestorationRef, SessionLeaf

NAME = "commands"
SUMMARY = "Command start-up"
BASELINE = "python -c pass (same interpreter)"
FIGURE = "command start-up: `multiserver {}` (ms)"
ONE = "multiserver, daemon with 1 session"
MANY = "multiserver, daemon with 1,000 sessions"
ALONE = "multiserver (touches no session)"
AT_MOST_PASS = 3.0
AT_MOST_GROWTH = 1.3
LOOP = 200
LOOP_AT_MOST_PASS = 3.5
MIN_RUNS = 20
# A loaded machine may stop a phase early, but not before this many runs.
FLOOR_RUNS = 15
QUICK_RUNS = 5
# Past this, a loaded machine gets fewer runs of a phase (FLOOR_RUNS at least).
SECONDS = 90.0
STOP_DAEMON = 2


@attrs.frozen
class Command:
    """One everyday command: its name in the table, what multiserver runs,
    and whether it touches the daemon's sessions (then it is timed at 1,000
    sessions too)."""

    name: str
    shape: str
    scales: bool = True
    # It lists every session, so its work grows with them by nature (issue
    # 35 asks only that it read once): at 1,000 it is held to the growth of
    # the peer's same command in the same run, not to AT_MOST_GROWTH.
    lists_all: bool = False


COMMANDS = (
    Command("new -d", "multiserver new -d -n NAME -- sleep 1000"),
    Command("ls", "multiserver ls", lists_all=True),
    Command("attach (to raw mode)", "multiserver attach --redraw none s1, until raw mode"),
    Command("peek", "multiserver peek s1"),
    Command("kill", "multiserver kill NAME"),
    Command("daemon", "multiserver daemon (it runs: print its socket)"),
    Command("version", "multiserver version", scales=False),
    Command("stop", "multiserver --daemon 2 stop (a daemon with no session)", scales=False),
    Command(
        "restore (nothing saved)", "multiserver restore, nothing saved, no daemon", scales=False
    ),
)
PEER_SHAPES = {
    "dtach": {"new -d": "dtach -n", "attach (to raw mode)": "dtach -a, until raw mode"},
    "tmux": {
        "new -d": "new-session -d",
        "ls": "ls",
        "attach (to raw mode)": "attach-session, until raw mode",
        "peek": "capture-pane -p",
        "kill": "kill-session",
        "daemon": "start-server (the server is up)",
        "version": "tmux -V",
        "stop": "kill-server (a second server, one session)",
    },
}


def _to_raw(argv: Sequence[str], env: dict[str, str]) -> float:
    """Spawn ``argv`` on a fresh PTY; seconds until it has put that
    terminal in raw mode. The client is then stopped by pid."""
    t0 = time.perf_counter()
    outer = Outer.spawn(argv, env, echo=False)
    try:
        deadline = time.monotonic() + MEASURE_TIMEOUT
        while termios.tcgetattr(outer.master)[3] & termios.ICANON:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} never set raw mode")
            time.sleep(0.0002)
        return time.perf_counter() - t0
    finally:
        outer.close()


Probe = Callable[[int], float]  # run number -> seconds
Samples = tuple[dict[str, list[float]], list[float]]  # per probe, and the baseline (ms)


def _multiserver_probes(sc: Scratch, *, scaling_only: bool) -> dict[str, Probe]:
    ms = multiserver_bin()
    env = sc.env(HOME=str(sc.root), TMPDIR=str(sc.root))
    made: list[str] = []

    def new(i: int) -> float:
        name = f"n{os.getpid()}-{len(made)}"
        made.append(name)
        return timed_command([ms, "new", "-d", "-n", name, "--", *SESSION_ARGV], env)

    def kill(i: int) -> float:
        return timed_command([ms, "kill", made.pop()], env)

    stop_env = {**env, "MULTISERVER_IDLE_EXIT": "never"}
    stop_socket = DaemonPaths.for_number(STOP_DAEMON).socket  # in the scratch dirs

    def stop(i: int) -> float:
        if run_command([ms, "--daemon", str(STOP_DAEMON), "daemon"], stop_env) != 0:
            raise RuntimeError(f"could not start daemon {STOP_DAEMON}")
        elapsed = timed_command([ms, "--daemon", str(STOP_DAEMON), "stop"], env)
        if not wait_for(lambda: not stop_socket.exists(), COMMAND_TIMEOUT, 0.005):
            raise RuntimeError(f"daemon {STOP_DAEMON} still listens after stop")
        return elapsed

    # A login with nothing saved: dirs of its own, where no daemon runs.
    empty = {
        **env,
        "MULTISERVER_RUNTIME_DIR": str(sc.root / "empty" / "run"),
        "MULTISERVER_STATE_DIR": str(sc.root / "empty" / "state"),
    }
    probes: dict[str, Probe] = {
        "new -d": new,
        "ls": lambda i: timed_command([ms, "ls"], env),
        "attach (to raw mode)": lambda i: _to_raw([ms, "attach", "--redraw", "none", "s1"], env),
        "peek": lambda i: timed_command([ms, "peek", "s1"], env),
        "kill": kill,
        "daemon": lambda i: timed_command([ms, "daemon"], env),
        "version": lambda i: timed_command([ms, "version"], env),
        "stop": stop,
        "restore (nothing saved)": lambda i: timed_command([ms, "restore"], empty),
    }
    scaling = {c.name for c in COMMANDS if c.scales}
    return {k: v for k, v in probes.items() if k in scaling or not scaling_only}


def _tmux_probes(sc: Scratch) -> dict[str, Probe]:
    tm = peer("tmux")
    env = tm.env(sc)
    base = tm.new_argv(sc.root, "s1", SESSION_ARGV)[:5]  # tmux -S SOCK -f /dev/null
    other = sc.root / "other"
    other.mkdir(mode=0o700, exist_ok=True)
    made: list[str] = []

    def new(i: int) -> float:
        name = f"n{len(made)}"
        made.append(name)
        return timed_command(tm.new_argv(sc.root, name, SESSION_ARGV), env)

    def kill_server(i: int) -> float:
        start = tm.new_argv(other, "x", SESSION_ARGV)
        if run_command(start, env) != 0:
            raise RuntimeError("tmux: could not start a second server")
        return timed_command([*start[:5], "kill-server"], env)

    return {
        "new -d": new,
        "ls": lambda i: timed_command([*base, "ls"], env),
        "attach (to raw mode)": lambda i: _to_raw(tm.attach_argv(sc.root, "s1"), env),
        "peek": lambda i: timed_command([*base, "capture-pane", "-p", "-t", "s1"], env),
        "kill": lambda i: timed_command([*base, "kill-session", "-t", made.pop()], env),
        "daemon": lambda i: timed_command([*base, "start-server"], env),
        "version": lambda i: timed_command(["tmux", "-V"], env),
        "stop": kill_server,
    }


def _dtach_probes(sc: Scratch) -> dict[str, Probe]:
    dt = peer("dtach")
    env = dt.env(sc)
    made: list[str] = []

    def new(i: int) -> float:
        name = f"n{len(made)}"
        made.append(name)
        return timed_command(dt.new_argv(sc.root, name, SESSION_ARGV), env)

    return {
        "new -d": new,
        "attach (to raw mode)": lambda i: _to_raw(dt.attach_argv(sc.root, "s1"), env),
    }


def _measure(settings: Settings, probes: dict[str, Probe], runs: int) -> Samples:
    """Each probe and the baseline, interleaved run by run (ms)."""
    py = [installed().python, "-c", "pass"]
    env = dict(os.environ)
    samples: dict[str, list[float]] = {k: [] for k in probes}
    base: list[float] = []
    floor = min(runs, QUICK_RUNS if settings.quick else FLOOR_RUNS)
    t0 = time.monotonic()
    for i in range(runs):
        # A loaded machine stops early (``floor`` runs at least), not past its share.
        spent = time.monotonic() - t0
        if i >= floor and spent + spent / i > SECONDS:
            break
        base.append(timed_command(py, env) * 1000)
        for what, probe in probes.items():
            samples[what].append(probe(i) * 1000)
    return samples, base


async def _add_sessions(count: int) -> None:
    """``count`` more detached sessions on the scratch daemon, all in
    flight, saved as ``new -d`` saves them (a tab each in the saved
    arrangement): a command must not grow with the daemon's sessions nor
    with the store's."""
    paths = DaemonPaths.for_number(1)
    made: list[ChildInfo] = []
    async with open_client(paths) as client, trio.open_nursery() as nursery:
        instance = client.instance_id

        async def one(i: int) -> None:
            launched = await client.launch(list(SESSION_ARGV), name=f"m{i}", hold=False)
            made.append(launched.child)

        for i in range(count):
            nursery.start_soon(one, i)
    leaves = [
        SessionLeaf(
            name=c.name,
            argv=list(c.argv),
            cwd=c.cwd,
            ref=RestorationRef(str(paths.socket), instance, c.id, c.pid),
            created_at=c.started_at,
        )
        for c in made
    ]
    with ArrangementStore.open() as store:
        store.modify(lambda arr: arr if not leaves else _with_tabs(arr, leaves))


def _with_tabs(arr: Arrangement, leaves: list[SessionLeaf]) -> Arrangement:
    for leaf in leaves:
        arr = arr.with_session(leaf)
    return arr


async def _with_daemon(
    settings: Settings, runs: int, sc: Scratch
) -> tuple[Samples, Samples, float]:
    """multiserver at 1 session, then at 1,000; then 200 new -d in a loop."""
    async with daemon_client():
        # Made as a person makes it: saved, so commands find it where it lives.
        env = sc.env(HOME=str(sc.root), TMPDIR=str(sc.root))
        timed_command([multiserver_bin(), "new", "-d", "-n", "s1", "--", *SESSION_ARGV], env)
        probes = _multiserver_probes(sc, scaling_only=False)
        one = await trio.to_thread.run_sync(_measure, settings, probes, runs)
        await _add_sessions(settings.many - 1)
        probes = _multiserver_probes(sc, scaling_only=True)
        many = await trio.to_thread.run_sync(_measure, settings, probes, runs)
    async with daemon_client():
        loop = await trio.to_thread.run_sync(_loop, sc)
    return one, many, loop


def _loop(sc: Scratch) -> float:
    script = (
        f'i=0; while [ "$i" -lt {LOOP} ]; do '
        f'"{multiserver_bin()}" new -d -- {" ".join(SESSION_ARGV)} >/dev/null || exit 1; '
        "i=$((i+1)); done"
    )
    env = sc.env(HOME=str(sc.root), TMPDIR=str(sc.root))
    return timed_command(["sh", "-c", script], env, timeout=MEASURE_TIMEOUT * 3)


def _peer(settings: Settings, name: str, runs: int) -> tuple[Samples, Samples | None]:
    """A peer's commands with one session; tmux's again with 1,000 (the
    growth multiserver is held to, beside the peer's own)."""
    p = peer(name)
    with scratch(name) as sc:
        env = p.env(sc)
        if run_command(p.new_argv(sc.root, "s1", SESSION_ARGV), env) != 0:
            raise RuntimeError(f"{name}: could not start a session")
        probes = _tmux_probes(sc) if name == "tmux" else _dtach_probes(sc)
        one = _measure(settings, probes, runs)
        if name != "tmux":
            return one, None
        # The other 999, 100 to a tmux command (new-session -d ... \; ...):
        # one command's whole list must fit tmux's message to its server.
        rest = [p.new_argv(sc.root, f"m{i}", SESSION_ARGV) for i in range(settings.many - 1)]
        for at in range(0, len(rest), 100):
            chain = list(rest[at])
            for argv in rest[at + 1 : at + 100]:
                chain += [";", *argv[5:]]
            if run_command(chain, env) != 0:
                raise RuntimeError("tmux: could not start the other sessions")
        scaling = {c.name for c in COMMANDS if c.scales}
        probes = {k: v for k, v in _tmux_probes(sc).items() if k in scaling}
        return one, _measure(settings, probes, runs)


def run(settings: Settings) -> list[Row]:
    runs = QUICK_RUNS if settings.quick else max(MIN_RUNS, settings.runs)
    with scratch("commands") as sc:
        one, many, loop_seconds = trio.run(_with_daemon, settings, runs, sc)
    peers: dict[str, Samples] = {}
    peers_many: dict[str, Samples] = {}
    for name in PEER_SHAPES:
        if peer(name).installed():
            peers[name], at_many = _peer(settings, name, runs)
            if at_many is not None:
                peers_many[f"{name}, 1,000 sessions"] = at_many
    rows: list[Row] = []
    for command in COMMANDS:
        rows.extend(_command_rows(command, one, many, peers, peers_many))
    per_new = loop_seconds / LOOP * 1000
    pass_ms = median(one[1])
    rows.append(
        Row.against(
            Limit("<=", LOOP_AT_MOST_PASS, per_new / pass_ms, "x python -c pass each"),
            figure=f"{LOOP} `multiserver new -d` in a shell loop (s)",
            subject="multiserver, sh while-loop, fresh daemon",
            value=loop_seconds,
            unit="s",
            runs=1,
            baseline=BASELINE,
            baseline_value=pass_ms * LOOP / 1000,
            detail=f"{per_new:.1f} ms each; the issue's figure: 100 in 28 s",
        )
    )
    return rows


def _command_rows(
    command: Command,
    one: Samples,
    many: Samples,
    peers: dict[str, Samples],
    peers_many: dict[str, Samples],
) -> list[Row]:
    what = command.name
    samples, base = one[0][what], one[1]
    ratio = paired_ratio(samples, base)
    figure = FIGURE.format(what)
    rows = [
        Row.against(
            Limit("<=", AT_MOST_PASS, ratio, "x python -c pass"),
            figure=figure,
            subject=ONE if command.scales else ALONE,
            value=median(samples),
            unit="ms",
            runs=len(samples),
            baseline=BASELINE,
            baseline_value=median(base),
            detail=f"range {spread(samples, 1, '{:.0f}')} ms; `{command.shape}`",
            samples=tuple(samples),
            baseline_samples=tuple(base),
        )
    ]
    if command.scales:
        at, at_base = many[0][what], many[1]
        grown = median(at) / median(samples)
        bound, what_bound = AT_MOST_GROWTH, "x at 1 session"
        theirs = peers.get("tmux", ({}, []))[0].get(what)
        theirs_many = peers_many.get("tmux, 1,000 sessions", ({}, []))[0].get(what)
        if command.lists_all and theirs and theirs_many:
            bound = median(theirs_many) / median(theirs)
            what_bound = f"x at 1 session (tmux's `{PEER_SHAPES['tmux'][what]}`: its own growth)"
        rows.append(
            Row.against(
                Limit("<=", bound, grown, what_bound),
                figure=figure,
                subject=MANY,
                value=median(at),
                unit="ms",
                runs=len(at),
                baseline=BASELINE,
                baseline_value=median(at_base),
                detail=f"range {spread(at, 1, '{:.0f}')} ms; {grown:.2f}x at 1 session",
                samples=tuple(at),
                baseline_samples=tuple(at_base),
            )
        )
    for name, (theirs, their_base) in [*peers.items(), *peers_many.items()]:
        if what not in theirs:
            continue
        s = theirs[what]
        shape = PEER_SHAPES[name.split(",")[0]][what]
        rows.append(
            Row(
                figure=figure,
                subject=name,
                value=median(s),
                unit="ms",
                runs=len(s),
                baseline=BASELINE,
                baseline_value=median(their_base),
                detail=(
                    f"range {spread(s, 1, '{:.1f}')} ms; `{shape}`; against "
                    "its own run's python -c pass"
                ),
                samples=tuple(s),
                baseline_samples=tuple(their_base),
            )
        )
    return rows


def summary(rows: Sequence[Row]) -> str:
    """The command start-up table: one line per command."""
    by_figure: dict[str, dict[str, Row]] = {}
    for r in rows:
        if r.figure.startswith(FIGURE.split("`")[0]):
            by_figure.setdefault(r.figure, {})[r.subject] = r
    if not by_figure:
        return ""
    peer_names = [*PEER_SHAPES, "tmux, 1,000 sessions"]
    head = (
        "| command | multiserver | x python -c pass (<= 3x) | with 1,000 sessions (<= 1.3x; ls: tmux's growth) | "
        + " | ".join(peer_names)
        + " | met |\n|---|---|---|---|"
        + "---|" * len(peer_names)
        + "---|\n"
    )
    lines = []
    pass_ms = None
    for command in COMMANDS:
        group = by_figure.get(FIGURE.format(command.name), {})
        one = group.get(ONE if command.scales else ALONE)
        if one is None:
            continue
        pass_ms = pass_ms or one.baseline_value
        many = group.get(MANY)
        grown = "-"
        if many is not None and many.limits:
            grown = f"{fmt_value(many.value, 'ms')} ({many.limits[0].observed:.2f}x)"
        theirs = []
        for name in peer_names:
            p = group.get(name)
            theirs.append(
                f"{fmt_value(p.value, 'ms')} ({p.ratio or 0:.2f}x)" if p and p.value else "-"
            )
        met = all(r.met for r in (one, many) if r is not None and r.met is not None)
        cells = [
            f"`{command.name}`",
            fmt_value(one.value, "ms"),
            f"{one.ratio or 0:.2f}x",
            grown,
            *theirs,
            "met" if met else "**missed**",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    note = (
        f"Medians of fresh processes, interleaved with `python -c pass` of the same "
        f"interpreter ({fmt_value(pass_ms, 'ms')}); the peers' ratios are to their own "
        "run's `python -c pass`. multiserver runs from a wheel install; details in the "
        "results table.\n\n"
    )
    return note + head + "\n".join(lines) + "\n"
