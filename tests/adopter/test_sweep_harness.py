"""The sweep and late arrivals against simulated daemons (multiserver.testing)
under trio's autojump clock: bounds are exact in virtual time and a test takes
milliseconds of wall time.

Every test gets a private runtime dir (``ms_dirs``, MULTISERVER_RUNTIME_DIR,
mode 0700) where sims listen at ``multiserver-daemon-N.socket``, and a private
short-path fallback dir (``multiserver.system._paths.fallback_dir`` is replaced), so
a sweep never sees the machine's real sockets (``tests/adopter/conftest.py``).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from adopter import (
    ORPHAN_NOTICE,
    ORPHAN_WINDOW,
    SWEEP_BOUND,
    MemorySink,
    OrphanSink,
    StoreSink,
    SweepReport,
    SweepRow,
    adopt_late,
    late_notice,
    sweep,
)
from multiserver import ChildInfo, DaemonPaths, describe_exit, open_client
from multiserver.system._paths import try_lock
from multiserver.testing import Behavior, Claim, Collect, Hello, SimChild, SimDaemon
from restore import (
    ATTACH_SHARE,
    Arrangement,
    ArrangementStore,
    SessionLeaf,
    StoreError,
)
from restore._partial import DaemonAttachment
from restore._restore import RestoreResult, release_claims, restore_arrangement
from tests.adopter.conftest import Dirs, arranged, leaf_of
from tests.sims import no_fd_leak, serving, sim_at
from tests.timing import HARNESS_TIMEOUT, by_deadline, connections_settle, within

TIMEOUT = HARNESS_TIMEOUT  # restore's deadline in the late-arrival tests: no default's
ATTACH_BY = ATTACH_SHARE * TIMEOUT  # when its phase stops waiting for daemons
LATE = 15.0  # when a slow daemon answers restore's claim

pytestmark = pytest.mark.usefixtures("no_real_daemons")


# --- helpers -----------------------------------------------------------------------


async def restore(arrangement: Arrangement, *, timeout: float, **kw: Any) -> RestoreResult:
    """``restore_arrangement`` under the outer bound (``tests.timing``)."""
    return await by_deadline(
        "restore_arrangement", timeout, restore_arrangement(arrangement, timeout=timeout, **kw)
    )


async def sweep_within(sink: OrphanSink, *, bound: float | None = None) -> SweepReport:
    """``sweep`` (with ``bound``, or its default) under the outer bound."""
    if bound is None:
        return await by_deadline("sweep", SWEEP_BOUND, sweep(sink))
    return await by_deadline("sweep", bound, sweep(sink, bound=bound))


async def late_answer(arrived: trio.Event) -> None:
    """Wait for the slow daemon's late answer (at ``LATE``) to be taken on."""
    with within(f"taking on the late answer (due at t = {LATE:g} s)", LATE - trio.current_time()):
        await arrived.wait()


def ref_of(sim: SimDaemon, child: SimChild) -> tuple[str, str, int]:
    return (str(sim.socket_path), sim.instance_id, child.id)


def orphan_leaves(arrangement: Arrangement) -> list[SessionLeaf]:
    window = arrangement.window(ORPHAN_WINDOW)
    if window is None:
        return []
    leaves = [t.root for t in window.tabs]
    assert all(isinstance(x, SessionLeaf) for x in leaves)
    return [x for x in leaves if isinstance(x, SessionLeaf)]


def orphan_refs(arrangement: Arrangement) -> list[tuple[str, str, int]]:
    """(socket, instance, child id) of every leaf in the orphans window, in order."""
    return [
        (x.ref.socket, x.ref.instance_id, x.ref.child_id)
        for x in orphan_leaves(arrangement)
        if x.ref is not None
    ]


def actions(rows: Sequence[SweepRow]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.action] = counts.get(r.action, 0) + 1
    return counts


def only_hellos(sim: SimDaemon) -> bool:
    return all(isinstance(m, Hello) for m in sim.received)


