"""The body codec (``_codec``) of the one message family (``_messages``):
the field table it reads from the messages' annotations, round trips at
every version, and a verdict on every changed body that agrees with the
rules of docs/protocol.md, spelled out here apart from the codec (a body
the rules refuse, the codec refuses in one line; one they accept, it
reads)."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from multiserver.protocol import _messages
from multiserver.protocol._body import env_from_wire, os_str
from multiserver.protocol._codec import FIELDS, REQUIRED, decode_body, encode_body, kind_of
from multiserver.protocol._frames import ProtocolError, Unrepresentable
from multiserver.protocol._messages import (
    MESSAGE_TYPES,
    MIN_PROTOCOL_VERSION,
    OS_BYTES_VERSION,
    PROTOCOL_VERSION,
    ChildInfo,
    Message,
    Peeked,
)
from multiserver.protocol._proto import OMIT_IF_DEFAULT
from tests.multiserver.protocol.test_codec_properties import PROPERTY_SETTINGS, message_strategy

VERSIONS = range(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION + 1)


def test_the_field_table_is_every_message_and_record_field_in_order() -> None:
    assert set(FIELDS) == {c.__name__ for c in MESSAGE_TYPES.values()} | {
        "ChildInfo",
        "ClaimedChild",
    }
    for code, cls in MESSAGE_TYPES.items():
        assert code == cls.TYPE
        assert tuple(f for f, *_ in FIELDS[cls.__name__]) == cls.__record_fields__  # type: ignore[attr-defined]
    for name, table in FIELDS.items():
        omitted = OMIT_IF_DEFAULT.get(name, ())
        for field, _kind, default, omit in table:
            assert omit == (default is not REQUIRED and ("*" in omitted or field in omitted))
    assert FIELDS["ChildInfo"][8] == ("state", "lit:running|exited", REQUIRED, False)
    assert FIELDS["Launch"][2][1] == "env" and FIELDS["ChildInfo"][18][1] == "?[os]"


def test_the_literals_the_codec_reads_are_those_a_type_checker_reads() -> None:
    """``LITERALS`` spells out, for the codec, the ``Literal`` aliases of the
    module's type-checking block."""
    tree = ast.parse(inspect.getsource(_messages))
    aliases = {
        node.target.id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(node.value, ast.Subscript)
        and ast.unparse(node.value.value) == "Literal"
    }
    assert aliases, "no Literal alias found"
    for name, node in aliases.items():
        values = ast.literal_eval(node.slice)
        assert _messages.LITERALS[name] == (values if isinstance(values, tuple) else (values,))


@pytest.mark.parametrize(
    ("annotation", "kind"),
    [
        ("int", "int"),
        ("OsStr | None", "?os"),
        ("list[ChildInfo]", "[ChildInfo]"),
        ("list[str] | None", "?[str]"),
        ("dict[OsStr, OsStr]", "env"),
        ("ChildState", "lit:running|exited"),
    ],
)
def test_kinds_are_read_from_annotations(annotation: str, kind: str) -> None:
    assert kind_of(annotation, {"ChildInfo": ChildInfo}, _messages.LITERALS) == kind


@pytest.mark.parametrize("annotation", ["dict[str, int]", "tuple[int, int]", "Any", "set[int]"])
def test_a_field_the_wire_cannot_carry_is_refused_when_the_table_is_made(annotation: str) -> None:
    with pytest.raises(TypeError, match="no wire form"):
        kind_of(annotation, {}, {})


def test_messages_are_true_types_and_frozen() -> None:
    """One class per message: what the codec reads is an instance of the
    class the code names, and no attrs class stands behind it (so
    ``attrs.evolve`` of one fails type-checking too: ``replaced`` copies)."""
    msg = Peeked(req=1, child=_child(), dropped=0, output=b"x")
    body, blob = encode_body(msg, PROTOCOL_VERSION)
    back = decode_body(Peeked, body, blob)
    assert isinstance(back, Peeked) and type(back) is Peeked and back == msg
    assert isinstance(back.child, ChildInfo)
    assert not any(attrs.has(cls) for cls in MESSAGE_TYPES.values())
    with pytest.raises(AttributeError, match="frozen"):
        back.req = 2  # type: ignore[misc]


