"""The pure planner (restore/_plan.py): grouping leaves by daemon, matching
them to the children a daemon reports (by instance id and child id, never by
pid), and the outcome rules for every answer and option. No I/O, no trio."""

from __future__ import annotations

import errno
from typing import Any

import attrs
import pytest

from multiserver import ChildInfo
from multiserver.internal import replaced, screen_reset
from restore import Arrangement, PendingLaunch, RestorationRef, SessionLeaf, Split, Tab, Window
from restore._plan import (
    ATTACH_SHARE,
    KEPT_ENDED,
    OUTCOMES,
    RELAUNCH_MARKER,
    ClaimAnswer,
    DaemonTarget,
    Decision,
    HostAnswer,
    LaunchAnswer,
    Options,
    RestoreDeadline,
    decide_claimed,
    decide_gone,
    decide_held,
    decide_remote,
    decide_saved_end,
    decide_timed_out,
    decide_unsettled,
    match_children,
    plan_restore,
    relaunch_notice,
    settle_launch,
)

SOCK_A = "/run/ms/multiserver-daemon-1.socket"
SOCK_B = "/run/ms/multiserver-daemon-2.socket"
RELAUNCH = Options()
NO_RELAUNCH = Options(relaunch=False)
RELAUNCH_ENDED = Options(relaunch_ended=True)
EVERY_OPTION = [Options(relaunch=r, relaunch_ended=e) for r in (True, False) for e in (False, True)]


def leaf(name: str, ref: RestorationRef | None = None, **kw: Any) -> SessionLeaf:
    return SessionLeaf(name, ["sh"], "/", ref=ref, **kw)


def ref(
    socket: str = SOCK_A, instance: str = "inst-a", child_id: int = 1, pid: int = 100
) -> RestorationRef:
    return RestorationRef(socket, instance, child_id, pid)


def child(child_id: int, pid: int = 100, *, exit_code: int | None = None) -> ChildInfo:
    return ChildInfo(
        id=child_id,
        pid=pid,
        name=f"c{child_id}",
        argv=["sh"],
        cwd="/",
        tty=f"/dev/pts/{child_id}",
        rows=24,
        cols=80,
        state="running" if exit_code is None else "exited",
        exit_code=exit_code,
        held=False,
        buffered_bytes=0,
        dropped_bytes=0,
        started_at=0.0,
        exited_at=None if exit_code is None else 1.0,
        linger=None,
    )


# --- plan_restore --------------------------------------------------------------------


def test_plan_groups_leaves_by_daemon_socket_in_arrangement_order() -> None:
    a1, a2 = leaf("a1", ref(SOCK_A, child_id=1)), leaf("a2", ref(SOCK_A, child_id=2))
    b1 = leaf("b1", ref(SOCK_B, "inst-b", 1))
    new = leaf("new")
    arrangement = Arrangement(
        [
            Window("main", [Tab(Split(True, [a1, Split(False, [b1, new])])), Tab(a2)]),
            Window("other", [Tab(leaf("late", ref(SOCK_B, "inst-b", 2)))]),
        ]
    )
    plan = plan_restore(arrangement)
    assert [t.socket for t in plan.targets] == [SOCK_A, SOCK_B]
    assert [x.name for x in plan.targets[0].leaves] == ["a1", "a2"]
    assert [x.name for x in plan.targets[1].leaves] == ["b1", "late"]
    assert plan.unreferenced == (new,)


def test_plan_of_an_empty_arrangement_has_nothing_to_do() -> None:
    plan = plan_restore(Arrangement())
    assert plan.targets == () and plan.unreferenced == ()


def test_every_leaf_is_in_the_plan_exactly_once() -> None:
    leaves = [
        leaf(f"s{i}", ref(SOCK_A if i % 2 else SOCK_B, child_id=i) if i % 3 else None)
        for i in range(12)
    ]
    plan = plan_restore(Arrangement([Window("main", [Tab(x) for x in leaves])]))
    planned = [*plan.unreferenced, *(x for t in plan.targets for x in t.leaves)]
    assert sorted(x.name for x in planned) == sorted(x.name for x in leaves)


# --- match_children ------------------------------------------------------------------


def test_match_claims_leaves_whose_child_the_daemon_reports() -> None:
    target = DaemonTarget(SOCK_A, (leaf("x", ref(child_id=1)), leaf("y", ref(child_id=2))))
    to_claim, gone = match_children(target, "inst-a", [child(1), child(2), child(3)])
    assert [x.name for x in to_claim] == ["x", "y"] and gone == []


