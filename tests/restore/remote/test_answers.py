"""What a host's listing means here (``restore.remote._answers``), read
through its one schema: for ``ls`` (its running sessions), for the
restore (its own sessions by name, every running one for the adopter),
and for saving a session just made there; a listing that is none is the
host's failure, in one line, never a row passed over."""

from __future__ import annotations

import json

import pytest

from restore import Host, HostFailure, RestorationRef
from restore.remote._answers import host_answer, leaf_there, listing_of, remote_sessions
from restore.remote._listing import SCHEMA
from tests.restore.remote.test_listing import VERSION_0

OLD = json.loads(VERSION_0)


def test_ls_here_lists_a_hosts_running_sessions_as_host_name() -> None:
    sessions = remote_sessions("db2", listing_of("db2", OLD))
    assert [s.child.name for s in sessions] == ["db2:one", "db2:one-late", "db2:five", "db2:web"]
    one, late, five, _ = sessions
    assert (one.waiting, late.waiting) == ((0, 0), None)  # held: nothing waits
    assert (five.child.state, five.child.exit_code) == ("exited", -15)
    assert late.child.argv == ["caf\\xe9"] and late.row.late_of == "one"


def test_the_restore_takes_its_own_sessions_by_name_and_every_running_one() -> None:
    answer = host_answer("db2", OLD)
    assert answer.kind == "listed"
    assert answer.sessions == {
        "one": ("cec114ed99273877f1d2f60646cf5dd3", 1, 24841, "running", None),
        "one-late": ("cec114ed99273877f1d2f60646cf5dd3", 2, 24843, "running", None),
        "five": ("0123", 3, 24850, "exited", -15),
    }
    assert [(c.child.name, c.via, c.instance_id) for c in answer.children] == [
        ("one", None, "cec114ed99273877f1d2f60646cf5dd3"),
        ("one-late", None, "cec114ed99273877f1d2f60646cf5dd3"),
        ("five", None, "0123"),
        ("web", "db1", "ffff"),
    ]


@pytest.mark.parametrize(
    ("got", "why"),
    [
        ({"one": 1}, "db2: answered garbage (ls --json is an object, not an array of sessions)"),
        (
            [*OLD, {**OLD[0], "name": "two", "id": "2"}],
            'db2: answered garbage (ls --json row 6 ("two"): id is "2",'
            " not a whole number (0 or more) or null)",
        ),
        (
            [{**OLD[0], "schema": SCHEMA + 1}],
            f'db2: ls --json row 0 ("one") is of schema {SCHEMA + 1}, newer than this'
            f" multiserver reads (0 to {SCHEMA}): upgrade multiserver here",
        ),
    ],
)
def test_a_listing_that_is_none_fails_the_host_in_one_line(got: object, why: str) -> None:
    """A row that cannot be read fails the whole answer: passed over, its
    session would look gone and be started again beside itself."""
    answer = host_answer("db2", got)
    assert (answer.kind, answer.why, answer.sessions) == ("failed", why, {})
    with pytest.raises(HostFailure) as caught:
        remote_sessions("db2", listing_of("db2", got))
    assert str(caught.value) == why


def test_a_session_made_there_is_saved_from_its_running_row() -> None:
    host = Host("db2", "db2.example")
    leaf = leaf_there(host, "five", OLD)
    assert (leaf.name, leaf.argv, leaf.cwd, leaf.host) == ("db2:five", ["sh"], "/", "db2")
    assert leaf.ref == RestorationRef(
        "/run/user/1000/multiserver-daemon-2.socket", "0123", 3, 24850
    )
    # Saved there with no program, or a session of its own host: not made.
    for name in ("a", "web", "nobody"):
        with pytest.raises(HostFailure, match=f"db2: no session {name} there after starting it"):
            leaf_there(host, name, OLD)