def _child() -> ChildInfo:
    return ChildInfo(
        1,
        2,
        "main",
        ["sh"],
        "/",
        "/dev/pts/1",
        24,
        80,
        "running",
        None,
        False,
        0,
        0,
        1.0,
        None,
        None,
    )


@st.composite
def _any_message(draw: st.DrawFn) -> Message:
    cls = draw(st.sampled_from(sorted(MESSAGE_TYPES.values(), key=lambda c: c.TYPE)))
    return typing.cast(Message, draw(message_strategy(cls)))


def _not_utf8(msg: Any) -> bool:
    """Whether ``msg`` holds an OS string whose bytes are not UTF-8."""
    try:
        json.dumps(encode_body(msg, OS_BYTES_VERSION)[0].decode())
        encode_body(msg, OS_BYTES_VERSION - 1)
    except Unrepresentable:
        return True
    return False


@PROPERTY_SETTINGS
@given(msg=_any_message(), version=st.sampled_from(VERSIONS))
def test_every_message_round_trips_at_every_version(msg: Message, version: int) -> None:
    try:
        body, blob = encode_body(msg, version)
    except Unrepresentable:
        assert version < OS_BYTES_VERSION and _not_utf8(msg)
        return
    assert decode_body(type(msg), body, blob) == msg


# --- the rules, apart from the codec -------------------------------------------


def _fits(kind: str, value: Any) -> bool:
    """Whether a JSON value is one the rules accept for a field of ``kind``."""
    if kind.startswith("?"):
        return value is None or _fits(kind[1:], value)
    if kind.startswith("["):
        return type(value) is list and all(_fits(kind[1:-1], v) for v in value)
    if kind.startswith("lit:"):
        return type(value) is str and value in kind[4:].split("|")
    if kind in ("os", "env"):
        try:
            os_str(value) if kind == "os" else env_from_wire(value, None)
        except (TypeError, ValueError):
            return False
        return True
    if kind == "str":
        return type(value) is str and _unicode(value)
    if kind == "float":
        return type(value) in (int, float)
    if kind in ("int", "bool"):
        return type(value) is {"int": int, "bool": bool}[kind]
    return _record_fits(kind, value)


def _unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _record_fits(name: str, value: Any) -> bool:
    if type(value) is not dict:
        return False
    table = FIELDS[name]
    if set(value) - {f for f, *_ in table}:
        return False
    return all(
        _fits(kind, value[f]) if f in value else default is not REQUIRED
        for f, kind, default, _ in table
    )


def _verdict(cls: type, body: bytes, blob: bytes) -> str:
    try:
        decode_body(cls, body, blob)
    except ProtocolError as exc:
        assert "\n" not in str(exc)
        assert str(exc).startswith(f"{cls.__name__}: ")
        return "rejected"
    return "ok"


# A value of every JSON type, and of the OS string forms, right and wrong.
JUNK: list[Any] = [
    None,
    True,
    0,
    -1,
    1.5,
    "",
    "running",
    "\udce9",
    [],
    {},
    {"b": "6Q=="},
    {"b": "YQ=="},
    {"b": "6Q"},
    ["a", 1],
    [["a", "b"]],
    [[{"b": "6Q=="}, "b"]],
]