def dead_socket(path: Path) -> None:
    """A socket file nobody listens on: what a killed daemon leaves behind."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


# --- late arrivals -------------------------------------------------------------------


async def test_late_arrivals_end_up_in_the_orphans_window_exactly_once(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    """restore_arrangement with a daemon whose claim comes after the deadline:
    on_late hands the attachment to adopt_late, which adopts the running
    children (and collects the exited one) into the orphans window; later
    sweeps find nothing more to adopt."""
    with no_fd_leak():
        relauncher = sim_at(1)
        slow = sim_at(2, behavior=Behavior.on(Claim, delay=LATE))
        kids = [slow.add_child(["vim", "notes"], name="edit"), slow.add_child(["top"], name="mon")]
        done = slow.add_child(["make"], name="build")
        done.exit(4)
        leaves = [leaf_of(slow, k, dirs.root) for k in [*kids, done]]
        sink = MemorySink()
        late_rows: list[SweepRow] = []
        adopted = trio.Event()
        async with serving(relauncher, slow), trio.open_nursery() as nursery:

            async def adopt(att: DaemonAttachment) -> None:
                late_rows.extend(await adopt_late(att, sink))
                adopted.set()

            result = await restore(
                arranged(leaves),
                nursery=nursery,
                timeout=TIMEOUT,
                on_late=lambda att: nursery.start_soon(adopt, att),
            )
            assert trio.current_time() == ATTACH_BY
            assert [s.outcome for s in result.sessions] == ["timed-out"] * 3
            # What the app now shows: the relaunched sessions (new refs).
            sink.current = arranged([s.leaf for s in result.sessions])
            assert late_rows == []
            await late_answer(adopted)
            assert trio.current_time() == LATE

            assert [(r.state, r.action) for r in late_rows] == [
                ("late", "adopted"),
                ("late", "adopted"),
                ("late", "ended"),
            ]
            assert late_rows[2].exit_code == 4 and "code 4" in late_rows[2].detail
            assert done.id not in [c.id for c in slow.children]  # collected
            assert orphan_refs(sink.current) == [ref_of(slow, k) for k in kids]
            for x, k in zip(orphan_leaves(sink.current), kids, strict=True):
                assert x.name == late_rows[kids.index(k)].name
                # The originals of sessions started again: NAME-late.
                assert x.name == f"{k.name}-late"
                assert x.argv == k.argv and x.notice == late_notice(k.name).encode()
            # Handed back to the daemon once recorded.
            await connections_settle(slow, 0)
            assert not any(k.held for k in kids)

            # The next sweeps: every child is somebody's session now.
            await release_claims(result)
            for _ in range(2):
                report = await sweep(sink)
                assert actions(report.rows) == {"none": 2}, report
            assert orphan_refs(sink.current) == [ref_of(slow, k) for k in kids]
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("first", ["late-first", "sweep-first"])
async def test_a_late_arrival_and_a_sweep_adopt_each_child_once(
    dirs: Dirs, first: str, autojump_clock: trio.testing.MockClock
) -> None:
    """What ``multiserver restore`` does: restore into the store, late
    arrivals to adopt_late (a StoreSink), and a sweep. Whichever gets to a
    child first adopts it; the other finds it a saved session already. Each
    child ends up in the orphans window once."""
    relauncher = sim_at(1)
    slow = sim_at(2, behavior=Behavior.on(Claim, delay=LATE))
    kids = [slow.add_child(["vim"], name="edit"), slow.add_child(["top"], name="mon")]
    path = dirs.root / "arrangement.sqlite3"
    late_rows: list[SweepRow] = []
    arrived = trio.Event()

    with ArrangementStore.open(path) as store:
        store.save(arranged([leaf_of(slow, k, dirs.root) for k in kids]))
        sink = StoreSink(store)
        async with serving(relauncher, slow), trio.open_nursery() as nursery:

            async def adopt(att: DaemonAttachment) -> None:
                late_rows.extend(await adopt_late(att, sink))
                arrived.set()

            # The build's store writes take no virtual time (the clock
            # stands still in threads): the late answer comes after it.
            result = await restore(
                store.load(),
                nursery=nursery,
                timeout=TIMEOUT,
                store=store,
                on_late=lambda att: nursery.start_soon(adopt, att),
            )
            assert trio.current_time() == ATTACH_BY
            assert [s.outcome for s in result.sessions] == ["timed-out"] * 2
            await release_claims(result)
            slow.behavior = Behavior()  # the sweep's claim is answered at once
            if first == "late-first":
                await late_answer(arrived)
                assert trio.current_time() == LATE
                swept = await sweep_within(sink)
            else:
                # Restore's claim is still waiting in the daemon.
                swept = await sweep_within(sink)
                assert trio.current_time() == ATTACH_BY and late_rows == []
                await late_answer(arrived)
            nursery.cancel_scope.cancel()
    on_slow = [r for r in swept.rows if r.socket == str(slow.socket_path)]
    if first == "late-first":
        assert [(r.state, r.action) for r in late_rows] == [("late", "adopted")] * 2
        assert [r.action for r in on_slow] == ["none"]
        adopted = late_rows
    else:
        assert [(r.state, r.action) for r in on_slow] == [("live", "adopted")] * 2
        # Restore's claim then got them (the sweep had let go): the one
        # transaction that records refuses a child some leaf references.
        assert [(r.state, r.action) for r in late_rows] == [("late", "skipped")] * 2
        assert all("saved session already" in r.detail for r in late_rows)
        adopted = on_slow
    with ArrangementStore.open(path) as store:
        saved = store.load()
    assert sorted(orphan_refs(saved)) == sorted(ref_of(slow, k) for k in kids)
    assert sorted(x.name for x in orphan_leaves(saved)) == sorted(r.name for r in adopted)
    # The relaunched sessions kept their names and point at the relauncher.
    main = saved.window("main")
    assert main is not None
    assert [
        (t.root.name, t.root.ref.socket)
        for t in main.tabs
        if isinstance(t.root, SessionLeaf) and t.root.ref
    ] == [
        ("edit", str(relauncher.socket_path)),
        ("mon", str(relauncher.socket_path)),
    ]


# --- concurrent sweeps ---------------------------------------------------------------


@attrs.frozen
class Fleet:
    sims: list[SimDaemon]
    running: list[tuple[str, str, int]]  # the running orphans' refs
    exited: dict[tuple[str, str, int], int]  # the exited orphans' refs -> exit code
    mine: list[SessionLeaf]  # saved sessions (their children are no orphans)
    held: list[SimChild]  # held by another client


def fleet(count: int, root: Path) -> Fleet:
    """``count`` sims, each with 3 running orphans, one exited orphan, one
    saved session's child and one child another client will hold."""
    sims = [sim_at(i + 1) for i in range(count)]
    running, exited, mine, held = [], {}, [], []
    for i, sim in enumerate(sims):
        for j in range(3):
            running.append(ref_of(sim, sim.add_child(["vim", f"f{j}"], name=f"v{j}")))
        gone = sim.add_child(["make"], name="made")
        gone.exit(i + 1)
        exited[ref_of(sim, gone)] = i + 1
        mine.append(leaf_of(sim, sim.add_child(["sh"], name=f"mine{i}"), root))
        held.append(sim.add_child(["sh"], name="busy"))
    return Fleet(sims, running, exited, mine, held)


