"""The naming policy alone (``multiserver_cli._names``): pure, from a
``Survey``; tests/cli/test_names.py drives the same rules through the command."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from multiserver import ChildInfo
from multiserver.internal import replaced
from multiserver_cli._names import (
    Ambiguous,
    Create,
    DaemonView,
    Found,
    Missing,
    Refusal,
    SavedOnly,
    Survey,
    Unanswered,
    default_name,
    name_problem,
    new_name_conflict,
    pick_default,
    plan_new,
    resolve,
    sessions,
    taken,
)
from multiserver_cli._narrow import narrowed
from restore import RestorationRef, SessionLeaf, late_family, late_name
from tests.restore.test_plan import child as plan_child

RUN = Path("/run/ms")


@pytest.fixture(autouse=True)
def _run_is_a_socket_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """RUN is this login's socket dir: its daemons are labelled by number."""
    from multiserver_cli import _format

    monkeypatch.setattr(_format, "_DIRS", [str(RUN)])


def sock(n: int) -> Path:
    return RUN / f"multiserver-daemon-{n}.socket"


def child(id: int, name: str, exit_code: int | None = None) -> ChildInfo:
    return replaced(plan_child(id, exit_code=exit_code), name=name)


def leaf(name: str, n: int | None, instance: str = "i1", child_id: int = 1) -> SessionLeaf:
    ref = None if n is None else RestorationRef(str(sock(n)), instance, child_id, 1)
    return SessionLeaf(name, ["sh"], "/", ref=ref)


# "web" on daemon 1 is the late original of the saved "web" (on daemon 2);
# "dup" runs on both daemons, saved on neither (a race across daemons).
D1 = DaemonView(
    sock(1), "i1", 11, [child(1, "build"), child(2, "web"), child(3, "x", -1), child(4, "dup")]
)
D2 = DaemonView(sock(2), "i2", 12, [child(1, "web"), child(2, "2"), child(3, "dup")])
SURVEY = Survey(
    [D1, D2],
    silent=frozenset({str(sock(4))}),
    saved=[
        leaf("orphan-sh-1", 1, child_id=1),  # daemon 1 calls it "build"
        leaf("web", 2, "i2", 1),
        leaf("never", None),
        leaf("restarted", 2, "old"),
        leaf("gone", 2, "i2", 9),
        leaf("wedged", 4),
        leaf("down", 5),
    ],
)


def test_sessions_are_shown_by_their_saved_name_and_say_why_not_running() -> None:
    got = {(s.name, s.daemon, s.state) for s in sessions(SURVEY)}
    assert got == {
        ("orphan-sh-1", "1", "running"),
        ("web-late", "1", "running"),
        ("x", "1", "killed by SIGHUP"),
        ("dup", "1", "running"),
        ("web", "2", "running"),
        ("2", "2", "running"),
        ("dup", "2", "running"),
        ("never", "-", "saved, not running: never started"),
        ("restarted", "2", "saved, not running: daemon 2 restarted since"),
        ("gone", "2", "saved, not running: its program is gone from daemon 2"),
        ("wedged", "4", "saved, not running: daemon 4 did not answer"),
        ("down", "5", "saved, not running: daemon 5 is not running"),
    }


def test_one_name_one_session_a_late_original_is_name_late() -> None:
    """A child its daemon calls by a saved session's name, which is not that
    session's child, is listed and addressed as its late original; one that
    is the session's own relaunch (its record lost) is the session."""
    [late] = [s for s in sessions(SURVEY) if s.late_of]
    assert (late.name, late.daemon_name, late.late_of, late.saved) == (
        "web-late",
        "web",
        "web",
        False,
    )
    assert resolve(SURVEY, "web-late", command="attach") == Found(late)
    assert "web-late" in taken(SURVEY)
    # A name taken already: the next one.
    taken_too = Survey([D1, D2], saved=[*SURVEY.saved, leaf("web-late", None)])
    assert [s.name for s in sessions(taken_too) if s.late_of] == ["web-late2"]
    # The session's own relaunch, its record lost: it lived on daemon 1.
    lost = Survey([D1], saved=[leaf("web", 1, "i0", 7)])
    shown = [(s.name, s.child is not None, s.late_of) for s in sessions(lost) if "web" in s.name]
    assert shown == [("web", True, "")]


def test_taken_names_and_the_smallest_free_default() -> None:
    assert {"build", "orphan-sh-1", "web", "x", "2", "never", "down"} <= taken(SURVEY)
    assert pick_default(SURVEY) == "1"
    assert pick_default(SURVEY, refused=["1"]) == "3"
    assert default_name(set()) == "1" and default_name({"1", "2", "4"}) == "3"


