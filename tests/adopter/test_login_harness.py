"""The login procedure (``adopter.open_login``) against simulated daemons
under trio's autojump clock: its events, step by step and in order; the
restore lock (waited for, given up, held until the block is left); the
report it leaves and the one it reads; what is given back when it is
left early. The store is the real one, in the test's state dir.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from adopter import (
    SWEEP_BOUND,
    Arrived,
    ClaimsReleased,
    Done,
    LateAdopted,
    LockTaken,
    LockTimedOut,
    LoginEvent,
    LoginReport,
    ReportNotKept,
    Restoring,
    SessionRestored,
    SessionRow,
    StoreUnavailable,
    StoreWarning,
    Swept,
    WaitingForLock,
    Warned,
    open_login,
)
from adopter._login import AFTER_WAIT_SHARE
from multiserver.internal import LockBusy, ensure_private_dir
from multiserver.testing import Behavior, Claim, Hello, Launch
from restore import (
    ATTACH_SHARE,
    RESTORE_REPORT,
    ArrangementStore,
    StoreError,
    keep_restore_report,
    take_restore_lock,
)
from tests.adopter.conftest import Dirs, arranged, leaf_of
from tests.conftest import MsDirs
from tests.sims import no_fd_leak, serving, sim_at
from tests.timing import HARNESS_TIMEOUT, connections_settle, within

pytestmark = pytest.mark.usefixtures("no_real_daemons")

TIMEOUT = HARNESS_TIMEOUT  # the login's deadline: no default's
# The whole login at most: its deadline, then the sweep's bound.
LOGIN_BOUND = TIMEOUT + SWEEP_BOUND


async def login(**kw: Any) -> list[LoginEvent]:
    """Every event of one login (``open_login(timeout=TIMEOUT, **kw)``),
    read to the last, under the outer bound."""
    seen: list[LoginEvent] = []
    with within("the login", LOGIN_BOUND):
        async with open_login(timeout=TIMEOUT, **kw) as events:
            async for event in events:
                seen.append(event)
    return seen


def steps(events: Sequence[LoginEvent]) -> list[str]:
    """The events' kinds in order, but for ClaimsReleased and Swept, which come
    in either order (the claims go back while the sweep runs): those two
    in name order."""
    names = [type(e).__name__ for e in events]
    both = sorted(n for n in names if n in ("ClaimsReleased", "Swept"))
    return [both.pop(0) if n in ("ClaimsReleased", "Swept") else n for n in names]


def save(*leaves: Any) -> None:
    with ArrangementStore.open() as store:
        store.save(arranged(leaves))


def kept_report(ms_dirs: MsDirs) -> Any:
    return json.loads((ms_dirs.state / RESTORE_REPORT).read_text())


# --- the steps ---------------------------------------------------------------------


async def test_nothing_saved(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """No session and no daemon: the lock, what is about to be restored,
    the claims given back, the sweep, and the report, left for a restore
    that waits."""
    seen = await login()
    assert steps(seen) == ["LockTaken", "Restoring", "ClaimsReleased", "Swept", "Done"]
    assert seen[:2] == [LockTaken(waited=False), Restoring(0, 0, 0, 0, TIMEOUT)]
    done = seen[-1]
    assert isinstance(done, Done) and done.ran_here
    assert (done.report.sessions, done.report.sweep, done.report.ok) == ((), (), True)
    assert kept_report(ms_dirs) == done.report.as_json()


async def test_a_session_attached_and_an_orphan_adopted(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """A saved session whose child runs: its daemon's answer, then its
    outcome; the child no session owns is adopted by the sweep; every claim
    goes back. The report holds the session and the sweep's adoption."""
    with no_fd_leak():
        sim = sim_at(1)
        edit = sim.add_child(["vim"], name="edit")
        sim.add_child(["top"], name="stray")
        save(leaf_of(sim, edit, dirs.root))
        async with serving(sim):
            seen = await login()
            await connections_settle(sim, 0)
            assert not any(c.held for c in sim.children)
    assert steps(seen) == [
        "LockTaken",
        "Restoring",
        "Arrived",
        "SessionRestored",
        "ClaimsReleased",
        "Swept",
        "Done",
    ]
    assert seen[1] == Restoring(1, 1, 0, 0, TIMEOUT)
    assert seen[2] == Arrived(str(sim.socket_path), 1, 0.0, reached=True, error=None)
    (restored,) = [e for e in seen if isinstance(e, SessionRestored)]
    assert (restored.row.name, restored.row.outcome) == ("edit", "attached")
    (swept,) = [e for e in seen if isinstance(e, Swept)]
    assert [(r.action, r.name) for r in swept.rows] == [("adopted", "stray")]
    done = seen[-1]
    assert isinstance(done, Done)
    assert done.report.sessions == (restored.row,)
    assert done.report.sweep == swept.rows
    assert LoginReport.from_json(kept_report(ms_dirs)) == done.report


