"""OS strings that are not UTF-8 (argv, cwd, environment), in the codec: the
forms of docs/protocol.md §2, byte-exact round trips, the one canonical form,
the versions that cannot carry them, and the one escaping for people."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st

from multiserver import DaemonTooOld, RequestFailed, open_client
from multiserver.daemon import _core
from multiserver.daemon._core import listed
from multiserver.protocol._codec import (
    HEADER,
    HEADER_SIZE,
    ProtocolError,
    Unrepresentable,
    decode_body,
    encode_body,
)
from multiserver.protocol._messages import (
    OS_BYTES_VERSION,
    PROTOCOL_VERSION,
    ChildInfo,
    Launch,
    Launched,
)
from multiserver.system._osstr import escaped, is_utf8, to_wire
from multiserver.testing import SimDaemon
from tests.multiserver.protocol.test_codec import connected, feed, raw_frame
from tests.multiserver.protocol.test_codec_properties import PROPERTY_SETTINGS, os_strings

LATIN = os.fsdecode(b"caf\xe9")  # "caf\udce9"
HOME = os.fsdecode(b"/home/u/caf\xe9")


def launch(**kw: Any) -> Launch:
    args: dict[str, Any] = {"req": 1, "argv": ["ls"], "env": {"PATH": "/bin"}, "cwd": "/", **kw}
    return Launch(**args)


def info(**kw: Any) -> ChildInfo:
    args: dict[str, Any] = {
        "id": 1,
        "pid": 2,
        "name": "1",
        "argv": ["ls", LATIN],
        "cwd": HOME,
        "tty": "/dev/pts/1",
        "rows": 24,
        "cols": 80,
        "state": "running",
        "exit_code": None,
        "held": False,
        "buffered_bytes": 0,
        "dropped_bytes": 0,
        "started_at": 1.0,
        "exited_at": None,
        "linger": None,
        **kw,
    }
    return ChildInfo(**args)


def body_of(msg: Any, version: int = PROTOCOL_VERSION) -> dict[str, Any]:
    body, _ = encode_body(msg, version)
    text = body.decode("utf-8")  # strict: valid UTF-8, no lone surrogate
    text.encode("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


# --- the forms -------------------------------------------------------------------


def test_utf8_strings_travel_as_strings_and_the_rest_as_tagged_bytes() -> None:
    msg = launch(
        argv=["ls", os.fsdecode(b"x\xe9"), "ünï ✓"],
        env={"PATH": "/bin", "LANG_OLD": os.fsdecode(b"fr\xe9")},
        cwd=HOME,
    )
    body = body_of(msg)
    assert body["argv"] == ["ls", {"b": "eOk="}, "ünï ✓"]
    assert body["env"] == {"PATH": "/bin", "LANG_OLD": {"b": "ZnLp"}}
    assert body["cwd"] == {"b": base64.b64encode(b"/home/u/caf\xe9").decode()}
    assert decode_body(Launch, *encode_body(msg)) == msg


def test_an_environment_with_a_name_that_is_not_utf8_travels_as_pairs() -> None:
    env = {os.fsdecode(b"\xe9"): "1", "PATH": os.fsdecode(b"/b\xffn")}
    msg = launch(env=env)
    assert body_of(msg)["env"] == [[{"b": "6Q=="}, "1"], ["PATH", {"b": "L2L/bg=="}]]
    assert decode_body(Launch, *encode_body(msg)) == msg


def test_child_info_carries_them_back() -> None:
    child = info(fg_cwd=HOME, fg_argv=[LATIN])
    body = body_of(Launched(req=1, child=child))["child"]
    assert body["argv"] == ["ls", {"b": "Y2Fm6Q=="}]
    assert body["fg_argv"] == [{"b": "Y2Fm6Q=="}]
    assert decode_body(Launched, *encode_body(Launched(req=1, child=child))).child == child


def test_the_documented_examples_are_what_the_codec_writes() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "protocol.md").read_text()
    section = doc[doc.index("**OS strings.**") :]
    block = section[section.index("```") + 3 :]
    lines = block[: block.index("```")].split()
    first = launch(
        argv=["ls", os.fsdecode(b"x\xe9")],
        env={"PATH": "/bin", "LANG_OLD": os.fsdecode(b"fr\xe9")},
        cwd=HOME,
    )
    second = launch(env={os.fsdecode(b"\xe9"): "1", "PATH": "/bin"})
    assert [encode_body(first)[0], encode_body(second)[0]] == [line.encode() for line in lines]
    assert decode_body(Launch, lines[0].encode(), b"") == first
    # What a version-4 client is sent for that child, as the doc quotes it.
    older = listed(info(argv=first.argv, cwd=first.cwd), 4)
    quoted = re.search(r"`(\"argv\":.*?)`", section)
    assert quoted is not None
    assert quoted.group(1).encode() in encode_body(Launched(req=1, child=older), 4)[0]


# --- one form only: what is refused -------------------------------------------------

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("tagged UTF-8", {"argv": [{"b": "bHM="}]}, "tagged bytes are UTF-8"),
    ("not base64", {"cwd": {"b": "*"}}, "not base64"),
    ("not canonical", {"cwd": {"b": "6R=="}}, "not canonical base64"),
    ("not ASCII", {"cwd": {"b": "é"}}, "not base64"),
    ("other key", {"cwd": {"x": "6Q=="}}, "another object"),
    ("two keys", {"cwd": {"b": "6Q==", "c": 1}}, "another object"),
    ("int", {"cwd": {"b": 5}}, "another object"),
    ("lone surrogate", {"argv": ["\udce9"]}, "lone surrogate"),
    ("pairs, all UTF-8", {"env": [["PATH", "/bin"]]}, "every name is UTF-8"),
    ("pair of three", {"env": [[{"b": "6Q=="}, "1", "2"]]}, r"\[name, value\] pairs"),
    ("named twice", {"env": [[{"b": "6Q=="}, "1"], [{"b": "6Q=="}, "2"]]}, r"\\xe9 given twice"),
    ("env string", {"env": "PATH=/bin"}, "expected object or list of pairs"),
]


@pytest.mark.parametrize(
    ("fields", "match"), [(f, m) for _, f, m in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_anything_but_the_one_form_is_a_malformed_body(fields: dict[str, Any], match: str) -> None:
    body = {"req": 1, "argv": ["ls"], "env": {}, "cwd": "/", **fields}
    _, daemon = connected(PROTOCOL_VERSION)
    text = json.dumps(body).encode()
    frame = raw_frame(Launch.TYPE, text, version=PROTOCOL_VERSION)
    with pytest.raises(ProtocolError, match=f"^Launch: malformed body: .*{match}"):
        feed(daemon, frame)


# --- the versions that cannot carry them ------------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4])
def test_an_older_version_never_gets_the_new_form(version: int) -> None:
    client, _ = connected(version)
    with pytest.raises(Unrepresentable, match=r"caf\\xe9.*needs protocol version 5"):
        client.send(launch(argv=["ls", LATIN]))
    with pytest.raises(Unrepresentable):
        client.send(launch(env={"X": LATIN}))
    with pytest.raises(Unrepresentable):
        client.send(launch(env={LATIN: "x"}))
    # UTF-8 goes as it always went, and the codec is still usable.
    utf8 = launch(argv=["ls", "café"], env={"LANG": "fr_FR.UTF-8"}, cwd="/home/ü")
    frame = client.send(utf8)
    assert frame[HEADER_SIZE:] == encode_body(utf8, OS_BYTES_VERSION)[0]
    assert HEADER.unpack_from(frame)[1] == version


def test_a_daemon_cannot_send_an_older_client_the_new_form_either() -> None:
    _, daemon = connected(4)
    with pytest.raises(Unrepresentable):
        daemon.send(Launched(req=1, child=info()))
    # What the core hands it for an older peer: the same child, escaped.
    older = listed(info(), 4)
    assert (older.argv, older.cwd) == (["ls", "caf\\xe9"], "/home/u/caf\\xe9")
    frame = daemon.send(Launched(req=1, child=older))
    assert b'"b"' not in frame
    assert listed(info(), 5) == info()


# --- properties ----------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(
    argv=st.lists(os_strings, min_size=1, max_size=4),
    env=st.dictionaries(os_strings, os_strings, max_size=4),
    cwd=os_strings,
)
def test_any_os_strings_round_trip_as_valid_utf8_json(
    argv: list[str], env: dict[str, str], cwd: str
) -> None:
    msg = launch(argv=argv, env=env, cwd=cwd)
    body, _ = encode_body(msg)
    parsed = json.loads(body.decode("utf-8"))
    json.dumps(parsed, ensure_ascii=False).encode("utf-8")  # no lone surrogate anywhere
    assert decode_body(Launch, body, b"") == msg
    back = decode_body(Launch, body, b"")
    assert [os.fsencode(a) for a in back.argv] == [os.fsencode(a) for a in argv]
    assert os.fsencode(back.cwd) == os.fsencode(cwd)
    # Version 4 writes the same bytes when it can, and refuses when it cannot.
    strings = [*argv, cwd, *env, *env.values()]
    if all(map(is_utf8, strings)):
        assert encode_body(msg, 4)[0] == body
    else:
        with pytest.raises(Unrepresentable):
            encode_body(msg, 4)


@PROPERTY_SETTINGS
@given(text=os_strings)
def test_escaped_is_valid_unicode_and_shows_each_bad_byte(text: str) -> None:
    shown = escaped(text)
    shown.encode("utf-8")
    raw = os.fsencode(text)
    assert shown == raw.decode("utf-8", "backslashreplace")
    assert (shown == text) == is_utf8(text)
    assert isinstance(to_wire(text), str) == is_utf8(text)


def test_escaped_examples() -> None:
    assert escaped(LATIN) == "caf\\xe9"
    assert escaped("café ✓") == "café ✓"
    assert escaped(os.fsdecode(b"\xff\xfe")) == "\\xff\\xfe"
    assert escaped("\ud800") == "\\ud800"  # not from the OS; never raises


# --- the client, against a daemon of version 4 ---------------------------------------------


async def test_a_client_tells_plainly_that_a_version_4_daemon_cannot_take_the_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_core, "PROTOCOL_VERSION", 4)  # the simulator speaks 2..4
    sim = SimDaemon(tmp_path / "sim.sock")
    async with sim.serving(), open_client(sim.socket_path) as client:
        assert client.version == 4
        for kw in ({"argv": ["sh", LATIN]}, {"cwd": HOME}, {"env": {"X": LATIN}}):
            args: dict[str, Any] = {"argv": ["sh"], "cwd": "/", "env": {}, **kw}
            with pytest.raises(DaemonTooOld) as info:
                await client.launch(args.pop("argv"), hold=False, **args)
            assert str(info.value) == (
                "the daemon speaks protocol 4, which cannot carry non-UTF-8 arguments; restart it"
            )
            assert isinstance(info.value, RequestFailed)  # like any refused request
        assert sim.children == []  # nothing was sent
        # The connection is as good as before, and UTF-8 goes through.
        launched = await client.launch(["sh", "café"], cwd="/", env={"LANG": "fr"}, hold=False)
        assert launched.child.argv == ["sh", "café"]