def test_match_another_instance_means_every_child_is_gone() -> None:
    target = DaemonTarget(SOCK_A, (leaf("x", ref(child_id=1)), leaf("y", ref(child_id=2))))
    # The restarted daemon happens to have children with the same ids.
    to_claim, gone = match_children(target, "inst-new", [child(1), child(2)])
    assert to_claim == []
    assert [g.leaf.name for g in gone] == ["x", "y"]
    assert all("another instance" in g.reason for g in gone)


def test_match_unknown_child_id_is_gone() -> None:
    target = DaemonTarget(SOCK_A, (leaf("x", ref(child_id=1)), leaf("y", ref(child_id=7))))
    to_claim, gone = match_children(target, "inst-a", [child(1)])
    assert [x.name for x in to_claim] == ["x"]
    assert [(g.leaf.name, g.reason) for g in gone] == [("y", "child 7 is unknown to the daemon")]


def test_match_never_uses_the_pid() -> None:
    # Same id, another pid (pids are not trusted, ids are): claimed.
    same_id = DaemonTarget(SOCK_A, (leaf("x", ref(child_id=1, pid=100)),))
    to_claim, gone = match_children(same_id, "inst-a", [child(1, pid=999)])
    assert [x.name for x in to_claim] == ["x"] and gone == []
    # The saved pid is alive under another id (a reused pid): gone.
    same_pid = DaemonTarget(SOCK_A, (leaf("y", ref(child_id=2, pid=100)),))
    to_claim, gone = match_children(same_pid, "inst-a", [child(5, pid=100)])
    assert to_claim == [] and [g.leaf.name for g in gone] == ["y"]
    # Same pid and id on another instance: still gone.
    to_claim, gone = match_children(same_id, "inst-b", [child(1, pid=100)])
    assert to_claim == [] and len(gone) == 1


def test_match_with_no_children_reported() -> None:
    target = DaemonTarget(SOCK_A, (leaf("x", ref(child_id=1)),))
    to_claim, gone = match_children(target, "inst-a", [])
    assert to_claim == [] and [g.leaf.name for g in gone] == ["x"]


def test_match_without_a_listing_leaves_unknown_ids_to_the_claim() -> None:
    # Restore does not ask for the list: every leaf of the same instance is
    # claimed, and the claim answers ENOENT for a child the daemon lacks.
    target = DaemonTarget(SOCK_A, (leaf("x", ref(child_id=1)), leaf("y", ref(child_id=7))))
    to_claim, gone = match_children(target, "inst-a")
    assert [x.name for x in to_claim] == ["x", "y"] and gone == []
    to_claim, gone = match_children(target, "inst-b")
    assert to_claim == [] and [g.leaf.name for g in gone] == ["x", "y"]


# --- decide_claimed ------------------------------------------------------------------


@pytest.mark.parametrize("options", EVERY_OPTION)
def test_claimed_running_child_is_attached(options: Options) -> None:
    d = decide_claimed(ClaimAnswer(child(1, pid=4321)), options)
    assert d == Decision("attached", "pid 4321", relaunch=False, collect=False, close=False)


@pytest.mark.parametrize("options", [RELAUNCH, NO_RELAUNCH])
def test_claimed_exited_child_is_ended_and_kept_for_a_person(options: Options) -> None:
    d = decide_claimed(ClaimAnswer(child(1, exit_code=3)), options)
    assert d.outcome == "ended"
    assert d.detail == f"session ended (exited with code 3); {KEPT_ENDED}"
    # Neither collected nor closed: nobody has seen its output yet.
    assert (d.relaunch, d.collect, d.close) == (False, False, False)


def test_claimed_child_killed_by_a_signal_says_which_signal() -> None:
    d = decide_claimed(ClaimAnswer(child(1, exit_code=-9)), RELAUNCH)
    assert (d.outcome, d.detail) == ("ended", f"session ended (killed by SIGKILL); {KEPT_ENDED}")
    d = decide_claimed(ClaimAnswer(child(1, exit_code=-1)), RELAUNCH_ENDED)
    assert d.detail == "had ended (killed by SIGHUP); started again"


@pytest.mark.parametrize("options", [RELAUNCH_ENDED, Options(relaunch=False, relaunch_ended=True)])
def test_relaunch_ended_starts_an_exited_session_again(options: Options) -> None:
    d = decide_claimed(ClaimAnswer(child(1, exit_code=0)), options)
    assert d.outcome == "relaunched"
    assert d.detail == "had ended (exited with code 0); started again"
    # Collected (its status was read) but not closed: the session lives on.
    assert (d.relaunch, d.collect, d.close) == (True, True, False)


