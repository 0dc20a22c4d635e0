"""The one schema of what a host answers (``restore.remote._listing``):
what the writer writes the reader reads back, whatever the sessions; the
listing a multiserver printed before it had a schema is still read; a
newer version is refused, and anything malformed is one line that names
its field; docs/remote.md's table is the module's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from restore.remote._listing import (
    FIELDS,
    LATER,
    LIVE,
    OPTIONAL,
    SCHEMA,
    SINCE_1,
    STATES,
    ListedSession,
    ListingError,
    ListingTooNew,
    listing_json,
    read_listing,
    write_listing,
)

DOCS = Path(__file__).parents[3] / "docs" / "remote.md"

# The listing as multiserver printed it before it had a schema (version 0:
# commands/ls.py at 9d403e2): a running session, a late original, one
# that ended, a saved one not running, a session of the host's own host,
# and a saved session of that host's that it does not list.
VERSION_0 = """[
{"name": "one", "id": 1, "pid": 24841, "state": "running", "exit_code": null,
 "argv": ["sleep", "1000"], "cwd": "/home/me", "tty": "/dev/pts/0", "held": false,
 "buffered_bytes": 0, "dropped_bytes": 0, "started_at": 1796446925.1556227,
 "exited_at": null, "linger": null, "socket": "/run/user/1000/multiserver-daemon-1.socket",
 "daemon_instance": "cec114ed99273877f1d2f60646cf5dd3", "saved": true,
 "waiting_bytes": 0, "waiting_dropped_bytes": 0},
{"name": "one-late", "id": 2, "pid": 24843, "state": "running", "exit_code": null,
 "argv": ["caf\\\\xe9"], "cwd": "/", "tty": "/dev/pts/1", "held": true,
 "buffered_bytes": 4, "dropped_bytes": 0, "started_at": 1796446925,
 "exited_at": null, "linger": 300, "socket": "/run/user/1000/multiserver-daemon-1.socket",
 "daemon_instance": "cec114ed99273877f1d2f60646cf5dd3", "saved": false,
 "late_of": "one", "waiting_bytes": 0, "waiting_dropped_bytes": 0},
{"name": "five", "id": 3, "pid": 24850, "state": "exited", "exit_code": -15,
 "argv": ["sh"], "cwd": "/", "tty": "/dev/pts/2", "held": false,
 "buffered_bytes": 0, "dropped_bytes": 0, "started_at": 1796446925.5,
 "exited_at": 1796446926.5, "linger": null,
 "socket": "/run/user/1000/multiserver-daemon-2.socket",
 "daemon_instance": "0123", "saved": true, "waiting_bytes": 0, "waiting_dropped_bytes": 0},
{"name": "a", "id": null, "pid": null, "state": "not running", "exit_code": null,
 "argv": ["sleep", "100"], "cwd": "/tmp", "tty": null, "held": false,
 "buffered_bytes": 12, "dropped_bytes": 0, "started_at": null, "exited_at": null,
 "linger": null, "socket": null, "daemon_instance": null, "saved": true,
 "detail": "saved, not running: daemon 1 is not running; restore starts it again",
 "waiting_bytes": 12, "waiting_dropped_bytes": 0},
{"name": "web", "id": 7, "pid": 99, "state": "running", "exit_code": null,
 "argv": ["top"], "cwd": "/srv", "tty": "/dev/pts/9", "held": false,
 "buffered_bytes": 10, "dropped_bytes": 2, "started_at": 1.5, "exited_at": null,
 "linger": null, "socket": "/run/user/1000/multiserver-daemon-1.socket",
 "daemon_instance": "ffff", "saved": true, "waiting_bytes": 10,
 "waiting_dropped_bytes": 2, "host": "db1"},
{"name": "job2", "id": null, "pid": null, "state": "not running", "exit_code": null,
 "argv": ["make"], "cwd": "/src", "tty": null, "held": false, "buffered_bytes": 0,
 "dropped_bytes": 0, "started_at": 1796446000.0, "exited_at": null, "linger": null,
 "socket": "/run/user/1000/multiserver-daemon-1.socket", "daemon_instance": "eeee",
 "saved": true, "detail": "saved, not running: gone from db1; ...",
 "waiting_bytes": 0, "waiting_dropped_bytes": 0, "host": "db1"}
]"""

# --- what the writer writes, the reader reads -------------------------------

_text = st.text(max_size=12)
_count = st.integers(min_value=0, max_value=2**53)
_time = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53).map(float)


@st.composite
def listed_sessions(draw: st.DrawFn) -> ListedSession:
    """Any session a listing may hold: running, or saved with no program
    (its live fields null, or some of them: a saved one may know its
    socket)."""
    live = draw(st.booleans())
    holders = draw(st.integers(0, 5))

    def live_field(strategy: st.SearchStrategy[object]) -> object:
        return draw(strategy) if live else draw(st.none() | strategy)

    return ListedSession(
        name=draw(_text),
        id=draw(_count) if live else None,
        pid=live_field(_count),  # type: ignore[arg-type]
        state=draw(st.sampled_from(STATES)),
        exit_code=draw(st.none() | st.integers(-64, 255)),
        argv=tuple(draw(st.lists(_text, max_size=4))),
        cwd=draw(_text),
        tty=live_field(_text),  # type: ignore[arg-type]
        held=holders > 0,
        holders=holders,
        watchers=draw(st.integers(0, holders)),
        buffered_bytes=draw(_count),
        dropped_bytes=draw(_count),
        started_at=live_field(_time),  # type: ignore[arg-type]
        exited_at=draw(st.none() | _time),
        linger=draw(st.none() | _time),
        socket=live_field(_text),  # type: ignore[arg-type]
        daemon_instance=live_field(_text),  # type: ignore[arg-type]
        saved=draw(st.booleans()),
        waiting_bytes=draw(_count),
        waiting_dropped_bytes=draw(_count),
        detail=draw(st.none() | _text),
        late_of=draw(st.none() | _text),
        host=draw(st.none() | _text),
    )


@given(st.lists(listed_sessions(), max_size=5), st.sampled_from([None, 2]))
def test_what_the_writer_writes_the_reader_reads_back(
    rows: list[ListedSession], indent: int | None
) -> None:
    text = write_listing(rows, indent=indent)
    assert read_listing(text) == rows
    assert read_listing(text.encode()) == rows
    assert all(obj["schema"] == SCHEMA for obj in json.loads(text))


def test_the_optional_fields_are_written_only_when_set() -> None:
    (row,) = read_listing(VERSION_0)[:1]
    (obj,) = listing_json([row])
    assert not set(OPTIONAL) & obj.keys()
    assert list(obj) == ["schema", *(f for f in FIELDS if f not in OPTIONAL)]


# --- an older host: version 0 --------------------------------------------


def test_the_listing_of_a_multiserver_without_a_schema_is_read_as_version_0() -> None:
    rows = read_listing(VERSION_0)
    assert [r.name for r in rows] == ["one", "one-late", "five", "a", "web", "job2"]
    one, late, five, saved, web, job2 = rows
    assert (one.id, one.pid, one.argv, one.saved, one.host) == (
        1,
        24841,
        ("sleep", "1000"),
        True,
        None,
    )
    assert (late.late_of, late.held, late.argv, late.started_at, late.linger) == (
        "one",
        True,
        ("caf\\xe9",),
        1796446925.0,
        300.0,
    )
    assert type(late.started_at) is float
    assert (five.state, five.exit_code, five.exited_at) == ("exited", -15, 1796446926.5)
    assert (saved.id, saved.pid, saved.tty, saved.socket, saved.waiting_bytes) == (
        None,
        None,
        None,
        None,
        12,
    )
    assert saved.detail is not None and saved.detail.startswith("saved, not running")
    assert (web.host, web.waiting_dropped_bytes) == ("db1", 2)
    assert (job2.id, job2.host, job2.socket) == (
        None,
        "db1",
        "/run/user/1000/multiserver-daemon-1.socket",
    )
    # Written again, it is the same listing, at this version.
    assert read_listing(write_listing(rows)) == rows


def test_version_0_may_lack_what_came_later_and_version_1_may_not() -> None:
    old = json.loads(VERSION_0)[0]
    for field in SINCE_1:
        del old[field]
    (row,) = read_listing(json.dumps([old]))
    assert (row.saved, row.waiting_bytes, row.waiting_dropped_bytes) == (False, 0, 0)
    with pytest.raises(ListingError, match=r"^ls --json row 0 \(\"one\"\): no saved$"):
        read_listing(json.dumps([{**old, "schema": 1}]))


def test_a_host_from_before_sharing_is_read_with_its_holders_from_held() -> None:
    """Version 0 and version 1 as written before ``holders`` and
    ``watchers``: held is one holder, none watching; not held, none."""
    rows = read_listing(VERSION_0)
    assert [(r.held, r.holders, r.watchers) for r in rows[:3]] == [
        (False, 0, 0),
        (True, 1, 0),
        (False, 0, 0),
    ]
    version_1 = [{**obj, "schema": 1} for obj in json.loads(VERSION_0)]
    assert not any(set(LATER) & obj.keys() for obj in version_1)
    assert read_listing(json.dumps(version_1)) == rows
    # Written again, they are there.
    (late,) = listing_json([rows[1]])
    assert (late["held"], late["holders"], late["watchers"]) == (True, 1, 0)
    assert list(late)[list(late).index("held") :][:3] == ["held", "holders", "watchers"]


def test_holders_and_watchers_are_read_as_given() -> None:
    (row,) = read_listing(_one(held=True, holders=3, watchers=1))
    assert (row.held, row.holders, row.watchers) == (True, 3, 1)
    (row,) = read_listing(_one(held=True, holders=1, watchers=1))  # one watcher alone
    assert (row.holders, row.watchers) == (1, 1)


def test_fields_it_does_not_know_are_passed_over() -> None:
    """A newer host of the same version may say more (the minor rule)."""
    obj = {**json.loads(VERSION_0)[0], "schema": SCHEMA, "colour": "blue", "tags": [1, {}]}
    (row,) = read_listing(json.dumps([obj]))
    assert row == read_listing(VERSION_0)[0]


def test_a_newer_version_is_refused_in_one_line() -> None:
    obj = {**json.loads(VERSION_0)[0], "schema": SCHEMA + 1, "id": "a new meaning"}
    with pytest.raises(ListingTooNew) as caught:
        read_listing(json.dumps([obj]))
    assert str(caught.value) == (
        f'ls --json row 0 ("one") is of schema {SCHEMA + 1}, newer than this multiserver'
        f" reads (0 to {SCHEMA}): upgrade multiserver here"
    )


# --- malformed: one line, naming the field -----------------------------------


_GONE = object()


def _one(**changes: object) -> str:
    """A listing of one session of version 1, with ``changes`` (``_GONE``:
    the field left out)."""
    obj = {**json.loads(VERSION_0)[0], "schema": SCHEMA, **changes}
    return json.dumps([{k: v for k, v in obj.items() if v is not _GONE}])


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "ls --json is not JSON: '' (Expecting value: line 1 column 1 (char 0))"),
        ("[{]", "ls --json is not JSON: '[{]' (Expecting property name"),
        ('[{"id": NaN}]', "ls --json is not JSON: "),
        ('{"sessions": []}', "ls --json is an object, not an array of sessions"),
        ("5", "ls --json is 5, not an array of sessions"),
        ("[[]]", "ls --json row 0 is an array, not an object"),
        ('[{"id": 1}]', "ls --json row 0: no name"),
        (_one(name=5), "ls --json row 0: name is 5, not a string"),
        (
            _one(id="1"),
            'ls --json row 0 ("one"): id is "1", not a whole number (0 or more) or null',
        ),
        (_one(id=True), 'row 0 ("one"): id is true, not a whole number (0 or more) or null'),
        (_one(id=1.0), 'row 0 ("one"): id is 1.0, not a whole number (0 or more) or null'),
        (_one(pid=-1), 'row 0 ("one"): pid is -1, not a whole number (0 or more) or null'),
        (_one(state="gone"), "state is \"gone\", not 'running' or 'exited' or 'not running'"),
        (_one(exit_code="5"), 'exit_code is "5", not a whole number or null'),
        (_one(argv="sleep 1"), 'argv is "sleep 1", not an array of strings'),
        (_one(argv=["a", None]), 'argv is ["a", null], not an array of strings'),
        (_one(cwd="\ud800"), 'cwd is "\\ud800", not a string'),
        (_one(held=0), "held is 0, not true or false"),
        (_one(held=None), "held is null, not true or false"),
        (_one(holders=-1), 'row 0 ("one"): holders is -1, not a whole number (0 or more)'),
        (_one(watchers="1"), 'watchers is "1", not a whole number (0 or more)'),
        (_one(held=True, holders=0), 'row 0 ("one"): holders is 0, but held is true'),
        (_one(held=False, holders=2), 'row 0 ("one"): holders is 2, but held is false'),
        (
            _one(held=True, holders=1, watchers=2),
            'row 0 ("one"): watchers is 2, more than its 1 holders',
        ),
        (_one(started_at="now"), 'started_at is "now", not a number or null'),
        (_one(buffered_bytes=_GONE), 'ls --json row 0 ("one"): no buffered_bytes'),
        (_one(pid=None), 'row 0 ("one"): pid is null, but a running session has one'),
        (_one(socket=None), 'row 0 ("one"): socket is null, but a running session has one'),
        (_one(host=None), "host is null, not a string"),
        (_one(schema="1"), 'ls --json row 0 ("one"): schema is "1", not a version number'),
        (_one(schema=-1), "schema is -1, not a version number"),
        (_one(cwd=["x" * 100]), 'cwd is ["' + "x" * 35 + "..., not a string"),
    ],
)
def test_what_is_not_a_listing_is_one_line_naming_its_field(text: str, said: str) -> None:
    with pytest.raises(ListingError) as caught:
        read_listing(text)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not isinstance(caught.value, ListingTooNew)


_NOT = {
    "string": [5, True, None, [], {}, "\udfff"],
    "strings": ["a", [1], [None], {}, None],
    "count": [-1, 1.5, "1", True, None, []],
    "integer": [1.5, "1", False, None, {}],
    "number": ["1", True, None, [], float("nan"), float("inf")],
    "boolean": [0, 1, "true", None],
    "state": ["Running", "", 1, None],
}


@given(st.data())
def test_any_field_of_another_type_is_named(data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(sorted(FIELDS)))
    kind, nullable = FIELDS[field]
    value = data.draw(st.sampled_from([v for v in _NOT[kind] if not (v is None and nullable)]))
    obj = {**json.loads(VERSION_0)[0], "schema": SCHEMA, field: value}
    with pytest.raises(ListingError, match=rf'^ls --json row 0( \(".*"\))?: {field} is '):
        # allow_nan: the listing given as JSON values (NaN as json.loads
        # with its defaults takes it) is refused all the same.
        from restore.remote._listing import listing_from

        listing_from(json.loads(json.dumps([obj], allow_nan=True)))


def test_a_saved_session_may_have_its_live_fields_null() -> None:
    obj = {**json.loads(VERSION_0)[0], "schema": SCHEMA, "id": None}
    for field in LIVE:
        obj[field] = None
    (row,) = read_listing(json.dumps([obj]))
    assert (row.id, row.pid, row.socket) == (None, None, None)


# --- the docs' table is this one -------------------------------------------


def test_docs_remote_md_shows_every_field_with_its_type() -> None:
    """docs/remote.md, "What a host answers": one row a field, its JSON
    type and whether it may be null or absent, as ``FIELDS`` has them."""
    text = DOCS.read_text()
    section = text[text.index("## What a host answers") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section, re.MULTILINE)
    documented = {name: kind.strip() for name, kind in rows}
    want = {"schema": "whole number"}
    for name, (kind, nullable) in FIELDS.items():
        shown = {
            "string": "string",
            "strings": "array of strings",
            "count": "whole number",
            "integer": "whole number",
            "number": "number",
            "boolean": "boolean",
            "state": "string",
        }[kind]
        if nullable:
            shown += " or null"
        if name in OPTIONAL:
            shown += ", absent if none"
        if name in LATER:
            shown += ", absent from older hosts"
        want[name] = shown
    assert documented == want
