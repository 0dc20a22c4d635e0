"""restore_arrangement against simulated daemons (multiserver.testing), under
trio's autojump clock: deadlines are exact in virtual time and a test takes
milliseconds of wall time. No real process is started: ``start_daemon`` is
replaced so that a relaunch finding no sim at its socket fails instead.

Relaunches go to daemon number N of the test's runtime dir (``ms_dirs`` points
MULTISERVER_RUNTIME_DIR at a short private dir), where a test binds a
SimDaemon at ``DaemonPaths.for_number(N).socket``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from multiserver import open_client
from multiserver.internal import screen_reset
from multiserver.testing import Behavior, Claim, Collect, Hello, Launch, SimChild, SimDaemon
from restore import Arrangement, ArrangementStore, RestorationRef, SessionLeaf, Tab, Window
from restore._build import RestoredSession
from restore._partial import DaemonAttachment
from restore._plan import ATTACH_SHARE, RELAUNCH_MARKER, Options, relaunch_notice
from restore._restore import RestoreResult, release_claims, restore_arrangement
from tests.conftest import MsDirs
from tests.sims import no_fd_leak, refuse_real_daemons, serving, sim_at
from tests.timing import HARNESS_TIMEOUT, by_deadline, connections_settle, within

TIMEOUT = HARNESS_TIMEOUT  # the restore's one deadline, from its start
ATTACH_BY = ATTACH_SHARE * TIMEOUT  # when its phase stops waiting for daemons
# How the sessions' details say them.
WITHIN_ATTACH_BY = f"within {ATTACH_BY:g} s"
DEADLINE_PASSED = f"the restore deadline ({TIMEOUT:g} s)"


# --- helpers -----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_real_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_real_daemons(monkeypatch)


@pytest.fixture(autouse=True)
def every_fd_closed() -> Iterator[None]:
    """Whatever a test opened (sims, clients, claimed fds) is closed when it
    ends: checked after its trio run, so trio's own fds are gone too."""
    with no_fd_leak():
        yield


@pytest.fixture
def workdir(ms_dirs: MsDirs) -> Path:
    """An existing directory for sessions' saved cwd."""
    d = ms_dirs.root / "work"
    d.mkdir()
    return d


def close_fd(fd: int | None) -> None:
    if fd is not None:
        trio.lowlevel.notify_closing(fd)
        os.close(fd)


async def read_fd(fd: int) -> bytes:
    await trio.lowlevel.wait_readable(fd)
    return os.read(fd, 65536)


async def check_fd_reaches(fd: int | None, child: SimChild) -> None:
    """``fd`` is a working master of ``child``: output both ways."""
    assert fd is not None
    child.write_output(f"out of {child.name}\r\n".encode())
    assert await read_fd(fd) == f"out of {child.name}\r\n".encode()
    os.write(fd, b"typed\r")
    assert await child.read_input() == b"typed\r"


def leaf_of(sim: SimDaemon, child: SimChild, cwd: Path, **kw: Any) -> SessionLeaf:
    ref = RestorationRef(str(sim.socket_path), sim.instance_id, child.id, child.pid)
    return SessionLeaf(child.name, list(child.argv), str(cwd), ref=ref, **kw)


def ref_of(sim: SimDaemon, child: SimChild) -> RestorationRef:
    return RestorationRef(str(sim.socket_path), sim.instance_id, child.id, child.pid)


def arranged(leaves: Sequence[SessionLeaf]) -> Arrangement:
    return Arrangement([Window("main", [Tab(leaf) for leaf in leaves])])


def by_name(result: RestoreResult) -> dict[str, RestoredSession]:
    return {s.leaf.name: s for s in result.sessions}


def launches(sim: SimDaemon) -> list[Launch]:
    return [m for m in sim.received if isinstance(m, Launch)]


async def restore(
    arrangement: Arrangement,
    *,
    nursery: trio.Nursery,
    timeout: float | None = None,
    deadline: float | None = None,
    **kw: Any,
) -> RestoreResult:
    """``restore_arrangement`` under the outer bound (``by_deadline``): a
    restore that does not return by its deadline fails the test, saying so,
    where it would hang it."""
    if timeout is None:
        assert deadline is not None, "a harness test gives the restore its deadline"
        seconds = deadline - trio.current_time()
    else:
        seconds = timeout
    return await by_deadline(
        "restore_arrangement",
        seconds,
        restore_arrangement(arrangement, nursery=nursery, timeout=timeout, deadline=deadline, **kw),
    )


# --- ten daemons, one wedged ---------------------------------------------------------


@pytest.mark.parametrize("wedge", [Hello, Claim], ids=["on-hello", "on-claim"])
async def test_ten_daemons_one_wedged_resolves_at_exactly_the_deadline(
    ms_dirs: MsDirs, workdir: Path, wedge: type, autojump_clock: trio.testing.MockClock
) -> None:
    with no_fd_leak():
        relauncher = sim_at(1)
        sims = [SimDaemon(ms_dirs.runtime / f"sim-{i}.sock") for i in range(10)]
        wedged = sims[3]
        wedged.behavior = Behavior.on(wedge, hang=True)
        children = {
            f"d{i}-{j}": sim.add_child(["sh"], name=f"d{i}-{j}")
            for i, sim in enumerate(sims)
            for j in range(2)
        }
        owner = {name: sims[int(name[1])] for name in children}
        leaves = [leaf_of(owner[n], c, workdir) for n, c in children.items()]
        async with serving(relauncher, *sims), trio.open_nursery() as nursery:
            t0 = trio.current_time()
            result = await restore(arranged(leaves), nursery=nursery, timeout=TIMEOUT)
            # The relaunches took no virtual time, within what the phase left.
            assert trio.current_time() - t0 == ATTACH_BY
            assert result.phase.elapsed == ATTACH_BY
            assert [t.socket for t in result.phase.timed_out] == [str(wedged.socket_path)]
            assert len(result.phase.attachments) == 9

            sessions = by_name(result)
            assert list(sessions) == [leaf.name for leaf in leaves]
            for name, s in sessions.items():
                if owner[name] is wedged:
                    assert s.outcome == "timed-out", s
                    assert s.daemon == str(relauncher.socket_path)
                    assert s.elapsed == ATTACH_BY
                    continue
                assert s.outcome == "attached", s
                assert s.daemon == str(owner[name].socket_path)
                assert s.elapsed == 0.0  # its daemon answered at once
                await check_fd_reaches(s.master, children[name])

            # The wedged daemon's sessions started again on the live one.
            assert launches(wedged) == []
            relaunched = {c.name: c for c in relauncher.children}
            assert sorted(relaunched) == ["d3-0", "d3-1"]
            for name, c in relaunched.items():
                assert c.cwd == str(workdir) and c.held
                await check_fd_reaches(sessions[name].master, c)
            assert result.ok

            await release_claims(result)
            nursery.cancel_scope.cancel()
        for sim in sims:
            assert not any(c.held for c in sim.children)