@pytest.mark.parametrize(
    ("name", "new", "problem"),
    [
        ("", True, "a session name cannot be empty (leave -n out for the next free number)"),
        ("", False, "a session name cannot be empty"),
        ("-x", False, "bad session name '-x': use letters"),
        ("a\n", False, "bad session name 'a\\n'"),
        ("orphan-vim-1", True, "bad session name 'orphan-vim-1': names beginning 'orphan-'"),
        ("orphan-vim-1", False, None),  # attach, peek, kill take it
        ("orphans", True, None),
        ("a" * 128, True, None),
    ],
)
def test_empty_bad_and_reserved_names(name: str, new: bool, problem: str | None) -> None:
    got = name_problem(name, new=new)
    assert got == problem if problem is None else got is not None and got.startswith(problem)


def test_a_new_name_in_use_says_where() -> None:
    assert new_name_conflict(SURVEY, "dup") == (
        "a session named 'dup' exists already (on daemon 1, running; on daemon 2, running);"
        " choose another name, or attach to it"
    )
    assert new_name_conflict(SURVEY, "down") == (
        "a session named 'down' is saved, not running: daemon 5 is not running;"
        " `multiserver restore` brings it back, `multiserver kill down` forgets it;"
        " or choose another name"
    )
    assert new_name_conflict(SURVEY, "build") == (
        "the name 'build' is taken: daemon 1 calls the session 'orphan-sh-1' so;"
        " choose another name"
    )
    assert new_name_conflict(SURVEY, "free") is None


def test_resolve_finds_one_refuses_several_and_finds_saved_sessions_anywhere() -> None:
    assert resolve(SURVEY, "2", command="peek") == Found(sessions(SURVEY)[5])
    several = resolve(SURVEY, "dup", command="kill")
    assert several == Ambiguous(
        "several sessions are named 'dup': on daemon 1 (running), daemon 2 (running);"
        " choose one with --daemon N, e.g. multiserver --daemon 2 kill dup"
    )
    one = resolve(SURVEY, "dup", command="kill", scope=sock(1))
    assert isinstance(one, Found) and one.session.daemon == "1" and not one.session.saved
    web = resolve(SURVEY, "web", command="kill")
    assert isinstance(web, Found) and web.session.daemon == "2" and web.session.saved
    down = resolve(SURVEY, "down", command="kill", scope=sock(1))
    assert isinstance(down, SavedOnly) and down.session.leaf == leaf("down", 5)
    assert resolve(SURVEY, "build", command="attach", scope=sock(1)) == Missing(
        "no session named 'build' (daemon 1 calls the session 'orphan-sh-1' so)"
    )
    assert resolve(SURVEY, "2", command="peek", scope=sock(1)) == Missing("no session named '2'")


def test_a_name_no_daemon_that_answered_has_is_not_missing_while_one_did_not() -> None:
    """Daemon 4 did not answer: a session of any name may be there. Only
    with the daemons that answered in scope is a name missing."""
    assert resolve(SURVEY, "build", command="kill") == Unanswered(
        "cannot tell whether there is a session named 'build': daemon 4 did not answer"
        " (daemon 1 calls the session 'orphan-sh-1' so); try again once it answers"
    )
    assert isinstance(resolve(SURVEY, "s1", command="kill", scope=sock(4)), Unanswered)
    assert isinstance(resolve(SURVEY, "s1", command="kill", scope=sock(2)), Missing)
    # new -A does not start a second one beside one that may run there.
    refused = plan_new(SURVEY, "s1", attach_existing=True)
    assert isinstance(refused, Refusal) and "daemon 4 did not answer" in refused.message
    assert plan_new(SURVEY, "s1", attach_existing=True, scope=sock(2)) == Create(
        "s1", explicit=True
    )


def test_plan_new() -> None:
    assert plan_new(SURVEY, None) == Create("1", explicit=False)
    assert plan_new(SURVEY, "free") == Create("free", explicit=True)
    assert isinstance(plan_new(SURVEY, "web"), Refusal)
    assert isinstance(plan_new(SURVEY, "dup", attach_existing=True), Refusal)  # several
    found = plan_new(SURVEY, "dup", attach_existing=True, scope=sock(2))
    assert isinstance(found, Found) and found.session.daemon == "2"
    # -A on a saved session that is not running starts it again...
    assert plan_new(SURVEY, "down", attach_existing=True) == Create(
        "down", explicit=True, saved=leaf("down", 5)
    )
    # ...unless its daemon did not answer: its program may run there still.
    wedged = plan_new(SURVEY, "wedged", attach_existing=True)
    assert isinstance(wedged, Refusal) and "try again once it answers" in wedged.message
    # -A takes an adopter's name that exists, and creates none.
    assert isinstance(plan_new(SURVEY, "orphan-sh-1", attach_existing=True), Found)
    nothing = plan_new(SURVEY, "orphan-x-1", attach_existing=True)
    assert isinstance(nothing, Refusal) and "are the adopter's" in nothing.message
    # -A with --daemon 1 for a name that lives on daemon 2: not a second one.
    elsewhere = plan_new(SURVEY, "2", attach_existing=True, scope=sock(1))
    assert elsewhere == Refusal(
        "a session named '2' exists already (on daemon 2, running);"
        " choose another name, or attach to it"
    )