async def test_a_daemon_not_running_is_said_and_its_session_relaunched(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """A saved session whose daemon is gone: the daemon is said not reached,
    with why, and the session is started again on the default daemon."""
    gone, relauncher = sim_at(2), sim_at(1)
    save(leaf_of(gone, gone.add_child(["make"], name="build"), dirs.root))
    gone.close()  # it never serves
    async with serving(relauncher):
        seen = await login()
    (arrived,) = [e for e in seen if isinstance(e, Arrived)]
    assert (arrived.reached, arrived.error) == (False, "its daemon is not running")
    (restored,) = [e for e in seen if isinstance(e, SessionRestored)]
    assert restored.row.outcome == "relaunched"
    assert restored.row.daemon == str(relauncher.socket_path)
    assert [c.name for c in relauncher.children] == ["build"]


async def test_a_late_arrival_is_adopted_once_every_session_is_built(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """A daemon answers after the phase, while its session is being started
    again elsewhere: its child waits until every session is built, then is
    adopted (as the late original of the session), before the sweep."""
    attach_by = ATTACH_SHARE * TIMEOUT
    slow = sim_at(2, behavior=Behavior.on(Claim, delay=attach_by + 0.5))
    relauncher = sim_at(1, behavior=Behavior.on(Launch, delay=1.0))
    save(leaf_of(slow, slow.add_child(["vim"], name="edit"), dirs.root))
    async with serving(relauncher, slow):
        seen = await login()
    assert steps(seen) == [
        "LockTaken",
        "Restoring",
        "SessionRestored",
        "LateAdopted",
        "ClaimsReleased",
        "Swept",
        "Done",
    ]
    (restored,) = [e for e in seen if isinstance(e, SessionRestored)]
    assert restored.row.outcome == "timed-out"
    (late,) = [e for e in seen if isinstance(e, LateAdopted)]
    assert [(r.state, r.action, r.name) for r in late.rows] == [("late", "adopted", "edit-late")]
    # The sweep left the daemon that answered too late to the next one.
    done = seen[-1]
    assert isinstance(done, Done)
    assert done.report.sweep[: len(late.rows)] == late.rows
    assert [(r.socket, r.action) for r in done.report.sweep[len(late.rows) :]] == [
        (str(slow.socket_path), "retry")
    ]


# --- the store ---------------------------------------------------------------------


async def test_store_warnings_and_the_callers_lines_come_in_their_place(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """A damaged store is moved aside (said), then ``before_restore`` runs
    with the store open, its lines said, before the restore."""
    ensure_private_dir(ms_dirs.state)
    (ms_dirs.state / "arrangement.sqlite3").write_bytes(b"not sqlite" * 100)
    given: list[ArrangementStore] = []

    def before_restore(store: ArrangementStore) -> list[str]:
        given.append(store)
        return ["pending close of a: done"]

    seen = await login(before_restore=before_restore)
    assert steps(seen)[:4] == ["LockTaken", "StoreWarning", "Warned", "Restoring"]
    warning = seen[1]
    assert isinstance(warning, StoreWarning) and "moved it to" in warning.text
    assert seen[2] == Warned("pending close of a: done")
    assert len(given) == 1 and isinstance(given[0], ArrangementStore)


async def test_a_store_that_cannot_be_used_ends_it(
    dirs: Dirs,
    ms_dirs: MsDirs,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Nothing restored, no report left: the error, as its type, last."""
    error = StoreError("disk I/O error")

    def unusable(*_args: Any, **_kw: Any) -> Any:
        raise error

    monkeypatch.setattr(ArrangementStore, "open_or_quarantine", unusable)
    seen = await login()
    assert seen == [LockTaken(waited=False), StoreUnavailable(error)]
    assert not (ms_dirs.state / RESTORE_REPORT).exists()


async def test_a_report_that_cannot_be_kept_is_said(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    (ensure_private_dir(ms_dirs.state) / RESTORE_REPORT).mkdir()
    seen = await login()
    assert steps(seen)[-2:] == ["ReportNotKept", "Done"]
    not_kept = seen[-2]
    assert isinstance(not_kept, ReportNotKept) and isinstance(not_kept.error, OSError)


# --- the restore lock ---------------------------------------------------------------


async def test_a_login_waits_for_the_lock_within_its_timeout(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """Another restore holds the lock throughout: said once, with its pid,
    then given up at exactly the timeout; the store is not opened."""
    held = take_restore_lock(ensure_private_dir(ms_dirs.state))
    try:
        start = trio.current_time()
        seen = await login()
        assert trio.current_time() - start == pytest.approx(TIMEOUT)
    finally:
        os.close(held)
    me = os.getpid()
    assert seen == [WaitingForLock(holder=me), LockTimedOut(holder=me, timeout=TIMEOUT)]
    assert not (ms_dirs.state / "arrangement.sqlite3").exists()


async def test_a_login_that_waited_gives_the_other_restores_report(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """The other restore ran while this one waited and left its report:
    that is this login's report, and nothing is restored a second time."""
    state = ensure_private_dir(ms_dirs.state)
    held = take_restore_lock(state)
    row = SessionRow("edit", "relaunched", "/run/d.socket", "new one started", None, 0.25)
    theirs = LoginReport(sessions=(row,), sweep=(), seconds=0.5, ok=True)
    try:
        with within("the login", LOGIN_BOUND):
            async with open_login(timeout=TIMEOUT) as events:
                first = await events.receive()
                assert first == WaitingForLock(holder=os.getpid())
                keep_restore_report(state, theirs.as_json())
                os.close(held)
                held = -1
                seen = [first, *[e async for e in events]]
    finally:
        if held >= 0:
            os.close(held)
    assert seen[1:] == [LockTaken(waited=True), Done(theirs, ran_here=False)]
    assert not (state / "arrangement.sqlite3").exists()


@pytest.mark.parametrize("free_at", [0.3, 0.95])
async def test_a_login_that_waited_in_vain_restores_with_what_is_left(
    dirs: Dirs, ms_dirs: MsDirs, free_at: float, autojump_clock: trio.testing.MockClock
) -> None:
    """The other restore let go without a report (it crashed): this one
    restores, with what is left of its timeout, and at least a share of it."""
    held = take_restore_lock(ensure_private_dir(ms_dirs.state))
    start = trio.current_time()

    async def let_go() -> None:
        await trio.sleep(free_at * TIMEOUT + 0.01)
        os.close(held)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(let_go)
        seen = await login()
    restoring = seen[2]
    assert seen[:2] == [WaitingForLock(os.getpid()), LockTaken(waited=True)]
    assert isinstance(restoring, Restoring)
    # Taken at the first try after it was let go (every LOCK_POLL).
    left = TIMEOUT - (free_at * TIMEOUT + 0.01)
    expected = max(left, AFTER_WAIT_SHARE * TIMEOUT)
    assert restoring.timeout == pytest.approx(expected, abs=0.05)
    assert isinstance(seen[-1], Done) and seen[-1].ran_here
    assert trio.current_time() - start <= LOGIN_BOUND


async def test_the_lock_is_held_until_the_block_is_left(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """After the last event the block is still the restore's: another
    restore waits until it is left."""
    async with open_login(timeout=TIMEOUT) as events:
        seen = [e async for e in events]
        assert isinstance(seen[-1], Done)
        with pytest.raises(LockBusy):
            take_restore_lock(ms_dirs.state)
    os.close(take_restore_lock(ms_dirs.state))


# --- leaving early -----------------------------------------------------------------


@pytest.mark.parametrize(
    "leave_after",
    [Restoring, SessionRestored, ClaimsReleased],
    ids=["in the phase", "in the build", "in the sweep"],
)
async def test_leaving_the_block_early_gives_everything_back(
    dirs: Dirs,
    ms_dirs: MsDirs,
    leave_after: type[LoginEvent],
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Leaving mid-way cancels the login where it is: in the phase (a
    daemon slow to answer), in the build (a slow relaunch: the first
    session is built), in the sweep (a daemon that never answers it, the
    claims given back). Every claim goes back, every fd and connection is
    closed, the lock is let go, and no report is left (a restore that
    waited restores itself)."""
    with no_fd_leak():
        relauncher = sim_at(1, behavior=Behavior.on(Launch, delay=1.0))
        slow = sim_at(2, behavior=Behavior.on(Claim, delay=0.5))
        mute = sim_at(3, behavior=Behavior.on(Hello, hang=True))
        gone = sim_at(4)
        kids = [slow.add_child(["sh"], name=f"s{i}") for i in range(3)]
        lost = gone.add_child(["make"], name="build")
        save(*[leaf_of(slow, k, dirs.root) for k in kids], leaf_of(gone, lost, dirs.root))
        gone.close()  # it never serves
        async with serving(relauncher, slow, mute):
            start = trio.current_time()
            with within("the login", LOGIN_BOUND):
                async with open_login(timeout=TIMEOUT) as events:
                    async for event in events:
                        if isinstance(event, leave_after):
                            break
            left_at = trio.current_time() - start
            for sim in (relauncher, slow, mute):
                await connections_settle(sim, 0)
            assert not any(k.held for k in kids)
    assert (
        left_at < {Restoring: 0.5, SessionRestored: 1.5, ClaimsReleased: SWEEP_BOUND}[leave_after]
    )
    os.close(take_restore_lock(ms_dirs.state))
    assert not (ms_dirs.state / RESTORE_REPORT).exists()


async def test_an_error_in_the_block_comes_out_as_it_came(
    dirs: Dirs, ms_dirs: MsDirs, autojump_clock: trio.testing.MockClock
) -> None:
    """Not in an exception group: the login's nursery is its own."""
    with pytest.raises(KeyError, match="mine"):
        async with open_login(timeout=TIMEOUT) as events:
            await events.receive()
            raise KeyError("mine")
    os.close(take_restore_lock(ms_dirs.state))


# --- the report ---------------------------------------------------------------------


def test_the_report_reads_back_and_tolerates_what_it_does_not_know() -> None:
    row = SessionRow("a", "ended", "", "session ended (exited with code 3)", 3, 0.0)
    report = LoginReport(sessions=(row,), sweep=(), seconds=1.25, ok=True, saved=False)
    data = json.loads(json.dumps(report.as_json()))
    assert list(data) == ["sessions", "sweep", "seconds", "ok", "saved"]
    assert LoginReport.from_json(data) == report
    assert LoginReport.from_json({**data, "opened": ["x"], "newer": 1}) == report
    older = {k: v for k, v in data.items() if k != "saved"}  # before "saved" was kept
    assert LoginReport.from_json(older) == LoginReport((row,), (), 1.25, True, True)
    assert LoginReport.from_json({"sessions": [{"name": "a"}]}) is None
    assert LoginReport.from_json([]) is None
