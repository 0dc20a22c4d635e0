"""``multiserver upgrade`` with the project installed as a user has it: a
fresh venv (not editable), a daemon started from it, then another build
installed over it (``pip install --force-reinstall``) and the daemon told to
take it (``conftest.py`` makes the builds and the venv).

- 200 sessions, 20 printing numbered lines, 5 of those attached (a real
  ``multiserver attach`` in a terminal), 10 exited with codes nobody
  collected: after the upgrade the daemon runs B under the same pid and
  instance, every program has its pid, every exit code is there, every
  window saw every number once and in order and still echoes typing; then
  20 more upgrades in a row, while programs exit, the same, and the daemon
  holds no more fds than after the first; detach and attach again work.
- A build whose daemon module fails at import, and one whose snapshot
  reader refuses: the upgrade exits 1 with one line saying why, and the
  daemon runs on as it was (pid, version, sessions, fds, children).
- A daemon of the layout before multiserver's rooms (every module flat in
  ``multiserver/``) takes the rooms in place, and back: an upgrade crosses
  the move by ``python -m multiserver`` and the snapshot, which name no
  module.
- The daemon SIGKILLed during the upgrade (while the new code checks the
  snapshot; after the exec, before the new code serves; at a random moment
  of it): its programs get their hangup, the check process ends, and the
  next ``restore`` brings every saved session back once.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from multiserver import open_client
from tests.cli.conftest import Terminal
from tests.conftest import (
    child_pids,
    daemon_pids_for,
    fd_links,
    is_alive,
    is_dead,
    wait_fds_back,
    wait_until,
)
from tests.procs import check_process, cmdline_of
from tests.upgrade.conftest import Builds, Installed, launch, wait_exited

# 40 numbered lines a second, in bursts (a `sleep` a line would fork 1,000
# processes a second across 20 printers).
PRINTER = [
    "sh",
    "-c",
    'i=0; while :; do for _ in 1 2 3 4 5 6 7 8 9 10; do i=$((i+1)); echo "<$i>"; done;'
    " sleep 0.25; done",
]
NUMBER = re.compile(rb"<(\d+)>")
SLEEPER = ["sleep", "1000"]
DETACH = b"\x1c"  # Ctrl-\
# What a session keeps across an upgrade, as ``ls --json`` shows it.
KEPT = ("id", "pid", "state", "exit_code", "held", "tty", "argv", "started_at", "exited_at")
KEPT += ("daemon_instance", "linger")
BOUND = 30.0  # how long a window may take to show what it is waiting for


def exiting(code: int, when: Path | None = None) -> list[str]:
    """A program that exits with ``code``: at once, or once ``when`` exists."""
    if when is None:
        return ["sh", "-c", f"exit {code}"]
    return ["sh", "-c", f"until [ -e {when} ]; do sleep 0.05; done; exit {code}"]


def numbers(raw: bytes) -> list[int]:
    return [int(n) for n in NUMBER.findall(raw)]


def last_number(raw: bytes) -> int:
    """The last number in ``raw`` (0: none), looked for in its tail: what
    follows it (a status line, the terminal's reset) is short."""
    found = NUMBER.findall(raw[-4096:])
    return int(found[-1]) if found else 0


def assert_every_number(seen: list[int], what: str, first: int | None = 1) -> None:
    """``seen`` runs on by one, from ``first`` (any, if None)."""
    assert seen, f"{what}: no number"
    start = seen[0] if first is None else first
    want = list(range(start, start + len(seen)))
    if seen != want:
        at = next(i for i, (a, b) in enumerate(zip(seen, want, strict=False)) if a != b)
        pytest.fail(f"{what}: {seen[max(0, at - 3) : at + 3]} at {at}, want {want[at]}")


def kept(sessions: dict[str, dict[str, Any]]) -> dict[str, tuple[object, ...]]:
    return {name: tuple(row[k] for k in KEPT) for name, row in sessions.items()}


async def wait_numbers_past(window: Terminal, past: int) -> None:
    """Wait until ``window`` shows a number after ``past``."""
    await wait_until(
        lambda: last_number(bytes(window.raw)) > past, BOUND, f"{window.name}: a number > {past}"
    )


async def check_windows(windows: Sequence[Terminal], word: str, first: int | None = 1) -> None:
    """Each window shows numbers after those it showed so far, every one of
    them in order, and echoes ``word`` typed into it."""
    for window in windows:
        await wait_numbers_past(window, last_number(bytes(window.raw)) + 5)
        window.line(word)
        await window.wait_bytes(word.encode(), BOUND)
        assert_every_number(numbers(bytes(window.raw)), window.name, first)


async def upgrade(installed: Installed, old: str, new: str, *, down: bool = False) -> str:
    """``multiserver upgrade``, which must say it took daemon 1 from ``old``
    to ``new`` (``down``: and that this is a downgrade)."""
    done = await installed.run("upgrade")
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr, installed.log_tail())
    note = re.escape(" (a downgrade: the installed code is older than what ran)") if down else ""
    assert re.fullmatch(
        rf"daemon 1 \(pid \d+\): {re.escape(old)} -> {re.escape(new)}{note}, paused \d+ ms\n",
        out,
    ), out
    return out