def test_claim_of_an_unknown_child_is_gone_and_relaunched_or_expired() -> None:
    answer = ClaimAnswer(None, errno.ENOENT, "no child 1")
    assert decide_claimed(answer, RELAUNCH) == decide_gone(
        "the child is unknown to the daemon", RELAUNCH
    )
    d = decide_claimed(answer, NO_RELAUNCH)
    assert d.outcome == "expired" and d.relaunch is False


@pytest.mark.parametrize("options", EVERY_OPTION)
def test_claim_of_a_child_held_elsewhere_leaves_it_there(options: Options) -> None:
    # Another terminal (or another restore) holds it: it runs, nothing to do.
    d = decide_claimed(ClaimAnswer(None, errno.EBUSY, "session x is held"), options)
    assert d.outcome == "held"
    assert "held by another client" in d.detail
    assert (d.relaunch, d.collect, d.close) == (False, False, False)


def test_other_claim_errors_fail_with_the_daemons_message_or_errno() -> None:
    d = decide_claimed(ClaimAnswer(None, errno.EPERM, "not yours"), RELAUNCH)
    assert (d.outcome, d.detail, d.relaunch) == ("failed", "not yours", False)
    d = decide_claimed(ClaimAnswer(None, errno.EIO), RELAUNCH)
    assert (d.outcome, d.detail) == ("failed", f"claim failed (errno {errno.EIO})")


# --- decide_gone, decide_timed_out -----------------------------------------------------


def test_gone_is_relaunched_unless_no_relaunch() -> None:
    d = decide_gone("daemon unreachable", RELAUNCH)
    assert d.outcome == "relaunched" and d.relaunch is True
    assert d.detail.startswith("daemon unreachable; ") and "new one started" in d.detail
    d = decide_gone("daemon unreachable", NO_RELAUNCH)
    assert (d.outcome, d.relaunch) == ("expired", False)
    assert d.detail == "daemon unreachable; --no-relaunch: nothing started"
    for options in EVERY_OPTION:
        assert decide_gone("x", options).collect is False
        assert decide_gone("x", options).close is False


# --- decide_saved_end ------------------------------------------------------------------


@pytest.mark.parametrize("options", [RELAUNCH, NO_RELAUNCH])
def test_a_leaf_that_saved_its_end_is_ended_when_its_daemon_is_gone(options: Options) -> None:
    ended = leaf("e", ref(), exit_code=4)
    d = decide_saved_end(ended, "its daemon is not running", options)
    assert d is not None
    assert (d.outcome, d.relaunch, d.collect, d.close) == ("ended", False, False, False)
    assert d.detail == (
        "session ended (exited with code 4); its daemon is not running;"
        f" its saved output is {KEPT_ENDED}"
    )


@pytest.mark.parametrize("options", [RELAUNCH_ENDED, Options(relaunch=False, relaunch_ended=True)])
def test_relaunch_ended_starts_a_leaf_that_saved_its_end_again(options: Options) -> None:
    d = decide_saved_end(leaf("e", ref(), exit_code=-1), "its daemon is not running", options)
    assert d is not None
    assert (d.outcome, d.relaunch) == ("relaunched", True)
    assert d.detail == "had ended (killed by SIGHUP); its daemon is not running; started again"
    assert d.reason == "its daemon is not running"


@pytest.mark.parametrize("options", EVERY_OPTION)
def test_a_leaf_that_did_not_end_is_left_to_decide_gone(options: Options) -> None:
    assert decide_saved_end(leaf("r", ref()), "gone", options) is None


def test_relaunch_ended_alone_does_not_change_gone_or_timed_out() -> None:
    assert decide_gone("x", RELAUNCH_ENDED) == decide_gone("x", RELAUNCH)
    assert decide_timed_out(10, RELAUNCH_ENDED) == decide_timed_out(10, RELAUNCH)


def test_timed_out_is_relaunched_unless_no_relaunch() -> None:
    d = decide_timed_out(10.0, RELAUNCH)
    assert d == Decision(
        "timed-out",
        "daemon did not answer within 10 s; new one started",
        relaunch=True,
        reason="daemon did not answer within 10 s",
    )
    d = decide_timed_out(0.25, NO_RELAUNCH)
    assert d == Decision(
        "timed-out",
        "daemon did not answer within 0.25 s; --no-relaunch: nothing started",
        relaunch=False,
        reason="daemon did not answer within 0.25 s",
    )


def remote_leaf() -> SessionLeaf:
    ref = RestorationRef("/run/ms/d.sock", "i1", 3, 99)
    return SessionLeaf("db1:web", ["sh"], "/srv", ref=ref, host="db1")