@contextlib.asynccontextmanager
async def holding(fl: Fleet) -> AsyncIterator[None]:
    """Another client holds ``fl.held`` for the length of the block."""
    async with contextlib.AsyncExitStack() as stack:
        for sim, child in zip(fl.sims, fl.held, strict=True):
            client = await stack.enter_async_context(open_client(sim.socket_path))
            [result] = await client.claim([child.id])
            assert result.master is not None
            stack.callback(os.close, result.master)
        yield


@pytest.mark.parametrize("sinks", ["one-store", "two-stores", "one-memory"])
async def test_two_concurrent_sweeps_adopt_each_orphan_once(
    dirs: Dirs, sinks: str, autojump_clock: trio.testing.MockClock
) -> None:
    with no_fd_leak():
        fl = fleet(4, dirs.root)
        path = dirs.root / "arrangement.sqlite3"
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(ArrangementStore.open(path))
            first.save(arranged(fl.mine))
            second = (
                first if sinks == "one-store" else stack.enter_context(ArrangementStore.open(path))
            )
            a: OrphanSink
            b: OrphanSink
            if sinks == "one-memory":
                a = b = MemorySink(arranged(fl.mine))
            else:
                a, b = StoreSink(first), StoreSink(second)
            reports: list[SweepReport] = []
            async with serving(*fl.sims), holding(fl):
                async with trio.open_nursery() as nursery:

                    async def run(sink: OrphanSink) -> None:
                        reports.append(await sweep_within(sink))

                    nursery.start_soon(run, a)
                    nursery.start_soon(run, b)
                assert trio.current_time() <= SWEEP_BOUND
                final = a.arrangement()
                rows = [r for rep in reports for r in rep.rows]

                # Each running orphan once, in the orphans window; nothing else.
                assert sorted(orphan_refs(final)) == sorted(fl.running)
                assert len(set(x.name for x in orphan_leaves(final))) == len(fl.running)
                adopted = [r for r in rows if r.action == "adopted"]
                assert sorted(r.name for r in adopted) == sorted(
                    x.name for x in orphan_leaves(final)
                )
                # Each exited orphan reported once with its code, and collected.
                ended = [r for r in rows if r.action == "ended"]
                assert sorted(r.exit_code or 0 for r in ended) == sorted(fl.exited.values())
                for sim in fl.sims:
                    assert "made" not in [c.name for c in sim.children]
                # The loser of each race was refused, never adopted twice.
                for r in rows:
                    assert r.action in ("adopted", "ended", "skipped", "none"), r
                # Saved sessions and held children were left alone.
                assert [x for x in final.leaves() if x.name.startswith("mine")] == fl.mine
                assert all(c.held and c.holder is not None for c in fl.held)
                for sim in fl.sims:
                    await connections_settle(sim, 1)  # only the holder's
                    for c in sim.children:
                        assert c.held == (c.name == "busy")
        if sinks != "one-memory":
            with ArrangementStore.open(path) as store:
                assert sorted(orphan_refs(store.load())) == sorted(fl.running)