async def assert_upgraded(installed: Installed, daemon: dict[str, Any], version: str) -> None:
    """``daemon`` (its ``daemon --json`` row) runs ``version`` now, as the
    same process and instance."""
    row = await installed.daemon()
    assert (row["pid"], row["instance_id"], row["version"]) == (
        daemon["pid"],
        daemon["instance_id"],
        version,
    )
    assert row["upgraded_at"] is not None


# --- 200 sessions -----------------------------------------------------------------


@pytest.mark.timeout(400)
async def test_200_sessions_cross_21_upgrades_with_every_pid_code_and_line(
    installed: Installed, builds: Builds, open_terminal: Callable[..., Terminal]
) -> None:
    a, b = Builds.version(builds.a), Builds.version(builds.b)
    daemon = await installed.start()
    assert daemon["version"] == a
    printers = [f"p{i:02}" for i in range(20)]
    gates = installed.dirs.root / "gates"
    gates.mkdir()
    programs: dict[str, list[str]] = {name: PRINTER for name in printers}
    programs |= {f"e{code:02}": exiting(code) for code in range(1, 11)}
    programs |= {f"x{code}": exiting(code, gates / str(code)) for code in range(100, 110)}
    programs |= {f"s{i:03}": SLEEPER for i in range(160)}
    pids = await launch(installed.paths, programs)
    x_pids = [pid for name, pid in pids.items() if name.startswith("x")]
    assert len(programs) == 200
    windows = [
        open_terminal([installed.venv.command, "attach", name], name=name) for name in printers[:5]
    ]
    for window in windows:
        await wait_numbers_past(window, 5)
    await wait_exited(installed.paths, [f"e{c:02}" for c in range(1, 11)])
    before = await installed.sessions()
    assert sum(row["held"] for row in before.values()) == 5
    assert {before[f"e{c:02}"]["exit_code"] for c in range(1, 11)} == set(range(1, 11))
    await check_windows(windows, "typed-before")

    installed.venv.install(builds.b)
    await upgrade(installed, a, b)
    await assert_upgraded(installed, daemon, b)
    after = kept(await installed.sessions())
    assert after == kept(before), (
        [(n, row) for n, row in after.items() if row != kept(before)[n]],
        installed.log_tail(),
    )
    # The last-resort cleanup of ms_dirs finds it still (no --socket in its argv now).
    assert daemon_pids_for(installed.paths.socket) == [daemon["pid"]]
    await check_windows(windows, "typed-after-1")

    # 20 more: the x sessions exit one by one around the first 10 (their
    # pidfds close); the last 10 leave the daemon's fds as they were.
    for code in range(100, 110):
        (gates / str(code)).touch()
        await upgrade(installed, b, b)
    await wait_until(lambda: set(child_pids(daemon["pid"])).isdisjoint(x_pids), BOUND, "reaped")
    fds = fd_links(daemon["pid"])
    for _ in range(10):
        await upgrade(installed, b, b)
    await wait_fds_back(daemon["pid"], fds)
    await assert_upgraded(installed, daemon, b)
    # Each x session exited with its code; the rest is as it was.
    now = await installed.sessions()
    for code in range(100, 110):
        row = now[f"x{code}"]
        assert (row["state"], row["exit_code"]) == ("exited", code), row
        now[f"x{code}"] = row | {
            k: before[f"x{code}"][k] for k in ("state", "exit_code", "exited_at")
        }
    assert kept(now) == kept(before)
    await check_windows(windows, "typed-after-21")

    # What nobody held kept every line too.
    async with open_client(installed.paths) as client:
        for info in await client.list():
            if info.name in printers[5:]:
                peeked = await client.peek(info.id)
                assert peeked.dropped == 0
                assert_every_number(numbers(peeked.output), info.name)

    # Detach, and attach again in another window: the numbers go on.
    for window in windows:
        window.type(DETACH)
        await window.wait_bytes(f"[detached from {window.name}]".encode(), BOUND)
        with trio.fail_after(BOUND):
            await window.hung_up.wait()
        shown = last_number(bytes(window.raw))
        assert shown > 0
        again = open_terminal([installed.venv.command, "attach", window.name], name=window.name)
        await wait_numbers_past(again, shown + 5)
        await check_windows([again], "typed-again")
    assert is_alive(daemon["pid"])
    # No connection was dropped for not pausing (_upgrade.QUIET_WAIT).
    assert "did not pause" not in installed.paths.log.read_text()


# --- builds that cannot take over -------------------------------------------------


