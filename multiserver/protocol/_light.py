"""The light body codec: the messages of ``_light_messages`` (plain classes
generated from the attrs ones) read and written by walking the field table
generated beside them. It imports neither attrs nor cattrs, so the blocking
client, and every command that uses only it, starts in a fraction of the
time. ``LIGHT`` is its message family (``_frames.Family``).

It is held to the cattrs codec (``_codec``), which stays the definition:
``tests/multiserver/protocol/test_light.py`` runs every message type through both,
both ways, and compares the bytes and the values. Like it, it takes only
the exact JSON type of each field ("5" is not 5, true is not 1), no field
it does not know and none missing, the OS string forms of ``_body``, and
leaves out the fields ``_proto.OMIT_IF_DEFAULT`` names at their default.
"""

from __future__ import annotations

from multiserver.protocol import _light_messages as m
from multiserver.protocol._body import (
    dump_message,
    env_from_wire,
    env_to_wire,
    list_to_wire,
    load_body,
    one_line,
    os_str,
    strict,
)
from multiserver.protocol._frames import Family, ProtocolError
from multiserver.system._osstr import to_wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from multiserver.protocol._messages import Message

    Convert = Callable[[Any], Any]


class _Malformed(Exception):
    """A field that does not hold what its kind says; ``where`` is its path."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}" if where else why)
        self.where = where
        self.why = why

    def inside(self, outer: str) -> _Malformed:
        """The same fault, seen from the field or item ``outer`` holding it."""
        if not self.where:
            return _Malformed(outer, self.why)
        sep = "" if self.where.startswith("[") else "."
        return _Malformed(f"{outer}{sep}{self.where}", self.why)


def _identity(value: Any) -> Any:
    return value


def _scalar(kind: type, name: str) -> Convert:
    check = strict(kind, name)
    return lambda value: check(value, None)


def _literal(values: tuple[str, ...]) -> Convert:
    def check(value: Any) -> Any:
        if type(value) is str and value in values:
            return value
        raise ValueError(f"{value!r} is not one of {', '.join(values)}")

    return check


def _optional(inner: Convert) -> Convert:
    return lambda value: None if value is None else inner(value)


def _list_of(inner: Convert) -> Convert:
    def structure(value: Any) -> list[Any]:
        if type(value) is not list:
            raise TypeError(f"expected list, got {type(value).__name__}")
        out = []
        for i, item in enumerate(value):
            try:
                out.append(inner(item))
            except _Malformed as exc:
                raise exc.inside(f"[{i}]") from None
            except Exception as exc:
                raise _Malformed(f"[{i}]", _said(exc)) from None
        return out

    return structure


def _said(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


# The wire's scalars: exact JSON types, OS strings in their wire forms.
_SCALARS: dict[str, Convert] = {
    "int": _scalar(int, "integer"),
    "float": _scalar(float, "number"),
    "str": _scalar(str, "string"),
    "bool": _scalar(bool, "boolean"),
    "bytes": _identity,  # the blob, as the frame carried it
    "os": lambda value: os_str(value),
    "env": lambda value: env_from_wire(value, None),
}


# Kinds whose value is sure to pass the check when it has exactly this
# type (and, a string, is ASCII): both the wire's and the store's checks.
_SURE: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool, "os": str}


def twin_structurers(
    module: Any, scalars: dict[str, Convert], *, forbid_extra: bool
) -> dict[str, Convert]:
    """For each class of a generated twin module (``tools/lightgen.py``), a
    function from its JSON object to an instance, by walking ``module.FIELDS``:
    ``scalars`` read each scalar kind; an unknown field is refused
    (``forbid_extra``: the wire) or ignored (saved state). A value that does
    not fit raises an exception whose text says where (``[2].name: ...``)."""
    built: dict[str, Convert] = {}

    def structurer(kind: str) -> Convert:
        if kind.startswith("?"):
            return _optional(structurer(kind[1:]))
        if kind.startswith("["):
            return _list_of(structurer(kind[1:-1]))
        if kind.startswith("lit:"):
            return _literal(tuple(kind[4:].split("|")))
        if kind in scalars:
            return scalars[kind]
        return lambda value: built[kind](value)

    def record(name: str) -> Convert:
        cls = getattr(module, name)
        fields = [
            (f, structurer(kind), default, _SURE.get(kind.lstrip("?")), kind.startswith("?"))
            for f, kind, default, _omit in module.FIELDS[name]
        ]
        known = frozenset(f for f, *_ in fields)
        required = module.REQUIRED

        def structure(value: Any) -> Any:
            if type(value) is not dict:
                raise TypeError(f"expected object, got {type(value).__name__}")
            if forbid_extra and not known.issuperset(value):
                extra = sorted(set(value) - known)
                raise ValueError(f"extra fields: {', '.join(map(repr, extra))}")
            kwargs = {}
            for field, convert, default, sure, nullable in fields:
                if field in value:
                    item: Any = value[field]
                    # The common case, a value of the field's exact type (an
                    # ASCII string), passes every check: taken as it is. A
                    # listing of 1,000 children is read 3x faster so.
                    if (nullable and item is None) or (
                        sure is not None
                        and type(item) is sure
                        and (sure is not str or item.isascii())  # type: ignore[attr-defined]
                    ):
                        kwargs[field] = item
                        continue
                    try:
                        kwargs[field] = convert(item)
                    except _Malformed as exc:
                        raise exc.inside(field) from None
                    except Exception as exc:
                        raise _Malformed(field, _said(exc)) from None
                elif default == required:
                    raise _Malformed("", f"missing field {field!r}")
            return cls(**kwargs)

        return structure

    for name in module.FIELDS:
        built[name] = record(name)
    return built


def _unstructurer(kind: str) -> Convert:
    if kind.startswith("?"):
        return _optional(_unstructurer(kind[1:]))
    if kind == "[os]":
        return list_to_wire
    if kind.startswith("["):
        inner = _unstructurer(kind[1:-1])
        if inner is _identity:
            return list
        return lambda value: [inner(item) for item in value]
    if kind == "os":
        return to_wire
    if kind == "env":
        return env_to_wire
    if kind in _SCALARS or kind.startswith("lit:"):
        return _identity
    return lambda value: _UNSTRUCTURE[kind](value)


def _record_unstructurer(name: str) -> Convert:
    fields = [(f, _unstructurer(kind), default, omit) for f, kind, default, omit in m.FIELDS[name]]

    def unstructure(obj: Any) -> dict[str, Any]:
        out = {}
        for field, convert, default, omit in fields:
            value = getattr(obj, field)
            if omit and value == default:
                continue
            out[field] = convert(value)
        return out

    return unstructure


_STRUCTURE = twin_structurers(m, _SCALARS, forbid_extra=True)
_UNSTRUCTURE: dict[str, Convert] = {name: _record_unstructurer(name) for name in m.FIELDS}


def encode_body(msg: Message, version: int) -> tuple[bytes, bytes]:
    """Message -> (JSON body, blob), as a peer of ``version`` reads it.
    Raises Unrepresentable if that version cannot carry it."""
    cls = type(msg)
    return dump_message(cls, _UNSTRUCTURE[cls.__name__](msg), version)


def decode_body(cls: type[Message], body: bytes, blob: bytes) -> Message:
    """(JSON body, blob) -> message; raises ProtocolError with one line."""
    data = load_body(cls, body, blob)
    try:
        msg: Message = _STRUCTURE[cls.__name__](data)
    except Exception as exc:
        raise ProtocolError(f"{cls.__name__}: malformed body: {one_line(_said(exc))}") from None
    return msg


LIGHT = Family(
    types={code: getattr(m, name) for code, name in m.TYPES.items()},
    client=m.CLIENT,
    max_fds=m.MAX_FDS,
    encode_body=encode_body,
    decode_body=decode_body,
)