async def test_a_claim_won_after_the_other_sweep_recorded_is_refused_by_the_transaction(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    """The second line of the exactly-once argument: a sweep that read the
    arrangement before another sweep recorded, and claims after that sweep
    let go, wins the claim; the one transaction that records refuses it."""

    @attrs.define
    class StaleView:
        """Reads an old arrangement (the one before the other sweep); records
        into the real store."""

        old: Arrangement
        real: StoreSink

        def arrangement(self) -> Arrangement:
            return self.old

        def record(self, child: ChildInfo, socket: str, instance_id: str) -> SessionLeaf | None:
            return self.real.record(child, socket, instance_id)

    sim = sim_at(1)
    kids = [sim.add_child(["vim"]), sim.add_child(["top"])]
    with ArrangementStore.open(dirs.root / "a.sqlite3") as store:
        before = store.load()
        async with serving(sim):
            winner = await sweep(StoreSink(store))
            assert actions(winner.rows) == {"adopted": 2}
            loser = await sweep(StaleView(before, StoreSink(store)))
        assert actions(loser.rows) == {"skipped": 2}
        assert all("saved session already" in r.detail for r in loser.rows)
        assert sorted(orphan_refs(store.load())) == sorted(ref_of(sim, k) for k in kids)
        # The loser did claim them (it was allowed to), then let go.
        assert [type(m) for m in sim.received].count(Claim) == 2
        assert not any(k.held for k in kids)


# --- a wedged daemon -----------------------------------------------------------------


# The sweep's bound when a test gives one: not SWEEP_BOUND, so a sweep that
# ignores the bound it is given misses it.
BOUND = 1.5


@pytest.mark.parametrize("bound", [None, BOUND], ids=["default-bound", "given-bound"])
@pytest.mark.parametrize("sink_kind", ["memory", "store"])
@pytest.mark.parametrize(
    "wedge",
    [
        Behavior(accept_never=True),
        Behavior.on(Hello, hang=True),
        Behavior.on(Claim, hang=True),
        Behavior.on(Collect, hang=True),
    ],
    ids=["accept-never", "hello-hangs", "claim-hangs", "collect-hangs"],
)
async def test_one_wedged_daemon_among_ten_costs_exactly_the_bound(
    dirs: Dirs,
    wedge: Behavior,
    sink_kind: str,
    bound: float | None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    waited = SWEEP_BOUND if bound is None else bound
    with no_fd_leak():
        sims = [sim_at(i + 1) for i in range(10)]
        wedged = sims[6]
        wedged.behavior = wedge
        kids = {sim: [sim.add_child(["vim"]), sim.add_child(["sh"])] for sim in sims}
        for sim in sims:
            sim.add_child(["make"]).exit(2)
        with contextlib.ExitStack() as stack:
            sink: OrphanSink
            if sink_kind == "store":
                sink = StoreSink(stack.enter_context(ArrangementStore.open(dirs.root / "a.db")))
            else:
                sink = MemorySink()
            async with serving(*sims):
                t0 = trio.current_time()
                report = await sweep_within(sink, bound=bound)
                # Not a moment more than the bound, and every healthy daemon done.
                assert trio.current_time() - t0 == waited
                by_socket: dict[str, list[SweepRow]] = {}
                for r in report.rows:
                    by_socket.setdefault(r.socket, []).append(r)
                assert list(by_socket) == [str(s.socket_path) for s in sims]  # by number
                expected = []
                for sim in sims:
                    rows = by_socket[str(sim.socket_path)]
                    if sim is wedged:
                        continue
                    assert actions(rows) == {"adopted": 2, "ended": 1}, rows
                    expected += [ref_of(sim, k) for k in kids[sim]]
                wedged_rows = by_socket[str(wedged.socket_path)]
                if wedge.rule(Collect).hang:
                    # The claim was answered, so its running orphans are
                    # adopted; the exited one waits for the next sweep.
                    assert [(r.state, r.action) for r in wedged_rows] == [
                        ("live", "ended"),
                        ("live", "adopted"),
                        ("live", "adopted"),
                    ]
                    assert "not collected" in wedged_rows[0].detail
                    expected += [ref_of(wedged, k) for k in kids[wedged]]
                else:
                    assert [(r.state, r.action) for r in wedged_rows] == [("unresponsive", "retry")]
                    assert f"did not answer within {waited:g} s" in wedged_rows[0].detail
                assert sorted(orphan_refs(sink.arrangement())) == sorted(expected)
                # Nothing stays held by the sweep, wedged or not.
                for sim in sims:
                    await connections_settle(sim, 0)
                    assert not any(c.held for c in sim.children)


async def test_the_bound_is_the_callers(dirs: Dirs, autojump_clock: trio.testing.MockClock) -> None:
    quick, slow = sim_at(1), sim_at(2, behavior=Behavior.on(Hello, delay=0.75))
    quick.add_child(["make"]).exit(0)  # collected: no thread, so the clock is exact
    slow.add_child(["vim"])
    sink = MemorySink()
    async with serving(quick, slow):
        report = await sweep_within(sink, bound=0.5)
        assert trio.current_time() == 0.5
        assert [(r.state, r.action) for r in report.rows] == [
            ("live", "ended"),
            ("unresponsive", "retry"),
        ]
        assert "within 0.5 s" in report.rows[1].detail
        assert sink.current == Arrangement()
        # Adopted by the next sweep, given a longer bound.
        report = await sweep(sink, bound=1.0)
        assert actions(report.rows) == {"none": 1, "adopted": 1}
    assert len(orphan_leaves(sink.current)) == 1


# --- exited orphans, adopt=False, stale sockets ---------------------------------------


async def test_exited_orphans_are_reported_with_their_code_and_collected(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    sim = sim_at(1)
    codes = {"ok": 0, "failed": 3, "killed": -9}
    for name, code in codes.items():
        sim.add_child(["make", name], name=name).exit(code)
    sink = MemorySink()
    async with serving(sim):
        dry = await sweep(sink, adopt=False)
        assert [(r.action, r.name, r.exit_code) for r in dry.rows] == [
            ("would-collect", name, code) for name, code in codes.items()
        ]
        assert "exited with code 3" in dry.rows[1].detail
        assert [c.name for c in sim.children] == list(codes)

        report = await sweep(sink)
        assert [(r.state, r.action, r.exit_code) for r in report.rows] == [
            ("live", "ended", code) for code in codes.values()
        ]
        for r, (name, code) in zip(report.rows, codes.items(), strict=True):
            assert r.detail == f"orphan {name} had ended ({describe_exit(code)}); collected"
        assert sim.children == []
        assert sink.current == Arrangement()  # nothing to show for them
        assert (await sweep(sink)).rows == [
            SweepRow(str(sim.socket_path), "live", "none", detail="0 children, no orphans")
        ]


async def test_adopt_false_changes_nothing(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    sim = sim_at(1)
    running = sim.add_child(["vim"], name="ed")
    running.write_output(b"kept in the daemon\r\n")
    sim.add_child(["make"], name="mk").exit(1)
    stale = DaemonPaths.for_number(5).socket
    dead_socket(stale)
    path = dirs.root / "a.sqlite3"
    with ArrangementStore.open(path) as store:
        before = store.load()
        async with serving(sim):
            for _ in range(2):  # idempotent too
                dry = await sweep(StoreSink(store), adopt=False)
                assert [(r.socket, r.state, r.action, r.name) for r in dry.rows] == [
                    (str(sim.socket_path), "live", "would-adopt", "ed"),
                    (str(sim.socket_path), "live", "would-collect", "mk"),
                    (str(stale), "stale", "would-remove", ""),
                ]
            assert only_hellos(sim)  # no claim, no collect, no release
            assert [c.name for c in sim.children] == ["ed", "mk"]
            assert not running.held and running.buffered == b"kept in the daemon\r\n"
            assert stale.exists()
            assert store.load() == before

            # The same sweep with adopt=True does it all.
            done = await sweep(StoreSink(store))
            # Exited ones are collected first, while the daemon is bounded; then the
            # running ones are recorded.
            assert [r.action for r in done.rows] == ["ended", "adopted", "removed"]
            assert not stale.exists()
            # The output the child wrote while nobody held it is still there
            # for the first attach (claimed with keep_output).
            await connections_settle(sim, 0)
            assert running.buffered == b"kept in the daemon\r\n" and not running.held
        [adopted] = orphan_leaves(store.load())
        assert adopted.name == "ed" and adopted.notice == ORPHAN_NOTICE.encode()


async def test_an_orphan_whose_argv_is_not_utf8_is_reported_escaped_and_kept_byte_exact(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    sim = sim_at(1)
    argv = ["vim", os.fsdecode(b"caf\xe9.txt")]
    sim.add_child(argv, name="ed", cwd=os.fsdecode(b"/src/caf\xe9"))
    sink = MemorySink()
    async with serving(sim):
        [dry] = (await sweep(sink, adopt=False)).rows
        assert dry.detail == "vim caf\\xe9.txt"  # a report can print it
        [done] = (await sweep(sink)).rows
        assert done.action == "adopted" and done.detail.endswith(": vim caf\\xe9.txt")
    [leaf] = orphan_leaves(sink.current)
    assert leaf.title == "vim caf\\xe9.txt"
    assert leaf.argv == argv and os.fsencode(leaf.cwd) == b"/src/caf\xe9"  # relaunched as they were


async def test_a_stale_socket_is_removed_only_when_its_lock_is_free(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    sock = DaemonPaths.for_number(3).socket
    lock = sock.with_name(sock.name + ".lock")
    dead_socket(sock)
    lock_fd = try_lock(lock)  # a daemon starting (or exiting) holds it
    try:
        report = await sweep(MemorySink())
        assert [(r.state, r.action) for r in report.rows] == [("unresponsive", "retry")]
        assert "lock is held" in report.rows[0].detail
        assert sock.exists() and lock.exists()
    finally:
        os.close(lock_fd)
    report = await sweep(MemorySink())
    assert [(r.socket, r.state, r.action) for r in report.rows] == [(str(sock), "stale", "removed")]
    assert not sock.exists() and not lock.exists()
    assert (await sweep(MemorySink())).rows == []  # idempotent: nothing left


# --- where the sweep looks, and what it refuses ----------------------------------------


async def test_the_fallback_dir_is_swept_too(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    dirs.fallback.mkdir(mode=0o700)
    here, there = sim_at(1), SimDaemon(dirs.fallback / "multiserver-daemon-2.socket")
    for sim in (here, there):
        sim.add_child(["vim"])
    async with serving(here, there):
        report = await sweep(MemorySink())
    assert [(r.socket, r.action) for r in report.rows] == [
        (str(here.socket_path), "adopted"),
        (str(there.socket_path), "adopted"),
    ]


async def test_an_unsafe_dir_is_refused_and_its_sockets_never_touched(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    dirs.fallback.mkdir(mode=0o700)
    ok = sim_at(1)
    ok.add_child(["vim"])
    there = SimDaemon(dirs.fallback / "multiserver-daemon-2.socket")
    there.add_child(["vim"])
    stale = dirs.fallback / "multiserver-daemon-3.socket"
    dead_socket(stale)
    async with serving(ok, there):
        os.chmod(dirs.fallback, 0o755)  # others may read it now
        report = await sweep(MemorySink())
    assert [(r.socket, r.state, r.action) for r in report.rows] == [
        (str(dirs.fallback), "refused", "skipped"),
        (str(ok.socket_path), "live", "adopted"),
    ]
    assert "dir not swept" in report.rows[0].detail and "0755" in report.rows[0].detail
    assert there.received == [] and stale.exists()


async def test_a_symlink_is_reported_and_never_connected_to(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    elsewhere = dirs.root / "elsewhere"
    target = SimDaemon(elsewhere / "d.sock")  # a live daemon the sweep must not reach
    target.add_child(["vim"])
    link = DaemonPaths.for_number(8).socket
    link.symlink_to(target.socket_path)
    async with serving(target):
        report = await sweep(MemorySink())
        assert [(r.socket, r.state, r.action) for r in report.rows] == [
            (str(link), "refused", "skipped")
        ]
        assert "not a socket" in report.rows[0].detail
        assert target.received == []  # any connection would have said Hello
        assert not target.children[0].held
    assert link.is_symlink()  # reported, not removed: it is not ours to judge


async def test_a_failing_store_costs_only_that_child(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    @attrs.define
    class FlakySink:
        inner: MemorySink
        fail_on: set[tuple[str, int]]  # (socket, child id)

        def arrangement(self) -> Arrangement:
            return self.inner.arrangement()

        def record(self, child: ChildInfo, socket: str, instance_id: str) -> SessionLeaf | None:
            if (socket, child.id) in self.fail_on:
                raise StoreError("database is locked")
            return self.inner.record(child, socket, instance_id)

    a, b = sim_at(1), sim_at(2)
    first = a.add_child(["vim"])
    a.add_child(["top"])
    b.add_child(["sh"])
    sink = FlakySink(MemorySink(), {(str(a.socket_path), first.id)})
    async with serving(a, b):
        report = await sweep(sink)
        assert [(r.socket, r.action) for r in report.rows] == [
            (str(a.socket_path), "retry"),
            (str(a.socket_path), "adopted"),
            (str(b.socket_path), "adopted"),
        ]
        assert "not recorded: database is locked" in report.rows[0].detail
        # Given back, and adopted by the next sweep once the store works.
        await connections_settle(a, 0)
        assert not first.held
        sink.fail_on.clear()
        assert actions((await sweep(sink)).rows) == {"adopted": 1, "none": 1}
    assert len(orphan_leaves(sink.inner.current)) == 3


async def test_a_held_child_is_left_alone_and_a_lost_claim_race_is_a_clean_refusal(
    dirs: Dirs, autojump_clock: trio.testing.MockClock
) -> None:
    sim = sim_at(1, behavior=Behavior.on(Claim, delay=1))
    kids = [sim.add_child(["vim"], name="ed"), sim.add_child(["top"], name="mon")]
    async with serving(sim), open_client(sim.socket_path) as other:
        got = []
        async with trio.open_nursery() as nursery:

            async def grab() -> None:
                got.extend(await other.claim([k.id for k in kids]))

            nursery.start_soon(grab)
            await trio.testing.wait_all_tasks_blocked()  # its claim is read: answered at t = 1
            sim.behavior = Behavior.on(Claim, delay=2)  # the sweep's: at t = 2
            # At the sweep's hello nobody holds them yet, so both look like
            # orphans; by its claim the other client has them.
            report = await sweep_within(MemorySink(), bound=5)
        assert trio.current_time() == 2
        assert [(r.action, r.detail) for r in report.rows] == [
            ("skipped", "already held by another client")
        ] * 2
        assert [k.holder for k in kids] == [1, 1]
        # Once held, they are no orphans at all.
        sim.behavior = Behavior()
        assert actions((await sweep(MemorySink())).rows) == {"none": 1}
        for r in got:
            assert r.master is not None
            os.close(r.master)


@pytest.mark.parametrize(
    "broken",
    [
        Behavior.on(Hello, refuse=True),
        Behavior.on(Hello, garbage=True),
        Behavior.on(Hello, close=True),
        Behavior.on(Claim, crash_mid_frame=True),
        Behavior.on(Claim, garbage=True),
        Behavior.on(Claim, wrong_version=True),
        Behavior.on(Claim, close=True),
    ],
    ids=[
        "hello-refused",
        "hello-garbage",
        "hello-closed",
        "claim-crash",
        "claim-garbage",
        "claim-version",
        "claim-closed",
    ],
)
async def test_a_broken_daemon_is_reported_and_the_others_are_swept(
    dirs: Dirs, broken: Behavior, autojump_clock: trio.testing.MockClock
) -> None:
    with no_fd_leak():
        healthy, bad = sim_at(1), sim_at(2, behavior=broken)
        healthy.add_child(["vim"])
        odd = bad.add_child(["top"])
        sink = MemorySink()
        async with serving(healthy, bad):
            report = await sweep_within(sink)
            assert trio.current_time() == 0.0  # an error is an answer: no waiting
            assert [(r.socket, r.state, r.action) for r in report.rows] == [
                (str(healthy.socket_path), "live", "adopted"),
                (str(bad.socket_path), "unresponsive", "retry"),
            ]
            assert report.rows[1].detail
            await connections_settle(bad, 0)
            assert not odd.held
        assert orphan_refs(sink.current) == [ref_of(healthy, healthy.children[0])]