# --- every outcome -----------------------------------------------------------------------


async def test_every_outcome_in_one_restore(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    relauncher = sim_at(1, missing_commands=["no-such-command"])
    a = SimDaemon(ms_dirs.runtime / "a.sock", instance_id="a-now")
    w = SimDaemon(ms_dirs.runtime / "w.sock", behavior=Behavior.on(Claim, hang=True))
    running = a.add_child(["vim"], name="att")
    running.write_output(b"buffered while nobody held it\r\n")
    done = a.add_child(["make"], name="done")
    done.write_output(b"make: *** [all] Error 3\r\n")
    done.exit(3)
    busy = a.add_child(["sh"], name="busy")
    old = a.add_child(["sh"], name="moved")
    slow = w.add_child(["top"], name="slow")

    gone_ref = RestorationRef(str(ms_dirs.runtime / "gone.sock"), "x", 1, 42)
    leaves = [
        leaf_of(a, running, workdir),
        leaf_of(a, done, workdir),
        leaf_of(a, busy, workdir),
        attrs.evolve(
            leaf_of(a, old, workdir, scrollback=b"old screen"),
            ref=RestorationRef(str(a.socket_path), "a-before", old.id, old.pid),
        ),
        SessionLeaf(
            "unknown", ["sh"], str(workdir), ref=RestorationRef(str(a.socket_path), "a-now", 99, 7)
        ),
        SessionLeaf("gone", ["sh"], str(workdir), ref=gone_ref, scrollback=b"$ echo hi\r\nhi\r\n"),
        SessionLeaf("fresh", ["sh"], str(workdir)),
        leaf_of(w, slow, workdir),
        SessionLeaf("broken", ["no-such-command"], str(workdir), ref=gone_ref),
    ]
    seen: list[str] = []
    async with serving(relauncher, a, w), trio.open_nursery() as nursery:
        async with open_client(a.socket_path) as other:
            [held] = await other.claim([busy.id])
            close_fd(held.master)
            result = await restore(
                arranged(leaves),
                nursery=nursery,
                timeout=TIMEOUT,
                progress=lambda s: seen.append(s.leaf.name),
            )
        s = by_name(result)
        # Live progress, one per leaf, in the plan's order: leaves without a
        # daemon first, then daemon by daemon (as first named in the arrangement).
        order = ["fresh", "att", "done", "busy", "moved", "unknown", "gone", "broken", "slow"]
        assert seen == order
        assert [x.leaf.name for x in result.sessions] == order
        assert {x.outcome for x in result.sessions} == {
            "attached",
            "ended",
            "relaunched",
            "timed-out",
            "held",
            "failed",
        }
        assert not result.ok

        assert s["att"].outcome == "attached"
        assert s["att"].replay == b"buffered while nobody held it\r\n"
        assert s["att"].client is not None
        await check_fd_reaches(s["att"].master, running)

        assert (s["done"].outcome, s["done"].exit_code) == ("ended", 3)
        assert s["done"].master is None and "(exited with code 3)" in s["done"].detail
        assert "kept until it is attached" in s["done"].detail
        assert s["done"].replay == b"make: *** [all] Error 3\r\n"  # what nobody saw yet
        assert done.id in [c.id for c in a.children]  # left for a person: not collected

        assert s["busy"].outcome == "held" and "held by another client" in s["busy"].detail
        assert s["busy"].master is None

        reasons = {
            "moved": "another instance",
            "unknown": "unknown to the daemon",
            "gone": "its daemon is not running",
            "fresh": "never started",
        }
        fresh = {c.name: c for c in relauncher.children}
        for name, why in reasons.items():
            x = s[name]
            assert x.outcome == "relaunched" and why in x.detail, x
            assert x.daemon == str(relauncher.socket_path)
            c = fresh[name]
            assert c.cwd == str(workdir) and c.argv == x.leaf.argv
            assert x.leaf.ref == RestorationRef(
                str(relauncher.socket_path), relauncher.instance_id, c.id, c.pid
            )
            # The notice gives the reason alone: its marker line already
            # says that a new session was started.
            reason = x.detail.removesuffix("; session expired, new one started")
            assert reason != x.detail and why in reason
            assert x.replay == relaunch_notice(leaves[[y.name for y in leaves].index(name)], reason)
            await check_fd_reaches(x.master, c)
        shown = b"$ echo hi\r\nhi\r\n"
        assert s["gone"].replay.startswith(shown + screen_reset(shown) + RELAUNCH_MARKER.encode())
        assert old.running and not old.held  # another instance's child is left alone

        assert s["slow"].outcome == "timed-out" and WITHIN_ATTACH_BY in s["slow"].detail
        await check_fd_reaches(s["slow"].master, fresh["slow"])

        assert s["broken"].outcome == "failed"
        assert "relaunch failed: command not found: no-such-command" in s["broken"].detail
        assert s["broken"].master is None

        await release_claims(result)
        nursery.cancel_scope.cancel()


async def test_no_relaunch_reports_instead_of_starting(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    relauncher = sim_at(1)
    a = SimDaemon(ms_dirs.runtime / "a.sock")
    w = SimDaemon(ms_dirs.runtime / "w.sock", behavior=Behavior.on(Hello, hang=True))
    slow = w.add_child(name="slow")
    leaves = [
        SessionLeaf(
            "unknown", ["sh"], "/", ref=RestorationRef(str(a.socket_path), a.instance_id, 5, 5)
        ),
        SessionLeaf("gone", ["sh"], "/", ref=RestorationRef(str(workdir / "x.sock"), "i", 1, 1)),
        SessionLeaf("fresh", ["sh"], "/"),
        leaf_of(w, slow, workdir),
    ]
    with no_fd_leak():
        async with serving(relauncher, a, w), trio.open_nursery() as nursery:
            result = await restore(
                arranged(leaves), nursery=nursery, timeout=TIMEOUT, options=Options(relaunch=False)
            )
            nursery.cancel_scope.cancel()
        assert [(x.leaf.name, x.outcome) for x in result.sessions] == [
            ("fresh", "expired"),
            ("unknown", "expired"),
            ("gone", "expired"),
            ("slow", "timed-out"),
        ]
        saved = {leaf.name: leaf for leaf in leaves}
        for x in result.sessions:
            assert x.detail.endswith("; --no-relaunch: nothing started")
            assert x.master is None and x.client is None
            assert x.leaf == saved[x.leaf.name]  # no new ref: nothing started
        assert result.ok  # reported, not failed
        assert relauncher.received == [] and relauncher.children == []


async def test_relaunch_ended_starts_an_exited_session_again(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    relauncher = sim_at(1)
    a = SimDaemon(ms_dirs.runtime / "a.sock")
    done = a.add_child(["make"], name="build")
    done.exit(0)
    async with serving(relauncher, a), trio.open_nursery() as nursery:
        result = await restore(
            arranged([leaf_of(a, done, workdir)]),
            nursery=nursery,
            timeout=TIMEOUT,
            options=Options(relaunch_ended=True),
        )
        [s] = result.sessions
        assert s.outcome == "relaunched" and "had ended (exited with code 0)" in s.detail
        assert s.exit_code == 0
        assert a.children == []  # the exited one was collected
        [again] = relauncher.children
        assert again.argv == ["make"] and again.cwd == str(workdir)
        await check_fd_reaches(s.master, again)
        await release_claims(result)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("default_number", [1, 4])
async def test_relaunch_goes_to_a_live_daemon_never_the_wedged_one(
    ms_dirs: MsDirs,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    default_number: int,
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The default daemon is the wedged one: the next number takes the relaunches.
    monkeypatch.setenv("MULTISERVER_DAEMON", str(default_number))
    wedged = sim_at(default_number, behavior=Behavior.on(Claim, hang=True))
    live = sim_at(default_number + 1)
    stuck = wedged.add_child(name="stuck")
    gone = SessionLeaf(
        "gone", ["sh"], str(workdir), ref=RestorationRef("/nonexistent.sock", "i", 1, 1)
    )
    async with serving(wedged, live), trio.open_nursery() as nursery:
        result = await restore(
            arranged([leaf_of(wedged, stuck, workdir), gone]), nursery=nursery, timeout=TIMEOUT
        )
        assert [(s.outcome, s.daemon) for s in result.sessions] == [
            ("timed-out", str(live.socket_path)),
            ("relaunched", str(live.socket_path)),
        ]
        assert launches(wedged) == []
        assert sorted(c.name for c in live.children) == ["gone", "stuck"]
        await release_claims(result)
        nursery.cancel_scope.cancel()


async def test_relaunch_fails_when_no_daemon_can_be_started(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # No sim at the default socket, and (no_real_daemons) none can start.
    leaves = [SessionLeaf(f"s{i}", ["sh"], str(workdir)) for i in range(3)]
    with no_fd_leak():
        async with trio.open_nursery() as nursery:
            result = await restore(arranged(leaves), nursery=nursery, timeout=TIMEOUT)
    assert [s.outcome for s in result.sessions] == ["failed"] * 3
    for s in result.sessions:
        assert "relaunch failed: daemon failed to start" in s.detail
    assert not result.ok


@pytest.mark.parametrize(
    "behavior",
    [
        Behavior.on(Hello, refuse=True),
        Behavior.on(Hello, garbage=True),
        Behavior.on(Hello, close=True),
        Behavior.on(Claim, crash_mid_frame=True),
        Behavior.on(Claim, garbage=True),
        Behavior.on(Claim, wrong_version=True),
    ],
    ids=[
        "hello-refused",
        "hello-garbage",
        "hello-closed",
        "claim-crash",
        "claim-garbage",
        "claim-version",
    ],
)
async def test_a_broken_daemon_gives_each_session_an_outcome(
    ms_dirs: MsDirs, workdir: Path, behavior: Behavior, autojump_clock: trio.testing.MockClock
) -> None:
    with no_fd_leak():
        relauncher = sim_at(1)
        broken = SimDaemon(ms_dirs.runtime / "b.sock", behavior=behavior)
        kids = [broken.add_child(name=f"k{i}") for i in range(2)]
        async with serving(relauncher, broken), trio.open_nursery() as nursery:
            result = await restore(
                arranged([leaf_of(broken, k, workdir) for k in kids]),
                nursery=nursery,
                timeout=TIMEOUT,
            )
            assert trio.current_time() == 0.0  # an error is an answer: no waiting
            assert [s.outcome for s in result.sessions] == ["relaunched", "relaunched"]
            assert result.phase.attachments[str(broken.socket_path)].error
            for s in result.sessions:
                assert "daemon" in s.detail and s.daemon == str(relauncher.socket_path)
            await release_claims(result)
            nursery.cancel_scope.cancel()


# --- exactly once -----------------------------------------------------------------------------


@pytest.mark.parametrize("others", [0, 4])
@pytest.mark.parametrize(
    "delay", [ATTACH_BY - 1e-3, ATTACH_BY, ATTACH_BY + 1e-3], ids=["before", "at", "after"]
)
async def test_an_answer_at_the_deadline_is_delivered_exactly_once(
    ms_dirs: MsDirs,
    workdir: Path,
    delay: float,
    others: int,
    autojump_clock: trio.testing.MockClock,
) -> None:
    edge = SimDaemon(ms_dirs.runtime / "edge.sock", behavior=Behavior.on(Claim, delay=delay))
    kid = edge.add_child(name="edge")
    quick = [SimDaemon(ms_dirs.runtime / f"q{i}.sock") for i in range(others)]
    leaves = [leaf_of(edge, kid, workdir)] + [
        leaf_of(q, q.add_child(name=f"q{i}"), workdir) for i, q in enumerate(quick)
    ]
    late: list[DaemonAttachment] = []
    got_late = trio.Event()

    def on_late(att: DaemonAttachment) -> None:
        late.append(att)
        got_late.set()

    with no_fd_leak():
        async with serving(edge, *quick), trio.open_nursery() as nursery:
            t0 = trio.current_time()
            result = await restore(
                arranged(leaves),
                nursery=nursery,
                timeout=TIMEOUT,
                options=Options(relaunch=False),
                on_late=on_late,
            )
            assert trio.current_time() - t0 == min(delay, ATTACH_BY)
            with trio.move_on_after(2 * TIMEOUT):  # long after any answer
                await got_late.wait()
            await trio.sleep(TIMEOUT)
            in_phase = str(edge.socket_path) in result.phase.attachments
            # Never both, never neither.
            assert int(in_phase) + len(late) == 1, (in_phase, late)
            if delay < ATTACH_BY:
                assert in_phase
            if delay > ATTACH_BY:
                assert late
            [s] = [x for x in result.sessions if x.leaf.name == "edge"]
            if in_phase:
                assert s.outcome == "attached"
                await check_fd_reaches(s.master, kid)
            else:
                assert s.outcome == "timed-out" and s.master is None
                assert str(edge.socket_path) not in result.phase.attachments
                await check_fd_reaches(late[0].claimed["edge"].master, kid)
                late[0].close()
            assert [x.outcome for x in result.sessions[1:]] == ["attached"] * others
            await release_claims(result)
            nursery.cancel_scope.cancel()


async def test_a_late_arrival_goes_to_on_late_once_never_into_the_sessions(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    relauncher = sim_at(1)
    slow = SimDaemon(ms_dirs.runtime / "slow.sock", behavior=Behavior.on(Claim, delay=15))
    kids = [slow.add_child(name=f"late{i}") for i in range(2)]
    kids[0].write_output(b"kept for the adopter\r\n")
    late: list[DaemonAttachment] = []
    with no_fd_leak():
        async with serving(relauncher, slow), trio.open_nursery() as nursery:
            result = await restore(
                arranged([leaf_of(slow, k, workdir) for k in kids]),
                nursery=nursery,
                timeout=TIMEOUT,
                on_late=late.append,
            )
            before = [(s.outcome, s.master, s.daemon, s.leaf) for s in result.sessions]
            assert [s.outcome for s in result.sessions] == ["timed-out", "timed-out"]
            assert late == []
            await trio.sleep(16 - ATTACH_BY)  # the claim was answered at t = 15
            [att] = late
            assert att.elapsed == 15 and att.error is None
            assert sorted(att.claimed) == ["late0", "late1"]
            assert att.claimed["late0"].output == b"kept for the adopter\r\n"
            for k in kids:
                assert k.held
                await check_fd_reaches(att.claimed[k.name].master, k)
            # Not retrofitted: the sessions are what the build made of them.
            assert [(s.outcome, s.master, s.daemon, s.leaf) for s in result.sessions] == before
            assert str(slow.socket_path) not in result.phase.attachments
            for s in result.sessions:
                assert s.daemon == str(relauncher.socket_path)
            await trio.sleep(60)
            assert len(late) == 1
            att.close()  # the adopter's to close
            await release_claims(result)
            nursery.cancel_scope.cancel()
        assert not any(k.held for k in kids)


async def test_on_arrival_sees_each_daemon_in_time_as_it_answers(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The live progress of the phase: each daemon that answers before the
    deadline is shown when it answers (one after 2 s, one after 5 s), one
    that is not running at once; a late one never (it goes to on_late)."""
    relauncher = sim_at(1)
    quick = SimDaemon(ms_dirs.runtime / "quick.sock", behavior=Behavior.on(Claim, delay=2))
    slower = SimDaemon(ms_dirs.runtime / "slower.sock", behavior=Behavior.on(Claim, delay=5))
    late = SimDaemon(ms_dirs.runtime / "late.sock", behavior=Behavior.on(Claim, delay=15))
    leaves = [
        leaf_of(d, d.add_child(name=f"s{i}"), workdir) for i, d in enumerate((quick, slower, late))
    ]
    missing = str(ms_dirs.runtime / "missing.sock")
    leaves.append(
        attrs.evolve(leaves[0], name="gone", ref=attrs.evolve(leaves[0].ref, socket=missing))
    )
    seen: list[tuple[float, str, str | None]] = []
    late_ones: list[DaemonAttachment] = []
    with no_fd_leak():
        async with serving(relauncher, quick, slower, late), trio.open_nursery() as nursery:
            t0 = trio.current_time()

            def arrived(att: DaemonAttachment) -> None:
                seen.append((trio.current_time() - t0, att.target.socket, att.error))

            result = await restore(
                arranged(leaves),
                nursery=nursery,
                timeout=TIMEOUT,
                on_arrival=arrived,
                on_late=late_ones.append,
            )
            assert [(round(t, 3), sock) for t, sock, _ in seen] == [
                (0, missing),
                (2, str(quick.socket_path)),
                (5, str(slower.socket_path)),
            ]
            assert seen[0][2] is not None and [e for _, _, e in seen[1:]] == [None, None]
            await trio.sleep(10)
            assert len(late_ones) == 1 and len(seen) == 3
            late_ones[0].close()
            await release_claims(result)
            nursery.cancel_scope.cancel()


# --- cancellation ---------------------------------------------------------------------------


@pytest.mark.parametrize("cancel_nursery", [True, False], ids=["with-nursery", "restore-only"])
async def test_cancelling_mid_phase_leaves_no_fd_open(
    ms_dirs: MsDirs, workdir: Path, cancel_nursery: bool, autojump_clock: trio.testing.MockClock
) -> None:
    with no_fd_leak():
        quick = [SimDaemon(ms_dirs.runtime / f"q{i}.sock") for i in range(3)]
        slow = SimDaemon(ms_dirs.runtime / "slow.sock", behavior=Behavior.on(Claim, delay=20))
        wedged = SimDaemon(ms_dirs.runtime / "w.sock", behavior=Behavior.on(Hello, hang=True))
        leaves = [
            leaf_of(sim, sim.add_child(name=f"s{i}-{j}"), workdir)
            for i, sim in enumerate([*quick, slow, wedged])
            for j in range(2)
        ]
        async with serving(*quick, slow, wedged):
            late: list[DaemonAttachment] = []

            def on_late(att: DaemonAttachment) -> None:
                late.append(att)
                att.close()

            if cancel_nursery:
                # Everything the restore started goes with it.
                with trio.move_on_after(5) as scope:
                    async with trio.open_nursery() as nursery:
                        await restore(
                            arranged(leaves), nursery=nursery, timeout=TIMEOUT, on_late=on_late
                        )
                assert scope.cancelled_caught
                assert late == []
            else:
                async with trio.open_nursery() as nursery:
                    with trio.move_on_after(5) as scope:
                        await restore(
                            arranged(leaves), nursery=nursery, timeout=TIMEOUT, on_late=on_late
                        )
                    assert scope.cancelled_caught
                    # The slow claim is answered at t = 20, after the restore
                    # was cancelled: a late arrival, closed by on_late.
                    await trio.sleep(16)
                    assert len(late) == 1 and late[0].target.socket == str(slow.socket_path)
                    nursery.cancel_scope.cancel()  # abandon the wedged one
            for sim in (*quick, slow):
                await connections_settle(sim, 0)
                assert not any(c.held for c in sim.children)


async def test_cancelling_mid_build_leaves_no_fd_open(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Cancelled while the relaunches are in flight (the daemon serves one
    every 5 s): no fd stays open, the relaunch done by then is saved with
    its new ref, and the one still in flight keeps its intent."""
    with no_fd_leak():
        relauncher = sim_at(1, behavior=Behavior.on(Launch, delay=5))
        a = SimDaemon(ms_dirs.runtime / "a.sock")
        leaves = [leaf_of(a, a.add_child(name=f"att{i}"), workdir) for i in range(3)]
        gone = RestorationRef(str(ms_dirs.runtime / "gone.sock"), "i", 1, 1)
        leaves += [SessionLeaf(f"new{i}", ["sh"], str(workdir), ref=gone) for i in range(2)]
        built: list[RestoredSession] = []
        with ArrangementStore.open(ms_dirs.root / "arrangement.sqlite3") as store:
            store.save(arranged(leaves))
            # Launches at 5 s and 10 s, the cancel at 6 s: a simulator wait that
            # never ends fails here, naming it, instead of hanging.
            with within("the cancelled restore and its closing", 20):
                async with serving(relauncher, a):
                    with trio.CancelScope() as scope:
                        async with trio.open_nursery() as nursery:

                            async def cancel_during_the_second() -> None:
                                # The first launch is answered at 5 s, the
                                # second at 10 s: cancel 1 s after the first.
                                await relauncher.wait_children(1)
                                await trio.sleep(1)
                                scope.cancel()

                            nursery.start_soon(cancel_during_the_second)
                            await restore(
                                store.load(),
                                nursery=nursery,
                                timeout=1000,  # far off: the cancel ends it
                                store=store,
                                progress=built.append,
                            )
                    assert scope.cancelled_caught
                    # The attached sessions were built (their fds handed over)
                    # before the cancel: never returned, so closed. The
                    # relaunches are told of once their batch is recorded.
                    assert [s.outcome for s in built] == ["attached"] * 3
                    await connections_settle(a, 0)
                    assert not any(c.held for c in a.children)
                    await connections_settle(relauncher, 0)
                    saved = {leaf.name: leaf for leaf in store.load().leaves()}
        # Both were asked at once, in order: new0 was answered before the
        # cancel, new1 was not (the daemon may start it still: its intent
        # says where to look).
        done = {c.name: c for c in relauncher.children}["new0"]
        assert saved["new0"].ref == ref_of(relauncher, done)
        assert saved["new0"].pending_launch is None
        assert saved["new1"].ref == gone
        intent = saved["new1"].pending_launch
        assert intent is not None
        assert (intent.socket, intent.instance_id) == (
            str(relauncher.socket_path),
            relauncher.instance_id,
        )


# --- a slow daemon ----------------------------------------------------------------------------


async def test_a_slow_daemon_delays_only_its_own_sessions(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = SimDaemon(ms_dirs.runtime / "slow.sock", behavior=Behavior.on(Claim, delay=5))
    quick = [SimDaemon(ms_dirs.runtime / f"q{i}.sock") for i in range(3)]
    leaves = [
        leaf_of(sim, sim.add_child(name=f"s{i}-{j}"), workdir)
        for i, sim in enumerate([slow, *quick])
        for j in range(2)
    ]
    async with serving(slow, *quick), trio.open_nursery() as nursery:
        result = await restore(arranged(leaves), nursery=nursery, timeout=TIMEOUT)
        assert result.phase.elapsed == 5 and result.elapsed == 5
        assert all(s.outcome == "attached" for s in result.sessions)
        elapsed = {s.leaf.name: s.elapsed for s in result.sessions}
        assert elapsed == {
            "s0-0": 5,
            "s0-1": 5,
            **{f"s{i}-{j}": 0 for i in range(1, 4) for j in range(2)},
        }
        atts = result.phase.attachments
        assert atts[str(slow.socket_path)].elapsed == 5
        assert all(atts[str(q.socket_path)].elapsed == 0 for q in quick)
        await release_claims(result)
        nursery.cancel_scope.cancel()


# --- the saved arrangement --------------------------------------------------------------------


async def test_many_relaunches_cost_the_store_two_commits(
    ms_dirs: MsDirs,
    workdir: Path,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reboot's restore relaunches every session: their intents go to the
    store in one transaction before any launch, their new children in one
    after; not two whole-arrangement writes per session. Each comes back
    once, with its saved scrollback in its notice."""
    relauncher = sim_at(1)
    gone = RestorationRef(str(workdir / "no.sock"), "i", 3, 3)
    leaves = [
        SessionLeaf(f"s{i}", ["sh"], str(workdir), ref=gone, scrollback=f"saved {i}\r\n".encode())
        for i in range(100)
    ]
    path = ms_dirs.root / "arrangement.sqlite3"
    changes: list[object] = []
    write = ArrangementStore._write  # every change's one transaction

    def counted(self: ArrangementStore, op: Any) -> Any:
        changes.append(op)
        return write(self, op)

    with ArrangementStore.open(path) as store:
        store.save(arranged(leaves))
        monkeypatch.setattr(ArrangementStore, "_write", counted)
        async with serving(relauncher), trio.open_nursery() as nursery:
            result = await restore(store.load(), nursery=nursery, timeout=TIMEOUT, store=store)
            assert [x.outcome for x in result.sessions] == ["relaunched"] * len(leaves)
            await release_claims(result)
            nursery.cancel_scope.cancel()
        assert len(changes) == 2
        saved = store.load().leaves()
    assert [m.name for m in launches(relauncher)] == [leaf.name for leaf in leaves]
    children = {c.name: c for c in relauncher.children}
    for was, now in zip(leaves, saved, strict=True):
        assert now.ref == ref_of(relauncher, children[was.name])
        assert now.pending_launch is None and now.scrollback is None
        assert now.notice is not None and now.notice.startswith(was.scrollback or b"")


async def test_every_intent_is_saved_before_its_launch_is_answered(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The relaunch daemon takes the launches and never answers: had it
    started them, each session's intent is already saved, for the next
    restore to look for; no session is saved with a half-made ref."""
    relauncher = sim_at(1, behavior=Behavior.on(Launch, hang=True))
    leaves = fresh_leaves(3, workdir)
    path = ms_dirs.root / "arrangement.sqlite3"
    with ArrangementStore.open(path) as store:
        store.save(arranged(leaves))
        async with serving(relauncher), trio.open_nursery() as nursery:
            result = await restore(store.load(), nursery=nursery, timeout=TIMEOUT, store=store)
            assert [x.outcome for x in result.sessions] == ["failed"] * 3
            assert launches(relauncher)  # asked for
            await release_claims(result)
            nursery.cancel_scope.cancel()
        saved = store.load().leaves()
    for was, now in zip(leaves, saved, strict=True):
        assert now.pending_launch is not None
        assert now.pending_launch.instance_id == relauncher.instance_id
        assert now == attrs.evolve(was, pending_launch=now.pending_launch)


async def test_store_gets_new_refs_for_relaunched_and_keeps_ended_with_their_end(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    relauncher = sim_at(1)
    a = SimDaemon(ms_dirs.runtime / "a.sock")
    w = SimDaemon(ms_dirs.runtime / "w.sock", behavior=Behavior.on(Claim, hang=True))
    live = a.add_child(["vim"], name="live")
    done = a.add_child(["make"], name="done")
    done.write_output(b"make: *** Error 2\r\n")
    done.exit(2)
    stuck = w.add_child(["top"], name="stuck")
    gone = SessionLeaf(
        "gone",
        ["sh"],
        str(workdir),
        ref=RestorationRef(str(workdir / "no.sock"), "i", 3, 3),
        scrollback=b"saved\r\n",
    )
    leaves = [
        leaf_of(a, live, workdir),
        leaf_of(a, done, workdir),
        leaf_of(w, stuck, workdir),
        gone,
    ]
    path = ms_dirs.root / "arrangement.sqlite3"
    with ArrangementStore.open(path) as store:
        store.save(arranged(leaves))
        async with serving(relauncher, a, w), trio.open_nursery() as nursery:
            result = await restore(store.load(), nursery=nursery, timeout=TIMEOUT, store=store)
            assert [s.outcome for s in result.sessions] == [
                "attached",
                "ended",
                "timed-out",
                "relaunched",
            ]
            await release_claims(result)
            nursery.cancel_scope.cancel()
    # What the next restore will find (a fresh open: durable, not cached).
    with ArrangementStore.open(path) as store:
        saved = {leaf.name: leaf for leaf in store.load().leaves()}
        assert store.pending_closes() == []
    assert sorted(saved) == ["done", "gone", "live", "stuck"]
    assert saved["live"] == leaves[0]
    # The ended session stays, with what it showed and how it ended: should
    # its daemon go before anyone attaches, the next restore still says so.
    assert saved["done"] == attrs.evolve(
        leaves[1], scrollback=b"make: *** Error 2\r\n", exit_code=2
    )
    fresh = {c.name: c for c in relauncher.children}
    s = by_name(result)
    for name in ("stuck", "gone"):
        c = fresh[name]
        assert saved[name].ref == RestorationRef(
            str(relauncher.socket_path), relauncher.instance_id, c.id, c.pid
        )
        assert saved[name].notice == s[name].replay
        assert RELAUNCH_MARKER.encode() in (saved[name].notice or b"")
    assert (saved["gone"].notice or b"").startswith(b"saved\r\n")
    # Moved into the notice: the new program's output will be its scrollback.
    assert saved["gone"].scrollback is None


@pytest.mark.parametrize("how", ["newer-schema", "leaf-removed"])
async def test_a_store_that_cannot_be_written_costs_no_session(
    ms_dirs: MsDirs, workdir: Path, how: str, autojump_clock: trio.testing.MockClock
) -> None:
    relauncher = sim_at(1)
    a = SimDaemon(ms_dirs.runtime / "a.sock")
    done = a.add_child(["make"], name="done")
    done.exit(0)
    gone = [
        SessionLeaf(f"gone{i}", ["sh"], str(workdir), ref=RestorationRef("/no.sock", "i", i, i))
        for i in range(2)
    ]
    path = ms_dirs.root / "arrangement.sqlite3"
    with ArrangementStore.open(path) as store:
        store.save(arranged([leaf_of(a, done, workdir), *gone]))
    if how == "newer-schema":  # read as far as understood, never written
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("UPDATE meta SET value = 9 WHERE key = 'schema_version'")
    with ArrangementStore.open(path) as store:
        arrangement = store.load()
        if how == "leaf-removed":  # e.g. `multiserver kill` while restoring
            for leaf in arrangement.leaves():
                store.remove_session(leaf.name)
        async with serving(relauncher, a), trio.open_nursery() as nursery:
            result = await restore(arrangement, nursery=nursery, timeout=TIMEOUT, store=store)
            if how == "newer-schema":
                assert [s.outcome for s in result.sessions] == ["ended", "relaunched", "relaunched"]
                assert all("not saved" in s.detail for s in result.sessions), result.sessions
                assert not any(s.saved for s in result.sessions) and not result.saved
                assert sorted(c.name for c in relauncher.children) == ["gone0", "gone1"]
            else:  # closed meanwhile: nothing closed comes back
                assert [s.outcome for s in result.sessions] == ["ended"] * 3
                assert "not saved: the session is no longer" in result.sessions[0].detail
                for s in result.sessions[1:]:
                    assert s.detail == "closed meanwhile (multiserver kill): not started again"
                assert relauncher.children == [] and result.saved
            await release_claims(result)
            nursery.cancel_scope.cancel()


async def test_a_relaunch_daemon_that_stops_answering_is_waited_for_once(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    relauncher = sim_at(1, behavior=Behavior.on(Launch, hang=True))
    leaves = [SessionLeaf(f"s{i}", ["sh"], str(workdir)) for i in range(3)]
    with no_fd_leak():
        async with serving(relauncher), trio.open_nursery() as nursery:
            t0 = trio.current_time()
            result = await restore(arranged(leaves), nursery=nursery, timeout=TIMEOUT)
            # The restore's one deadline, not one bound per session.
            assert trio.current_time() - t0 == TIMEOUT
            assert [s.outcome for s in result.sessions] == ["failed"] * 3
            # All three were asked at once, in order; none was answered.
            for s in result.sessions:
                assert f"relaunch cut off by {DEADLINE_PASSED}" in s.detail
                assert f"may have started it as {s.leaf.name!r}" in s.detail
                assert s.daemon == str(relauncher.socket_path)  # where it may run
            assert [m.name for m in launches(relauncher)] == ["s0", "s1", "s2"]
            await release_claims(result)
            nursery.cancel_scope.cancel()


# --- one deadline over the phase, starting a daemon and the relaunches ------------------


def fresh_leaves(n: int, cwd: Path) -> list[SessionLeaf]:
    """Sessions that never had a child: each one is a relaunch."""
    return [SessionLeaf(f"new{i}", ["sh"], str(cwd)) for i in range(n)]


async def test_a_slow_phase_then_slow_launches_end_by_the_one_deadline(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The phase takes 0.7 T (one daemon is slow), then the three launches
    are asked at once and the daemon answers one every 0.2 T: the first at
    0.9 T; the others are cut off at T. The restore returns at T, not at
    0.7 T + 3 x 0.2 T."""
    relauncher = sim_at(1, behavior=Behavior.on(Launch, delay=0.2 * TIMEOUT))
    slow = SimDaemon(
        ms_dirs.runtime / "slow.sock", behavior=Behavior.on(Claim, delay=0.7 * TIMEOUT)
    )
    kid = slow.add_child(name="att")
    leaves = [*fresh_leaves(3, workdir), leaf_of(slow, kid, workdir)]
    async with serving(relauncher, slow), trio.open_nursery() as nursery:
        t0 = trio.current_time()
        result = await restore(arranged(leaves), nursery=nursery, timeout=TIMEOUT)
        assert trio.current_time() - t0 == TIMEOUT
        assert result.elapsed == TIMEOUT and result.phase.elapsed == 0.7 * TIMEOUT
        s = by_name(result)
        assert [(x.leaf.name, x.outcome) for x in result.sessions] == [
            ("new0", "relaunched"),
            ("new1", "failed"),
            ("new2", "failed"),
            ("att", "attached"),
        ]
        await check_fd_reaches(s["att"].master, kid)
        for name in ("new1", "new2"):
            assert f"relaunch cut off by {DEADLINE_PASSED}" in s[name].detail
            assert f"may have started it as {name!r}, unsaved" in s[name].detail
            assert s[name].daemon == str(relauncher.socket_path)
            assert s[name].master is None and s[name].client is None
        # The daemon reads one request at a time: new2's waits in its socket.
        assert [m.name for m in launches(relauncher)] == ["new0", "new1"]
        await release_claims(result)
        nursery.cancel_scope.cancel()


async def test_launches_cut_off_by_the_deadline_are_settled_by_the_next_restore(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Launches asked for and cut off by the deadline keep the intent
    written before them; their children, started late, are the sessions'
    at the next restore, never started twice."""
    relauncher = sim_at(1, behavior=Behavior.on(Launch, delay=0.4 * TIMEOUT))
    leaves = fresh_leaves(3, workdir)
    path = ms_dirs.root / "arrangement.sqlite3"
    with ArrangementStore.open(path) as store:
        store.save(arranged(leaves))
        async with serving(relauncher), trio.open_nursery() as nursery:
            result = await restore(store.load(), nursery=nursery, timeout=TIMEOUT, store=store)
            s = by_name(result)
            # Asked at once, answered one every 0.4 T: two by T.
            assert [x.outcome for x in result.sessions] == ["relaunched", "relaunched", "failed"]
            assert f"relaunch cut off by {DEADLINE_PASSED}" in s["new2"].detail
            # The cut-off launch is served after the deadline: its child is
            # the daemon's and runs, held by the relaunch connection until
            # that closes. Nothing saved points at it.
            with trio.fail_after(TIMEOUT):
                while "new2" not in {c.name for c in relauncher.children}:
                    await trio.sleep(0.1)
            late = {c.name: c for c in relauncher.children}["new2"]
            await release_claims(result)
            await connections_settle(relauncher, 0)
            assert late.running and not late.held
            saved = {leaf.name: leaf for leaf in store.load().leaves()}
            intent = saved["new2"].pending_launch
            assert intent is not None
            assert (intent.socket, intent.instance_id) == (
                str(relauncher.socket_path),
                relauncher.instance_id,
            )
            assert saved["new2"] == attrs.evolve(leaves[2], pending_launch=intent)
            for name in ("new0", "new1"):
                child = {c.name: c for c in relauncher.children}[name]
                assert saved[name].ref == ref_of(relauncher, child)
                assert saved[name].pending_launch is None

            # The next restore settles new2's intent first: the child the
            # cut-off launch started is the session's, recorded and
            # attached; it is not started twice.
            again = await restore(store.load(), nursery=nursery, timeout=TIMEOUT, store=store)
            s = by_name(again)
            assert [x.outcome for x in again.sessions] == ["attached"] * 3
            assert s["new2"].leaf.ref == ref_of(relauncher, late)
            assert again.settlement is not None
            assert [(x.leaf.name, x.found) for x in again.settlement.settled] == [("new2", True)]
            assert [m.name for m in launches(relauncher)] == ["new0", "new1", "new2"]
            await release_claims(again)
            nursery.cancel_scope.cancel()
        after = {leaf.name: leaf for leaf in store.load().leaves()}
    assert after["new2"].ref == ref_of(relauncher, late) and after["new2"].pending_launch is None


@pytest.mark.parametrize("hello_delay", [0.1, 0.5], ids=["in-time", "past-the-deadline"])
async def test_starting_the_relaunch_daemon_waits_only_for_what_is_left(
    ms_dirs: MsDirs, workdir: Path, hello_delay: float, autojump_clock: trio.testing.MockClock
) -> None:
    """The phase takes 0.6 T; the relaunch daemon answers Hello after
    ``hello_delay`` T. In time (0.7 T), the relaunches are done; else the
    start is cut off at T (a fresh T would have waited until 1.1 T), and
    every relaunch fails at once, with the reason."""
    relauncher = sim_at(1, behavior=Behavior.on(Hello, delay=hello_delay * TIMEOUT))
    slow = SimDaemon(
        ms_dirs.runtime / "slow.sock", behavior=Behavior.on(Claim, delay=0.6 * TIMEOUT)
    )
    kid = slow.add_child(name="att")
    leaves = [leaf_of(slow, kid, workdir), *fresh_leaves(2, workdir)]
    async with serving(relauncher, slow), trio.open_nursery() as nursery:
        t0 = trio.current_time()
        result = await restore(arranged(leaves), nursery=nursery, timeout=TIMEOUT)
        took = trio.current_time() - t0
        s = by_name(result)
        assert s["att"].outcome == "attached"
        await check_fd_reaches(s["att"].master, kid)
        if hello_delay == 0.1:
            assert took == pytest.approx(0.7 * TIMEOUT)
            assert [s[n].outcome for n in ("new0", "new1")] == ["relaunched"] * 2
        else:
            assert took == TIMEOUT
            for name in ("new0", "new1"):
                assert s[name].outcome == "failed"
                assert s[name].detail.endswith(
                    f"relaunch not done: daemon {relauncher.socket_path} did not start"
                    f" by {DEADLINE_PASSED}"
                )
            assert launches(relauncher) == []
        await release_claims(result)
        nursery.cancel_scope.cancel()


FAILED5 = ["failed"] * 5


@pytest.mark.parametrize(
    ("relaunch_daemon", "outcomes"),
    [
        (Behavior.on(Hello, hang=True), FAILED5),
        (Behavior.on(Hello, delay=0.1 * TIMEOUT) | Behavior.on(Launch, hang=True), FAILED5),
        # Launches of 0.15 T from 0.8 T: new0 is done at 0.95 T, new1 cut off at T.
        (Behavior.on(Launch, delay=0.15 * TIMEOUT), ["relaunched", *FAILED5[1:]]),
    ],
    ids=["start-wedged", "start-slow-launch-wedged", "launches-slow"],
)
async def test_the_worst_case_is_one_deadline_not_three(
    ms_dirs: MsDirs,
    workdir: Path,
    relaunch_daemon: Behavior,
    outcomes: list[str],
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A wedged daemon in the phase, and a relaunch daemon slow or wedged
    at every step. With a fresh bound each for the phase, the start and
    each launch, these took 1.75 to 2.1 T (three T at worst: a start just
    under T, then a launch that never answers). Now it is T, and every
    session says what happened to it."""
    relauncher = sim_at(1, behavior=relaunch_daemon)
    wedged = SimDaemon(ms_dirs.runtime / "w.sock", behavior=Behavior.on(Claim, hang=True))
    stuck = [wedged.add_child(name=f"stuck{i}") for i in range(2)]
    leaves = [*fresh_leaves(3, workdir), *(leaf_of(wedged, k, workdir) for k in stuck)]
    with no_fd_leak():
        async with serving(relauncher, wedged), trio.open_nursery() as nursery:
            t0 = trio.current_time()
            result = await restore(arranged(leaves), nursery=nursery, timeout=TIMEOUT)
            assert trio.current_time() - t0 == TIMEOUT
            assert result.phase.elapsed == ATTACH_BY
            assert [x.leaf.name for x in result.sessions] == [leaf.name for leaf in leaves]
            assert [x.outcome for x in result.sessions] == outcomes
            for x in result.sessions:
                if x.outcome == "failed":
                    assert DEADLINE_PASSED in x.detail, x
            for x in result.sessions[3:]:
                assert x.detail.startswith(f"daemon did not answer {WITHIN_ATTACH_BY};")
            await release_claims(result)
            nursery.cancel_scope.cancel()


async def test_an_ended_session_is_never_collected_so_a_wedged_collect_costs_nothing(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A daemon that answers the claim, then never a collect: an ended
    session is reported and left to its daemon at once (it waits for a
    person). With --relaunch-ended it is collected first: that collect waits
    until T, and the relaunch is then not done."""
    a = SimDaemon(ms_dirs.runtime / "a.sock", behavior=Behavior.on(Collect, hang=True))
    done = a.add_child(["make"], name="done")
    done.exit(2)
    with no_fd_leak():
        async with serving(a), trio.open_nursery() as nursery:
            t0 = trio.current_time()
            result = await restore(
                arranged([leaf_of(a, done, workdir)]), nursery=nursery, timeout=TIMEOUT
            )
            assert trio.current_time() == t0  # nothing waited for
            [s] = result.sessions
            assert (s.outcome, s.exit_code) == ("ended", 2)
            assert [c.name for c in a.children] == ["done"]  # the daemon keeps it
            await release_claims(result)

            t0 = trio.current_time()
            result = await restore(
                arranged([leaf_of(a, done, workdir)]),
                nursery=nursery,
                timeout=TIMEOUT,
                options=Options(relaunch_ended=True),
            )
            assert trio.current_time() - t0 == TIMEOUT
            [s] = result.sessions
            assert (s.outcome, s.exit_code) == ("failed", 2)
            assert f"relaunch not done: {DEADLINE_PASSED} passed" in s.detail
            assert [c.name for c in a.children] == ["done"]
            await release_claims(result)
            nursery.cancel_scope.cancel()


async def test_an_absolute_deadline_instead_of_a_timeout(
    ms_dirs: MsDirs, workdir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """``deadline=`` is the caller's absolute time: what is left of it when
    the restore starts is split as a timeout would be."""
    relauncher = sim_at(1)
    wedged = SimDaemon(ms_dirs.runtime / "w.sock", behavior=Behavior.on(Hello, hang=True))
    stuck = wedged.add_child(name="stuck")
    async with serving(relauncher, wedged), trio.open_nursery() as nursery:
        deadline = trio.current_time() + 2.5 + TIMEOUT
        await trio.sleep(2.5)  # the caller's own work: TIMEOUT is left
        result = await restore(
            arranged([leaf_of(wedged, stuck, workdir)]), nursery=nursery, deadline=deadline
        )
        assert trio.current_time() == 2.5 + ATTACH_BY
        [s] = result.sessions
        assert s.outcome == "timed-out" and WITHIN_ATTACH_BY in s.detail
        assert s.daemon == str(relauncher.socket_path)
        with pytest.raises(ValueError, match="not both"):
            await restore(arranged([]), nursery=nursery, timeout=TIMEOUT, deadline=deadline)
        await release_claims(result)
        nursery.cancel_scope.cancel()