def test_a_session_on_another_host_from_its_hosts_answer() -> None:
    leaf = remote_leaf()
    live = HostAnswer("listed", "db1", {"web": ("i1", 3, 99, "running", None)})
    assert decide_remote(leaf, live, RELAUNCH) == Decision(
        "attached", "running on db1, pid 99", relaunch=False
    )
    ended = HostAnswer("listed", "db1", {"web": ("i1", 3, 99, "exited", 2)})
    assert decide_remote(leaf, ended, RELAUNCH).outcome == "ended"
    gone = decide_remote(leaf, HostAnswer("listed", "db1", {}), RELAUNCH)
    assert (gone.outcome, gone.relaunch) == ("relaunched", True)
    assert "gone from its host" in gone.detail
    assert decide_remote(leaf, HostAnswer("listed", "db1", {}), NO_RELAUNCH).outcome == "expired"
    # Another child of that name there (a relaunch whose record was lost):
    # it is the session now, never a second one started.
    other = HostAnswer("listed", "db1", {"web": ("i2", 1, 5, "running", None)})
    assert decide_remote(leaf, other, RELAUNCH) == Decision(
        "attached",
        "running on db1, pid 5 (not the saved child: web there is taken as it)",
        relaunch=False,
    )
    deferred = decide_remote(leaf, HostAnswer("credential", "db1"), RELAUNCH)
    assert deferred.outcome == "deferred" and not deferred.relaunch
    assert "`multiserver attach db1:web`" in deferred.detail
    silent = decide_remote(leaf, HostAnswer("silent", "db1", why="no answer in 2 s"), RELAUNCH)
    assert (silent.outcome, silent.relaunch) == ("timed-out", False)
    failed = decide_remote(leaf, HostAnswer("failed", "db1", why="refused"), RELAUNCH)
    assert (failed.outcome, failed.detail) == ("failed", "refused")


def test_every_outcome_is_reachable_from_the_rules() -> None:
    produced = {
        decide_claimed(ClaimAnswer(child(1)), RELAUNCH).outcome,
        decide_claimed(ClaimAnswer(child(1, exit_code=0)), RELAUNCH).outcome,
        decide_gone("x", RELAUNCH).outcome,
        decide_gone("x", NO_RELAUNCH).outcome,
        decide_timed_out(1, RELAUNCH).outcome,
        decide_claimed(ClaimAnswer(None, errno.EBUSY), RELAUNCH).outcome,
        decide_held(4242).outcome,
        decide_claimed(ClaimAnswer(None, errno.EIO), RELAUNCH).outcome,
        decide_remote(remote_leaf(), HostAnswer("credential", "db1"), RELAUNCH).outcome,
    }
    assert produced == set(OUTCOMES)


def test_a_session_held_by_a_client_whose_daemon_died_is_not_relaunched() -> None:
    assert decide_held(4242) == Decision(
        "held", "held by a client whose daemon died (pid 4242); not relaunched", relaunch=False
    )


# --- relaunch_notice -------------------------------------------------------------------


def test_notice_without_scrollback_is_the_marker_line() -> None:
    notice = relaunch_notice(leaf("x"), "daemon gone")
    assert notice == f"{RELAUNCH_MARKER}\r\n(daemon gone)\r\n".encode()


def test_notice_shows_scrollback_then_the_marker_on_its_own_line() -> None:
    notice = relaunch_notice(leaf("x", scrollback=b"$ make\r\nok"), "why")
    reset = screen_reset(b"$ make\r\nok\r\n")
    assert notice.startswith(b"$ make\r\nok\r\n" + reset + RELAUNCH_MARKER.encode())
    # Scrollback that ends a line gets no extra blank line.
    notice = relaunch_notice(leaf("x", scrollback=b"$ ls\r\n"), "why")
    assert notice.startswith(b"$ ls\r\n" + screen_reset(b"") + RELAUNCH_MARKER.encode())
    assert notice.endswith(b"\r\n(why)\r\n")


def test_notice_keeps_the_scrollback_byte_exact() -> None:
    scrollback = bytes(range(256)) + b"\x1b[31mred\x1b[0m\n"
    notice = relaunch_notice(leaf("x", scrollback=scrollback), "why")
    assert notice[: len(scrollback)] == scrollback
    assert notice.index(RELAUNCH_MARKER.encode()) > len(scrollback)