def _mutations(data: Any) -> st.SearchStrategy[Any]:
    """A JSON value like ``data`` with one thing changed: a field dropped,
    added or given another JSON type, at any depth."""
    junk = st.one_of(st.sampled_from(JUNK), st.text(max_size=3), st.integers(), st.floats())
    if isinstance(data, dict) and data:
        keys = sorted(data)
        return st.one_of(
            st.sampled_from(keys).map(lambda k: {x: v for x, v in data.items() if x != k}),
            st.tuples(st.text(max_size=4), junk).map(lambda kv: {**data, kv[0]: kv[1]}),
            st.tuples(st.sampled_from(keys), junk).map(lambda kv: {**data, kv[0]: kv[1]}),
            st.sampled_from(keys).flatmap(
                lambda k: _mutations(data[k]).map(lambda v: {**data, k: v})
            ),
        )
    if isinstance(data, list) and data:
        return st.integers(0, len(data) - 1).flatmap(
            lambda i: _mutations(data[i]).map(lambda v: [*data[:i], v, *data[i + 1 :]])
        )
    return junk


def _json(msg: Message) -> tuple[Any, bytes]:
    body, blob = encode_body(msg, PROTOCOL_VERSION)
    return json.loads(body), blob


def _rules(cls: type, data: Any) -> str:
    if not isinstance(data, dict):
        return "rejected"
    blob_field = getattr(cls, "BLOB", None)
    if blob_field is not None:
        if blob_field in data:
            return "rejected"  # the blob travels beside the body, never in it
        data = {**data, blob_field: "x"}
    table = FIELDS[cls.__name__]
    known = {f for f, *_ in table}
    if set(data) - known:
        return "rejected"
    for f, kind, default, _ in table:
        if f not in data:
            if default is REQUIRED:
                return "rejected"
        elif kind != "bytes" and not _fits(kind, data[f]):
            return "rejected"
    return "ok"


@PROPERTY_SETTINGS
@given(data=st.data(), msg=_any_message())
def test_a_changed_body_gets_the_verdict_of_the_rules(data: st.DataObject, msg: Message) -> None:
    obj, blob = _json(msg)
    changed = data.draw(_mutations(obj))
    raw = json.dumps(changed).encode()
    assert _verdict(type(msg), raw, blob) == _rules(type(msg), changed)


def _places(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field of ``data`` (a JSON object), and those of the objects in
    it, as paths."""
    out: list[tuple[Any, ...]] = []
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for key, value in items:
        out.append((*path, key))
        if isinstance(value, dict | list):
            out += _places(value, (*path, key))
    return out


def _replaced(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = dict(data) if isinstance(data, dict) else list(data)
    copy[path[0]] = _replaced(data[path[0]], path[1:], value)
    return copy


@settings(PROPERTY_SETTINGS, max_examples=40)
@given(msg=_any_message())
def test_every_field_given_every_wrong_value_gets_the_verdict_of_the_rules(msg: Message) -> None:
    """Each field, at any depth, given each JSON value of JUNK in turn."""
    obj, blob = _json(msg)
    for path in _places(obj):
        for value in JUNK:
            changed = _replaced(obj, path, value)
            raw = json.dumps(changed).encode()
            assert _verdict(type(msg), raw, blob) == _rules(type(msg), changed), (path, value)


def test_a_refusal_names_the_field_at_its_depth() -> None:
    obj, blob = _json(Peeked(req=1, child=_child(), dropped=0))
    obj["child"]["argv"] = ["sh", 5]
    with pytest.raises(ProtocolError, match=r"^Peeked: malformed body: child\.argv\[1\]: "):
        decode_body(Peeked, json.dumps(obj).encode(), blob)


@pytest.mark.parametrize(
    "body",
    [b"[]", b"{", b'{"req": NaN}', b'"\\ud800"', b"[" * 5000, b'{"req":1,"output":"x"}'],
)
def test_what_is_not_a_body_is_refused(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_body(MESSAGE_TYPES[37], body, b"")


def test_the_codec_imports_neither_attrs_nor_cattrs() -> None:
    code = "import sys, multiserver.protocol._codec; print(sorted({'attrs', 'cattrs'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