# --- a command about one session sees only what bears on it ----------------------

# Few letters, so that names collide, share prefixes and have late originals.
_NAMES = st.sampled_from(["a", "ab", "b", "a-late", "a-late2", "ab-late", "b-late3", "x" * 128])
_HOSTS = st.sampled_from(["h:a", "h:ab", "k:b"])


@st.composite
def _surveys(draw: st.DrawFn) -> Survey:
    instances = ["i1", "i2"]
    daemons = []
    for n in draw(st.lists(st.sampled_from([1, 2, 3]), unique=True, max_size=3)):
        kids = draw(st.lists(st.tuples(st.integers(1, 6), _NAMES), max_size=6))
        unique = list({i: nm for i, nm in kids}.items())
        daemons.append(
            DaemonView(
                sock(n),
                draw(st.sampled_from(instances)),
                10 + n,
                [
                    child(i, nm, draw(st.sampled_from([None, None, 0, -9])))
                    for i, nm in unique
                    if nm != "x" * 128 or i == 1
                ],
            )
        )
    # Most refs name a child that runs (so that children are shown under
    # saved names, and late originals meet their sessions); some do not.
    running = [
        RestorationRef(str(d.socket), d.instance_id, c.id, 1) for d in daemons for c in d.children
    ]
    elsewhere_ref = st.builds(
        RestorationRef,
        st.sampled_from([str(sock(1)), str(sock(2)), str(sock(4))]),
        st.sampled_from(instances),
        st.integers(1, 6),
        st.just(1),
    )
    refs = st.none() | elsewhere_ref
    if running:
        refs = refs | st.sampled_from(running) | st.sampled_from(running)
    leaves = [
        SessionLeaf(nm, ["sh"], "/", ref=draw(refs))
        for nm in draw(st.lists(_NAMES, unique=True, max_size=6))
    ]
    silent = frozenset(draw(st.lists(st.sampled_from([str(sock(4)), str(sock(5))]), max_size=2)))
    elsewhere = draw(st.lists(_HOSTS, unique=True, max_size=3))
    return Survey(daemons, silent=silent, saved=leaves, elsewhere=elsewhere)


# "a" on daemon 1 is the late original of the saved "a" (on daemon 2), so
# it is shown as "a-late", or "a-late2" past a saved "a-late".
_LATE = Survey(
    [
        DaemonView(sock(1), "i1", 11, [child(1, "a"), child(2, "b")]),
        DaemonView(sock(2), "i2", 12, [child(1, "a")]),
    ],
    saved=[SessionLeaf("a", ["sh"], "/", ref=RestorationRef(str(sock(2)), "i2", 1, 1))],
)
_LATER = replaced(_LATE, saved=[*_LATE.saved, SessionLeaf("a-late", ["sh"], "/")])


@settings(max_examples=400, deadline=None)
@example(_LATE, "a-late")
@example(_LATER, "a-late2")
@example(_LATER, "a-late")
@given(_surveys(), _NAMES | st.sampled_from(["c", "a-late9", "x" * 123 + "-late"]))
def test_a_survey_narrowed_to_a_name_decides_on_it_as_the_whole_one(
    survey: Survey, name: str
) -> None:
    small = narrowed(survey, name)
    for scope in (None, sock(1)):
        for command in ("attach", "kill"):
            assert resolve(small, name, command=command, scope=scope) == resolve(
                survey, name, command=command, scope=scope
            )
        assert plan_new(small, name, attach_existing=True, scope=scope) == plan_new(
            survey, name, attach_existing=True, scope=scope
        )
    assert new_name_conflict(small, name) == new_name_conflict(survey, name)
    assert plan_new(small, name) == plan_new(survey, name)
    # It is smaller: nothing that does not bear on the name is kept.
    assert all(
        c.name.startswith(late_family(name)) or c in _referred(survey)
        for d in small.daemons
        for c in d.children
    )


def _referred(survey: Survey) -> list[ChildInfo]:
    keys = {
        (leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id)
        for leaf in survey.saved
        if leaf.ref is not None
    }
    return [
        c
        for d in survey.daemons
        for c in d.children
        if (str(d.socket), d.instance_id, c.id) in keys
    ]


def test_every_late_name_of_a_name_begins_with_its_family() -> None:
    for name in ("a", "x" * 128, "y" * 117 + "-late", "build-late"):
        taken: list[str] = [name]
        for _ in range(12):
            late = late_name(name, taken)
            taken.append(late)
            assert late.startswith(late_family(name))
            assert late_family(late).startswith(late_family(name)) or name.endswith("-late")