def test_the_old_programs_modes_end_before_the_marker() -> None:
    """The saved screen of a full-screen program (alternate screen, kitty
    keyboard flags, mouse, hidden cursor) ends before the marker: the new
    program does not start inside the old one's modes."""
    old = b"$ vim\r\n\x1b[?1049h\x1b[>1u\x1b[?1000h\x1b[?25l~\r\n~"
    notice = relaunch_notice(leaf("x", scrollback=old), "reboot")
    between = notice[len(old) : notice.index(RELAUNCH_MARKER.encode())]
    assert between == b"\r\n" + screen_reset(old + b"\r\n")
    for undone in (b"\x1b[<99u\x1b[?1049l", b"\x1b[?1000l", b"\x1b[?25h"):
        assert undone in between


def test_a_notice_nobody_saw_comes_before_the_newer_scrollback() -> None:
    # Relaunched twice and never attached between: nothing of the first
    # session is lost, nor shown twice.
    first = relaunch_notice(leaf("x", scrollback=b"first run\r\n"), "reboot 1")
    again = leaf("x", scrollback=b"second run\r\n", notice=first)
    notice = relaunch_notice(again, "reboot 2")
    reset = screen_reset(first + b"second run\r\n")
    assert notice.startswith(first + b"second run\r\n" + reset + RELAUNCH_MARKER.encode())
    assert notice.endswith(b"(reboot 2)\r\n") and notice.count(b"first run") == 1


# --- the restore's one deadline ---------------------------------------------------------


def test_the_phase_gets_its_share_of_the_one_deadline() -> None:
    d = RestoreDeadline.from_timeout(100.0, 10.0)
    assert (d.start, d.end) == (100.0, 110.0)
    assert d.attach_by == 100.0 + ATTACH_SHARE * 10.0
    assert d.start < d.attach_by < d.end  # some of it is left for the relaunches
    assert (d.seconds, d.attach_seconds) == (10.0, ATTACH_SHARE * 10.0)


def test_a_given_end_is_kept_and_never_before_the_start() -> None:
    assert RestoreDeadline.from_end(5.0, 7.5) == RestoreDeadline(5.0, 7.5)
    passed = RestoreDeadline.from_end(5.0, 1.0)  # it passed before the restore began
    assert passed.end == passed.attach_by == 5.0 and passed.seconds == 0.0
    assert RestoreDeadline.from_timeout(5.0, -1.0) == passed


def test_the_seconds_in_messages_are_rounded_to_the_millisecond() -> None:
    d = RestoreDeadline.from_end(0.1, 0.1 + 2.0000004)
    assert f"{d.seconds:g}" == "2" and f"{d.attach_seconds:g}" == "1.6"


# --- settling a relaunch an earlier restore did not record ----------------------------


def intent(socket: str = SOCK_B, instance: str = "inst-new") -> PendingLaunch:
    return PendingLaunch(socket, instance, 1.0)


def named(name: str, child_id: int, pid: int) -> ChildInfo:
    return replaced(child(child_id, pid), name=name)


def test_a_lost_relaunch_found_by_name_in_that_run_of_its_daemon_is_the_session() -> None:
    old = leaf("a", ref(SOCK_A, "inst-old", 3, 300), pending_launch=intent())
    answer = LaunchAnswer("inst-new", (named("b", 1, 10), named("a", 2, 20)))
    settled = settle_launch(old, answer, taken=set())
    assert settled.found
    assert settled.leaf == attrs.evolve(
        old, ref=RestorationRef(SOCK_B, "inst-new", 2, 20), pending_launch=None
    )


@pytest.mark.parametrize(
    ("answer", "taken", "why"),
    [
        (LaunchAnswer(None), set(), "its daemon is not running"),
        (LaunchAnswer("inst-later", (named("a", 2, 20),)), set(), "its daemon restarted since"),
        (LaunchAnswer("inst-new", (named("b", 2, 20),)), set(), "no child of that name"),
        (
            LaunchAnswer("inst-new", (named("a", 2, 20),)),
            {(SOCK_B, "inst-new", 2)},
            "child 2 is another session's",
        ),
    ],
    ids=["daemon-gone", "daemon-restarted", "no-such-child", "child-taken"],
)
def test_a_relaunch_that_did_not_happen_drops_the_intent_and_keeps_the_ref(
    answer: LaunchAnswer, taken: set[tuple[str, str, int]], why: str
) -> None:
    old = leaf("a", ref(SOCK_A, "inst-old", 3, 300), pending_launch=intent())
    settled = settle_launch(old, answer, taken)
    assert not settled.found and why in settled.detail
    assert settled.leaf == attrs.evolve(old, pending_launch=None)


def test_an_unsettled_intent_is_never_relaunched() -> None:
    d = decide_unsettled(SOCK_B)
    assert (d.outcome, d.relaunch, d.close) == ("timed-out", False, False)
    assert SOCK_B in d.detail