@pytest.mark.parametrize(
    ("build", "why"),
    [
        ("broken", "ImportError: broken on purpose"),
        ("refusing", "is older than this code reads"),
    ],
)
async def test_a_build_that_cannot_take_over_is_refused_in_one_line(
    installed: Installed, builds: Builds, build: str, why: str
) -> None:
    daemon = await installed.start()
    programs = {f"s{i}": SLEEPER for i in range(10)} | {"e3": exiting(3), "p": PRINTER}
    pids = await launch(installed.paths, programs)
    await wait_exited(installed.paths, ["e3"])
    before = await installed.sessions()
    fds = fd_links(daemon["pid"])
    children = set(child_pids(daemon["pid"]))
    assert children == set(pids.values()) - {pids["e3"]}

    installed.venv.install(getattr(builds, build))
    done = await installed.run("upgrade")
    assert done.returncode == 1
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith(f"multiserver: daemon 1 (pid {daemon['pid']}): not upgraded: "), line
    assert why in line, line

    # The same daemon (how many fds it has open varies: not compared).
    assert same_but_fds(await installed.daemon()) == same_but_fds(daemon)
    assert kept(await installed.sessions()) == kept(before)
    await wait_fds_back(daemon["pid"], fds)
    assert set(child_pids(daemon["pid"])) == children  # the check process is gone too


def same_but_fds(row: dict[str, Any]) -> dict[str, Any]:
    """A ``daemon --json`` row less the fds it has open now."""
    return row | {"open_files": row["open_files"] | {"in_use": None}}


# --- across the move into rooms ---------------------------------------------------


async def test_a_daemon_of_the_flat_layout_takes_the_rooms_and_back(
    installed: Installed, builds: Builds, before_rooms: Path
) -> None:
    flat, b = Builds.version(before_rooms), Builds.version(builds.b)
    installed.venv.install(before_rooms)
    daemon = await installed.start()
    assert daemon["version"] == flat
    programs = {f"s{i}": SLEEPER for i in range(10)} | {"e3": exiting(3), "p": PRINTER}
    await launch(installed.paths, programs)
    await wait_exited(installed.paths, ["e3"])
    before = await installed.sessions()

    installed.venv.install(builds.b)
    await upgrade(installed, flat, b)
    await assert_upgraded(installed, daemon, b)
    assert kept(await installed.sessions()) == kept(before), installed.log_tail()

    installed.venv.install(before_rooms)
    await upgrade(installed, b, flat, down=True)
    await assert_upgraded(installed, daemon, flat)
    assert kept(await installed.sessions()) == kept(before), installed.log_tail()
    async with open_client(installed.paths) as client:
        peeked = await client.peek(next(c.id for c in await client.list() if c.name == "p"))
    assert_every_number(numbers(peeked.output), "p")


# --- SIGKILL during the upgrade ---------------------------------------------------


async def strike(point: str, pid: int) -> str:
    """Wait for ``point`` of the upgrade of daemon ``pid``, then SIGKILL it;
    says where it struck."""
    checker: list[int] = []
    if point == "checking":

        def found() -> bool:
            checker[:] = [p for p in [check_process(pid)] if p]
            return bool(checker)

        await wait_until(found, BOUND, "the check process")
        where = f"while the check process {checker[0]} ran"
    elif point == "resuming":
        await wait_until(lambda: b"--resume" in cmdline_of(pid), BOUND, "the exec")
        where = "after the exec, before the new code served"
    else:
        delay = random.uniform(0.0, 2.0)
        await trio.sleep(delay)
        where = f"{delay:.3f} s into the upgrade"
    os.kill(pid, signal.SIGKILL)
    if checker:  # it ends by itself: nobody reads its answer
        await wait_until(lambda: is_dead(checker[0]), BOUND, "the check process to end")
    return where


@pytest.mark.parametrize("point", ["checking", "resuming", "at random"])
async def test_a_daemon_killed_during_the_upgrade_is_restored_once(
    installed: Installed, builds: Builds, point: str
) -> None:
    daemon = await installed.start()
    pid = daemon["pid"]
    programs = {f"s{i:02}": SLEEPER for i in range(20)} | {"p": PRINTER}
    pids = await launch(installed.paths, programs, save=True)
    installed.orphans += pids.values()
    installed.venv.install(builds.b)

    results: list[subprocess.CompletedProcess[bytes]] = []
    async with trio.open_nursery() as nursery:

        async def run_upgrade() -> None:
            results.append(await installed.run("upgrade"))

        nursery.start_soon(run_upgrade)
        where = await strike(point, pid)
    (upgraded,) = results
    if point != "at random":
        assert upgraded.returncode == 1, (where, upgraded.stdout)
        assert len(upgraded.stderr.splitlines()) == 1, upgraded.stderr
    await wait_until(lambda: is_dead(pid), 5.0, "the daemon to die")
    # Its programs lost their terminal with it (the masters closed).
    await wait_until(lambda: all(is_dead(p) for p in pids.values()), BOUND, "the hangups")

    report = json.loads(await installed.ok("restore", "--json"))
    outcomes = {s["name"]: s["outcome"] for s in report["sessions"]}
    assert outcomes == dict.fromkeys(programs, "relaunched"), where
    now = await installed.sessions()  # a name listed twice fails
    assert sorted(now) == sorted(programs), where
    installed.daemons.append((await installed.daemon())["pid"])
    for name, row in now.items():
        assert row["state"] == "running", (where, name, row)
        assert row["pid"] != pids[name] and row["daemon_instance"] != daemon["instance_id"]
