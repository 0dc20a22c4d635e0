"""A host's answer to restore after its timeout (``adopter/_late_host.py``,
``host_orphan`` and ``host_orphan_leaf``): pure, and the sinks' one
transaction. No ssh, no daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adopter import (
    ORPHAN_NOTICE,
    ORPHAN_WINDOW,
    MemorySink,
    StoreSink,
    host_orphan,
    host_orphan_leaf,
    late_host,
)
from restore import (
    Arrangement,
    ArrangementStore,
    HostAnswer,
    HostChild,
    Options,
    RestorationRef,
    SessionLeaf,
    Tab,
    Window,
)
from tests.adopter.test_policy import child

SOCK = "/run/user/0/multiserver/multiserver-daemon-1.socket"
THERE = "i-there"  # the instance of the host's daemon
RELAUNCH, NO_RELAUNCH = Options(), Options(relaunch=False)


def saved(name: str, child_id: int, instance: str = THERE) -> SessionLeaf:
    host = name.partition(":")[0]
    ref = RestorationRef(SOCK, instance, child_id, 500 + child_id)
    return SessionLeaf(name, ["sh"], "/srv", ref=ref, host=host)


def arranged(*leaves: SessionLeaf) -> Arrangement:
    return Arrangement([Window("main", [Tab(x) for x in leaves])])


def there(id: int, name: str, *, via: str | None = None, **kw: Any) -> HostChild:
    return HostChild(SOCK, THERE, child(id, name=name, **kw), via=via)


def listed(host: str, *children: HostChild) -> HostAnswer:
    sessions = {
        c.child.name: (c.instance_id, c.child.id, c.child.pid, c.child.state, c.child.exit_code)
        for c in children
        if c.via is None
    }
    return HostAnswer("listed", host, sessions, children=children)


def test_a_late_answer_finds_restarts_and_adopts() -> None:
    web, job = saved("db1:web", 1), saved("db1:job", 2)
    arrangement = arranged(web, job, saved("db2:other", 9, instance="elsewhere"))
    answer = listed("db1", there(1, "web"), there(3, "x"))
    plan = late_host(arrangement, "db1", answer, RELAUNCH)
    decided = {leaf.name: d for leaf, d in plan.saved}
    assert set(decided) == {"db1:web", "db1:job"}  # only this host's
    assert (decided["db1:web"].outcome, decided["db1:web"].relaunch) == ("attached", False)
    assert (decided["db1:job"].outcome, decided["db1:job"].relaunch) == ("relaunched", True)
    assert [c.child.name for c in plan.adopt] == ["x"]
    no_relaunch = late_host(arrangement, "db1", answer, NO_RELAUNCH)
    assert {leaf.name: d.outcome for leaf, d in no_relaunch.saved}["db1:job"] == "expired"


def test_a_host_that_never_answered_gives_nothing() -> None:
    arrangement = arranged(saved("db1:web", 1))
    silent = HostAnswer("silent", "db1", why="db1: no answer within 8 s")
    plan = late_host(arrangement, "db1", silent, RELAUNCH)
    assert (plan.saved, plan.adopt) == ([], [])


def test_a_late_failure_or_credential_is_each_sessions_outcome() -> None:
    arrangement = arranged(saved("db1:web", 1))
    failed = late_host(arrangement, "db1", HostAnswer("failed", "db1", why="refused"), RELAUNCH)
    assert [(leaf.name, d.outcome, d.detail) for leaf, d in failed.saved] == [
        ("db1:web", "failed", "refused")
    ]
    locked = late_host(arrangement, "db1", HostAnswer("credential", "db1"), RELAUNCH)
    assert [d.outcome for _, d in locked.saved] == ["deferred"]


def test_what_is_not_a_host_orphan() -> None:
    arrangement = arranged(saved("db1:web", 1), saved("alias:db", 4), saved("db1:job", 2))
    cases = {
        "its host's host's": there(10, "far", via="db9"),
        "ended": there(11, "done", state="exited"),
        "held there": there(12, "busy", held=True),
        # Another name for the same machine saved it: instance + child id.
        "saved by another name": there(4, "db"),
        # A daemon there has one child of a name: the saved session's.
        "its saved session's name": there(13, "job"),
    }
    whys = {what: host_orphan(c, "db1", arrangement) for what, c in cases.items()}
    assert all(why is not None for why in whys.values()), whys
    assert "db9" in str(whys["its host's host's"])
    assert "saved session db1:job" in str(whys["its saved session's name"])
    assert host_orphan(there(14, "x"), "db1", arrangement) is None


def test_a_relaunch_under_another_name_for_the_machine_is_not_adopted() -> None:
    """``alias:job`` lived on this daemon there and was started again by its
    own host name (its new child not recorded yet): the child called job
    is its, not an orphan of db1."""
    arrangement = arranged(saved("alias:job", 2))
    assert host_orphan(there(7, "job"), "db1", arrangement) is not None
    # On another run of the daemon there, a job is nobody's.
    other_run = arranged(saved("alias:job", 2, instance="an earlier run"))
    assert host_orphan(there(7, "job"), "db1", other_run) is None


def test_a_local_leaf_with_the_same_child_refuses_it_too() -> None:
    """Referenced is by instance and child id, whatever the leaf's host or
    socket: an instance id names one run of one daemon anywhere."""
    local = SessionLeaf("here", ["sh"], "/", ref=RestorationRef("/other.sock", THERE, 5, 1))
    assert host_orphan(there(5, "x"), "db1", arranged(local)) is not None


def test_the_adopted_leaf_is_host_name_with_its_ref_and_the_notice() -> None:
    found = there(3, "x", argv=["sleep", "1000"], cwd="/srv/app")
    leaf = host_orphan_leaf(arranged(saved("db1:web", 1)), "db1", found)
    assert leaf is not None
    assert (leaf.name, leaf.host, leaf.argv, leaf.cwd, leaf.title) == (
        "db1:x",
        "db1",
        ["sleep", "1000"],
        "/srv/app",
        "sleep 1000",
    )
    assert leaf.ref == RestorationRef(SOCK, THERE, 3, found.child.pid)
    assert leaf.notice == ORPHAN_NOTICE.encode()
    assert leaf.created_at == found.child.started_at
    assert host_orphan_leaf(arranged(leaf), "db1", found) is None


def test_memory_sink_records_a_host_orphan_once() -> None:
    sink = MemorySink(arranged(saved("db1:web", 1)))
    found = there(3, "x")
    made = sink.record_host("db1", found)
    assert made is not None and made.name == "db1:x"
    assert sink.record_host("db1", found) is None
    # Nor by another name for the machine.
    assert sink.record_host("alias", found) is None
    window = sink.current.window(ORPHAN_WINDOW)
    assert window is not None and [t.root for t in window.tabs] == [made]


def test_store_sink_refuses_a_child_saved_since_the_plan(tmp_path: Path) -> None:
    """The plan saw an orphan; by the transaction another host name's
    restore had saved it: nothing is added."""
    with ArrangementStore.open(tmp_path / "s.db") as store:
        store.add_session(saved("db1:web", 1))
        sink = StoreSink(store)
        plan = late_host(
            store.load(), "db1", listed("db1", there(1, "web"), there(3, "x")), RELAUNCH
        )
        assert [c.child.name for c in plan.adopt] == ["x"]
        store.add_session(saved("alias:x", 3))
        assert sink.record_host("db1", plan.adopt[0]) is None
        assert store.load().find("db1:x") is None
        # Without it, once, durably, with its notice.
        store.remove_session("alias:x")
        made = sink.record_host("db1", plan.adopt[0])
        assert made is not None and sink.record_host("db1", plan.adopt[0]) is None
    with ArrangementStore.open(tmp_path / "s.db") as store:
        again = store.load().find("db1:x")
        assert again is not None and again.notice == ORPHAN_NOTICE.encode()
        window = store.load().window(ORPHAN_WINDOW)
        assert window is not None and [t.root for t in window.tabs] == [again]
