"""The saved arrangement under faults, as a person meets them from a shell:
the store locked by another process, on a read-only or full file system,
one table damaged, emptied to zero bytes, a restore SIGKILLed at random
moments, two restores at once (two terminals at login).

After each fault the next ``multiserver restore`` exits 0 with every
session present once: each saved session has one running child, no child
runs twice, and nothing that was closed (``kill``) comes back. A command
that could not record what it did says so and exits non-zero.

A "reboot" here is SIGKILL of every daemon of the test and of its children
(by pid, from /proc). Daemons are stopped by pid at the end (``ms_dirs``).
The read-only and full file systems are a tmpfs mounted on the test's
state dir (skipped, with the reason, where mounting is not permitted).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from multiserver import ChildInfo, DaemonNotRunning, open_client
from multiserver.system._paths import try_lock
from restore import ArrangementStore
from tests.conftest import MsDirs, daemon_pids_under, is_alive, stop_daemon_sync, wait_until
from tests.reliability._cli import COMMAND_TIMEOUT, MULTISERVER, ms_ok, ms_run
from tests.reliability._report import record

NAMES = ("a", "b", "c")
CLOSED = "k"  # a session killed before the fault: it never comes back


def store_path(ms_dirs: MsDirs) -> Path:
    path = ArrangementStore.default_path()
    assert path.parent == ms_dirs.state
    return path


async def make_sessions(ms_dirs: MsDirs) -> None:
    for name in (*NAMES, CLOSED):
        await ms_ok("new", "-d", "-n", name, "--", "cat")
    await ms_ok("kill", CLOSED)


def reboot(ms_dirs: MsDirs) -> None:
    """SIGKILL every child, then every daemon, of the test."""
    for pid in daemon_pids_under(ms_dirs.root):
        stop_daemon_sync(pid)


async def live_children(ms_dirs: MsDirs) -> list[ChildInfo]:
    try:
        async with open_client(ms_dirs.paths) as client:
            return await client.list()
    except DaemonNotRunning:
        return []


async def restore(*extra: str) -> tuple[int, Any, str]:
    """``multiserver restore --json``: (status, its report or None, stderr)."""
    done = await ms_run("restore", "--json", *extra)
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr
    report = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, report, stderr


async def restore_ok() -> Any:
    status, report, stderr = await restore()
    assert status == 0, (report, stderr)
    assert report is not None and report["ok"] is True, report
    return report


async def assert_whole(ms_dirs: MsDirs, names: tuple[str, ...] | None = NAMES) -> None:
    """Every saved session has its own running child, each child is one
    session's, and the closed one is nowhere. ``names``: the saved names
    they must have (None: any)."""
    children = await live_children(ms_dirs)
    with ArrangementStore.open(store_path(ms_dirs)) as store:
        leaves = store.load().leaves()
        pending = store.pending_closes()
    assert pending == []
    by_key = {(str(ms_dirs.paths.socket), c.id): c for c in children}
    got = sorted(leaf.name for leaf in leaves)
    if names is not None:
        assert got == sorted(names), (got, children)
    assert len(got) == len(set(got)) == len(NAMES), got
    refs = []
    for leaf in leaves:
        assert leaf.ref is not None, leaf
        child = by_key.get((leaf.ref.socket, leaf.ref.child_id))
        assert child is not None and child.state == "running", (leaf, children)
        assert child.argv == ["cat"]
        refs.append(leaf.ref.child_id)
    # One child per session, none more (no copy, nothing closed back).
    assert sorted(refs) == sorted(c.id for c in children), (leaves, children)
    assert CLOSED not in {c.name for c in children} | set(got)


def checkpoint(path: Path) -> None:
    """Everything in the main file, no -wal left (no other connection is open)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def damage_table(path: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with 0xff bytes."""
    checkpoint(path)
    conn = sqlite3.connect(path)
    try:
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
    finally:
        conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def quarantined(ms_dirs: MsDirs) -> list[Path]:
    return sorted(p for p in ms_dirs.state.iterdir() if ".corrupt-" in p.name)


@contextlib.contextmanager
def tmpfs_state(ms_dirs: MsDirs, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on the state dir; unmounted at the end."""
    ms_dirs.state.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(ms_dirs.state)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield ms_dirs.state
    finally:
        reboot(ms_dirs)  # nothing may hold a file there at the unmount
        subprocess.run(["umount", str(ms_dirs.state)], check=True)


@contextlib.contextmanager
def read_only_store(path: Path) -> Iterator[None]:
    """The store file bind-mounted read-only on itself (tests run as root,
    whom ``chmod`` does not stop; the state dir's file system cannot be made
    read-only while a daemon writes its log there)."""
    steps = (
        ["mount", "--bind", str(path), str(path)],
        ["mount", "-o", "remount,bind,ro", str(path)],
    )
    for i, step in enumerate(steps):
        done = subprocess.run(step, capture_output=True, check=False)
        if done.returncode != 0:
            if i:
                subprocess.run(["umount", str(path)], check=True)
            pytest.skip(f"cannot bind-mount the store read-only: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


async def kill_refused(ms_dirs: MsDirs, name: str) -> None:
    """``kill NAME`` whose close cannot be saved: refused in one line, the
    session left running."""
    before = {c.name: c for c in await live_children(ms_dirs)}
    done = await ms_run("kill", name)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode != 0, stderr
    lines = [x for x in stderr.splitlines() if x.startswith("multiserver: ")]
    assert any(f"{name}: not killed;" in x and "could not be saved" in x for x in lines) or any(
        "cannot be saved" in x for x in lines
    ), stderr
    assert is_alive(before[name].pid)


async def kill_then_gone(ms_dirs: MsDirs, name: str) -> None:
    """Once the store takes it, the kill works, and a restore leaves it closed."""
    await ms_ok("kill", name)
    await restore_ok()
    assert name not in {c.name for c in await live_children(ms_dirs)}
    with ArrangementStore.open(store_path(ms_dirs)) as store:
        assert store.load().find(name) is None


# --- a store that cannot be written ------------------------------------------------------


async def test_store_locked_by_another_process(ms_dirs: MsDirs) -> None:
    """Another process holds the store's write lock longer than a command
    waits (5 s): a kill is refused, a restore relaunches what it can
    without recording it; once the lock is gone, the next restore finds
    those relaunches as the same sessions (never "exists already")."""
    await make_sessions(ms_dirs)
    path = store_path(ms_dirs)
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        await kill_refused(ms_dirs, "a")
        reboot(ms_dirs)
        status, report, stderr = await restore()
        assert status != 0, (report, stderr)
        assert report is not None
        assert all(
            "not saved" in s["detail"] or s["outcome"] == "failed" for s in report["sessions"]
        )
        during = sorted(c.name for c in await live_children(ms_dirs))
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    report = await restore_ok()
    await assert_whole(ms_dirs)
    outcomes = {s["name"]: s["outcome"] for s in report["sessions"]}
    for name in during:  # started unrecorded under the lock: found, not started again
        assert outcomes[name] == "attached", report
    await kill_then_gone(ms_dirs, "a")
    record("store_locked", relaunched_unrecorded=during, next_restore=outcomes)


async def test_store_read_only(ms_dirs: MsDirs) -> None:
    await make_sessions(ms_dirs)
    path = store_path(ms_dirs)
    checkpoint(path)
    with read_only_store(path):
        await kill_refused(ms_dirs, "a")
        reboot(ms_dirs)
        status, report, stderr = await restore()
        assert status != 0 and stderr.strip(), (report, stderr)
        during = sorted(c.name for c in await live_children(ms_dirs))
    report = await restore_ok()
    await assert_whole(ms_dirs)
    await kill_then_gone(ms_dirs, "a")
    record(
        "store_read_only",
        relaunched_unrecorded=during,
        next_restore={s["name"]: s["outcome"] for s in report["sessions"]},
    )


def fill(state: Path) -> Path:
    """Fill the file system of ``state`` up; returns the file to remove."""
    filler = state / "filler"
    with contextlib.suppress(OSError), open(filler, "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    return filler


async def test_store_on_a_full_file_system(ms_dirs: MsDirs) -> None:
    """The state dir's file system full: a kill is refused; a restore
    cannot open the store (SQLite cannot make its -shm) and says the file
    system is full; once there is room, the next restore brings every
    session back."""
    with tmpfs_state(ms_dirs, "1m") as state:
        await make_sessions(ms_dirs)
        checkpoint(store_path(ms_dirs))
        filler = fill(state)
        await kill_refused(ms_dirs, "a")
        reboot(ms_dirs)
        status, report, stderr = await restore()
        assert status != 0 and "its file system is full" in stderr, (report, stderr)
        filler.unlink()
        report = await restore_ok()
        await assert_whole(ms_dirs)
        await kill_then_gone(ms_dirs, "a")
        record("store_full", restore_said=stderr.strip())


# --- a damaged store ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "table", ["meta", "windows", "tabs", "sessions", "leaf_bytes", "pending_closes"]
)
async def test_one_damaged_table_quarantines_the_file(ms_dirs: MsDirs, table: str) -> None:
    """The file is moved aside (kept whole) with a one-line warning, and a
    fresh one holds what could be read: the sessions keep their names, even
    when the damaged table is the sessions' own (they come back as orphans
    adopted by the sweep, each once, under the names their daemon knows
    them by) or their layout's (each in a tab of its own)."""
    await make_sessions(ms_dirs)
    reboot(ms_dirs)
    await restore_ok()  # relaunched: their notices are in leaf_bytes now
    path = store_path(ms_dirs)
    damage_table(path, table)
    damaged = path.read_bytes()
    listed = await ms_run("ls")
    stderr = listed.stderr.decode(errors="replace")
    assert listed.returncode == 0, stderr
    warnings = [x for x in stderr.splitlines() if "moved it to" in x]
    assert len(warnings) == 1, stderr
    (aside,) = quarantined(ms_dirs)
    assert aside.read_bytes() == damaged and str(aside) in warnings[0]
    await restore_ok()
    await assert_whole(ms_dirs)
    record("damaged_table", table=table, warning=warnings[0])


async def test_a_zero_length_store_is_reported_and_kept(ms_dirs: MsDirs) -> None:
    await make_sessions(ms_dirs)
    path = store_path(ms_dirs)
    checkpoint(path)
    os.truncate(path, 0)
    done = await ms_run("restore", "--json")
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr
    assert "the file is empty (0 bytes): the sessions saved in it are gone" in stderr
    (aside,) = quarantined(ms_dirs)
    assert aside.stat().st_size == 0
    # The file is gone; the running sessions are each adopted once, under
    # the names their daemon knows them by.
    await assert_whole(ms_dirs)


# --- restores that overlap or die ----------------------------------------------------------


async def test_two_restores_at_once_report_the_same_outcomes(ms_dirs: MsDirs) -> None:
    """Two terminals at login: both restores wait while the restore lock is
    held (here by the test, so that they surely overlap), then one restores
    and the other reports its outcomes. Both exit 0, with the same outcomes."""
    await make_sessions(ms_dirs)
    reboot(ms_dirs)
    lock = try_lock(ms_dirs.state / "restore.lock")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [MULTISERVER, "restore", "--json"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        for proc in procs:
            assert proc.stderr is not None
            with trio.fail_after(COMMAND_TIMEOUT):
                line = await trio.to_thread.run_sync(proc.stderr.readline)
            assert b"waiting for another restore" in line, line
        os.close(lock)
        lock = -1
        results = []
        for proc in procs:
            with trio.fail_after(COMMAND_TIMEOUT):
                out, err = await trio.to_thread.run_sync(proc.communicate)
            results.append((proc.returncode, json.loads(out), err.decode(errors="replace")))
    finally:
        if lock >= 0:
            os.close(lock)
        for proc in procs:
            await kill_and_reap(proc)
    for status, report, stderr in results:
        assert status == 0, (report, stderr)
    first, second = (
        {s["name"]: s["outcome"] for s in report["sessions"]} for _, report, _ in results
    )
    assert first == second == {name: "relaunched" for name in NAMES}, results
    assert sum("another restore ran meanwhile" in err for _, _, err in results) == 1, results
    await assert_whole(ms_dirs)


async def test_a_restore_waits_for_another_within_its_own_timeout(ms_dirs: MsDirs) -> None:
    """Another restore that does not finish (the lock held, here by the
    test): the waiting one gives up at its --timeout, not a minute later,
    in one line that says the other brings the sessions back."""
    await make_sessions(ms_dirs)
    lock = try_lock(ms_dirs.state / "restore.lock")
    try:
        with trio.fail_after(COMMAND_TIMEOUT):
            done = await ms_run("restore", "--timeout", "1")
    finally:
        os.close(lock)
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1, lines
    assert lines[0].startswith("multiserver: waiting for another restore")
    assert lines[1:] == [
        "multiserver: another multiserver restore is still running after 1 s (--timeout);"
        " it brings the sessions back (see: multiserver ls); not restoring"
    ]


KILL_POINTS = 30


async def kill_and_reap(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    await wait_until(lambda: proc.poll() is not None, 10, "the restore to die")


@pytest.mark.slow
async def test_restore_sigkilled_at_random_points(ms_dirs: MsDirs) -> None:
    """Reboot, then SIGKILL ``multiserver restore`` after a random delay
    (from about its Python start-up to the time a whole restore takes),
    then restore again: every time, that restore exits 0 with every
    session once. An ``attached`` outcome of that restore is a kill that
    fell after a relaunch and before its record."""
    await make_sessions(ms_dirs)
    reboot(ms_dirs)
    # Kill points before the command has started Python are wasted: from
    # what --help takes to what a whole restore takes.
    t0 = time.monotonic()
    await ms_ok("--help")
    startup = time.monotonic() - t0
    t0 = time.monotonic()
    await restore_ok()
    whole = time.monotonic() - t0
    seed = int(time.time())
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    killed_before_end = 0
    for _ in range(KILL_POINTS):
        reboot(ms_dirs)
        delay = rng.uniform(0.8 * startup, whole)
        proc = subprocess.Popen(
            [MULTISERVER, "restore", "--json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await trio.sleep(delay)  # the kill point itself, not a wait for readiness
            if proc.poll() is None:
                killed_before_end += 1
        finally:
            await kill_and_reap(proc)
        report = await restore_ok()
        await assert_whole(ms_dirs)
        for s in report["sessions"]:
            outcomes[s["outcome"]] = outcomes.get(s["outcome"], 0) + 1
    assert killed_before_end >= KILL_POINTS // 2, killed_before_end
    record(
        "restore_sigkilled",
        seed=seed,
        points=KILL_POINTS,
        killed_before_it_ended=killed_before_end,
        startup_seconds=round(startup, 2),
        whole_restore_seconds=round(whole, 2),
        next_restore_outcomes=outcomes,
    )
