"""The light codec (``_light``, plain generated classes, no attrs or
cattrs) against the definition: the attrs classes and the cattrs codec
(``_codec``). The generated module is what the generator writes today;
every message type, at every version, encodes to the same bytes in both and
decodes to the same values, non-UTF-8 OS strings included; a body one
rejects, the other rejects."""

from __future__ import annotations

import json
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from multiserver.protocol import _codec, _light, _light_messages as light
from multiserver.protocol._frames import ProtocolError, Unrepresentable
from multiserver.protocol._messages import (
    MESSAGE_TYPES,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Message,
)
from tests.multiserver.protocol.test_codec_properties import PROPERTY_SETTINGS, message_strategy
from tools import lightgen

VERSIONS = range(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION + 1)


def to_light(value: Any) -> Any:
    """An attrs message (or record, or a list of them) as its light twin."""
    if isinstance(value, list):
        return [to_light(v) for v in value]
    if attrs.has(type(value)):
        cls = getattr(light, type(value).__name__)
        return cls(**{f.name: to_light(getattr(value, f.name)) for f in attrs.fields(type(value))})
    return value


def test_the_generated_module_is_what_the_generator_writes() -> None:
    """Stale after a change to _messages.py: run `make faces`."""
    assert lightgen.TARGET.read_text() == lightgen.module_text()


def test_every_message_has_a_light_twin_with_its_code_and_fields() -> None:
    assert set(light.TYPES) == set(MESSAGE_TYPES)
    for code, cls in MESSAGE_TYPES.items():
        twin = getattr(light, cls.__name__)
        assert twin.TYPE == code == _light.LIGHT.types[code].TYPE
        assert twin.__slots__ == tuple(f.name for f in attrs.fields(cls))
        assert getattr(twin, "BLOB", None) == getattr(cls, "BLOB", None)
    assert _light.LIGHT.client == _codec.FULL.client
    assert _light.LIGHT.max_fds == _codec.FULL.max_fds


def _encoded(module: Any, msg: Any, version: int) -> tuple[bytes, bytes] | str:
    try:
        return typing.cast(tuple[bytes, bytes], module.encode_body(msg, version))
    except Unrepresentable:
        return "unrepresentable"


@st.composite
def _any_message(draw: st.DrawFn) -> Message:
    cls = draw(st.sampled_from(sorted(MESSAGE_TYPES.values(), key=lambda c: c.TYPE)))
    return typing.cast(Message, draw(message_strategy(cls)))


@PROPERTY_SETTINGS
@given(msg=_any_message(), version=st.sampled_from(VERSIONS))
def test_both_codecs_write_the_same_bytes_and_read_the_same_values(
    msg: Message, version: int
) -> None:
    twin = to_light(msg)
    assert twin == to_light(msg) and twin != msg  # the twin is its own class
    full = _encoded(_codec, msg, version)
    assert _encoded(_light, twin, version) == full
    if isinstance(full, str):
        return
    body, blob = full
    back = _codec.decode_body(type(msg), body, blob)
    assert back == msg
    assert _light.decode_body(type(twin), body, blob) == twin


def _verdict(module: Any, cls: type, body: bytes, blob: bytes) -> Any:
    try:
        return ("ok", to_light(module.decode_body(cls, body, blob)))
    except ProtocolError as exc:
        assert "\n" not in str(exc)
        return "rejected"


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


@PROPERTY_SETTINGS
@given(data=st.data(), msg=_any_message())
def test_a_body_one_codec_rejects_the_other_rejects(data: st.DataObject, msg: Message) -> None:
    full = _encoded(_codec, msg, PROTOCOL_VERSION)
    assert not isinstance(full, str)
    body, blob = full
    changed = data.draw(_mutations(json.loads(body)))
    raw = json.dumps(changed).encode()
    twin = getattr(light, type(msg).__name__)
    assert _verdict(_light, twin, raw, blob) == _verdict(_codec, type(msg), raw, blob)


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
def test_every_field_given_every_wrong_value_gets_the_same_verdict(msg: Message) -> None:
    """Each field, at any depth, given each JSON value of JUNK in turn."""
    full = _encoded(_codec, msg, PROTOCOL_VERSION)
    assert not isinstance(full, str)
    body, blob = full
    data = json.loads(body)
    twin = getattr(light, type(msg).__name__)
    for path in _places(data):
        for value in JUNK:
            raw = json.dumps(_replaced(data, path, value)).encode()
            assert _verdict(_light, twin, raw, blob) == _verdict(_codec, type(msg), raw, blob), (
                path,
                value,
            )


@pytest.mark.parametrize(
    "body",
    [b"[]", b"{", b'{"req": NaN}', b'"\\ud800"', b"[" * 5000, b'{"req":1,"output":"x"}'],
)
def test_both_refuse_what_is_not_a_body(body: bytes) -> None:
    for module, cls in ((_codec, MESSAGE_TYPES[37]), (_light, light.Peeked)):
        with pytest.raises(ProtocolError):
            module.decode_body(cls, body, b"")
