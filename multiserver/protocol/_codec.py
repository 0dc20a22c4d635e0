"""The body codec of the protocol's messages, and ``Codec(role)``: the
frames codec of one side of a connection (``_frames`` holds the frames:
header, versions, fds, every rule of docs/protocol.md; its names are
re-exported here).

A body is a UTF-8 JSON object (RFC 8259: no NaN or Infinity, no lone
surrogates in strings) whose fields match the message exactly: the exact
JSON type of each field ("5" is not 5, true is not 1), no field it does not
know and none missing. An OS string (``OsStr``: argv, cwd, the environment)
whose bytes are not UTF-8 travels as ``{"b": base64}`` from version 5 (and
an environment with such a name as a list of pairs); an older version cannot
carry it, and ``encode_body`` refuses it (``Unrepresentable``) rather than
write a frame the peer cannot parse. The fields ``_proto.OMIT_IF_DEFAULT``
names are left out at their default.

The codec walks a field table made from the messages' own annotations
(``field_table``), so a message is defined once, in ``_messages``, and
nothing is generated. It imports neither attrs nor cattrs: every command
starts without them, and the daemon's import is the smaller for it.
"""

from __future__ import annotations

from multiserver.protocol import _frames, _messages
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
from multiserver.protocol._frames import (
    HEADER as HEADER,
    HEADER_SIZE as HEADER_SIZE,
    MAGIC as MAGIC,
    MAX_FDS_PER_FRAME as MAX_FDS_PER_FRAME,
    MAX_FRAME as MAX_FRAME,
    MAX_QUEUED_FDS as MAX_QUEUED_FDS,
    NEED_DATA as NEED_DATA,
    Event as Event,
    Family,
    FrameTooLarge as FrameTooLarge,
    ProtocolError as ProtocolError,
    Unrepresentable as Unrepresentable,
    close_fds as close_fds,
)
from multiserver.protocol._proto import OMIT_IF_DEFAULT, PROTOCOL_VERSION
from multiserver.system._osstr import to_wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, Literal

    from multiserver.protocol._messages import Message

    Convert = Callable[[Any], Any]
    Role = Literal["client", "daemon"]
    # (field, kind, default or REQUIRED, left out of the body at its default)
    FieldTable = tuple[tuple[str, str, object, bool], ...]

REQUIRED = "REQUIRED"


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


# --- the field table ----------------------------------------------------------


def kind_of(
    annotation: str, records: Mapping[str, type], literals: Mapping[str, tuple[str, ...]]
) -> str:
    """A field's annotation, as text, -> its kind: ``int float str bool
    bytes``, ``os`` (an ``OsStr``), ``env`` (a ``dict[OsStr, OsStr]``),
    ``lit:A|B`` (an alias of ``literals``), a name of ``records`` (a record
    nested in the message), ``[K]`` (a list of K) or ``?K`` (K or None).
    Any other form is refused: a message holds only what JSON carries."""
    text = annotation.strip()
    if text.endswith("| None"):
        return "?" + kind_of(text[: -len("| None")], records, literals)
    if text in ("int", "float", "str", "bool", "bytes"):
        return text
    if text == "OsStr":
        return "os"
    if text == "dict[OsStr, OsStr]":
        return "env"
    if text.startswith("list[") and text.endswith("]"):
        return f"[{kind_of(text[5:-1], records, literals)}]"
    if text in literals:
        return "lit:" + "|".join(literals[text])
    if text in records:
        return text
    raise TypeError(f"no wire form for the annotation {annotation!r}")


def field_table(
    cls: type,
    records: Mapping[str, type],
    literals: Mapping[str, tuple[str, ...]],
    omitted: tuple[str, ...] = (),
) -> FieldTable:
    """The fields of the record class ``cls``, in order, with their kinds
    (from its annotations), defaults (or REQUIRED) and whether each is left
    out of a body at its default (``omitted``, ``("*",)`` for every one)."""
    annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    defaults: dict[str, object] = cls.__record_defaults__  # type: ignore[attr-defined]
    out = []
    for name in cls.__record_fields__:  # type: ignore[attr-defined]
        default = defaults.get(name, REQUIRED)
        omit = default is not REQUIRED and ("*" in omitted or name in omitted)
        out.append((name, kind_of(annotations[name], records, literals), default, omit))
    return tuple(out)


def structurers(
    classes: Mapping[str, type],
    fields: Mapping[str, FieldTable],
    scalars: Mapping[str, Convert],
    *,
    forbid_extra: bool,
) -> dict[str, Convert]:
    """For each record class (by name), a function from its JSON object to
    an instance, by walking its field table: ``scalars`` read each scalar
    kind; an unknown field is refused (``forbid_extra``: the wire) or
    ignored (saved state). A value that does not fit raises an exception
    whose text says where (``[2].name: ...``)."""
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
        make, start = _maker(classes[name])
        table = [
            (f, structurer(kind), default, _SURE.get(kind.lstrip("?")), kind.startswith("?"))
            for f, kind, default, _omit in fields[name]
        ]
        known = frozenset(f for f, *_ in table)

        def structure(value: Any) -> Any:
            if type(value) is not dict:
                raise TypeError(f"expected object, got {type(value).__name__}")
            if forbid_extra and not known.issuperset(value):
                extra = sorted(set(value) - known)
                raise ValueError(f"extra fields: {', '.join(map(repr, extra))}")
            kwargs = start.copy()
            for field, convert, default, sure, nullable in table:
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
                elif default == REQUIRED:  # a generated twin's table spells it alike
                    raise _Malformed("", f"missing field {field!r}")
            return make(kwargs)

        return structure

    for name in fields:
        built[name] = record(name)
    return built


def _maker(cls: type) -> tuple[Callable[[dict[str, Any]], Any], dict[str, Any]]:
    """How a record is made from its fields, and what its fields start as.
    A frozen ``_record`` starts at its defaults and is filled in one step,
    past its ``__init__`` (which sets each field through
    ``object.__setattr__``): every field has been checked here already.
    Anything else (a generated twin) is called with the fields given."""
    defaults = getattr(cls, "__record_defaults__", None)
    if defaults is None or "__slots__" in cls.__dict__:
        return (lambda kwargs: cls(**kwargs)), {}
    new, set_dict = object.__new__, object.__setattr__

    def make(fields: dict[str, Any]) -> Any:
        obj: Any = new(cls)
        set_dict(obj, "__dict__", fields)
        return obj

    return make, dict(defaults)


def twin_structurers(
    module: Any, scalars: Mapping[str, Convert], *, forbid_extra: bool
) -> dict[str, Convert]:
    """``structurers`` of a generated twin module (``tools/lightgen.py``):
    its classes and their table ``module.FIELDS``."""
    classes = {name: getattr(module, name) for name in module.FIELDS}
    return structurers(classes, module.FIELDS, scalars, forbid_extra=forbid_extra)


def _unstructurer(kind: str) -> Convert:
    """How a field of ``kind`` becomes JSON; ``_identity`` when it already is."""
    if kind.startswith("?"):
        inner = _unstructurer(kind[1:])
        return _identity if inner is _identity else _optional(inner)
    if kind == "[os]":
        return list_to_wire
    if kind.startswith("["):
        inner = _unstructurer(kind[1:-1])
        if inner is _identity:
            return _identity
        return lambda value: [inner(item) for item in value]
    if kind == "os":
        return to_wire
    if kind == "env":
        return env_to_wire
    if kind in _SCALARS or kind.startswith("lit:"):
        return _identity
    return lambda value: _UNSTRUCTURE[kind](value)


def _record_unstructurer(name: str) -> Convert:
    """A record -> its JSON object, fields in their order: read from its
    ``__dict__`` at once, then only the fields that are not JSON already
    converted, and those left out at their default dropped (a listing of
    1,000 children is written in 3.5 ms so, 8.6 ms field by field)."""
    table = FIELDS[name]
    names = tuple(f for f, *_ in table)
    converts = [(f, c) for f, kind, _d, _o in table if (c := _unstructurer(kind)) is not _identity]
    omitted = [(f, default) for f, _k, default, omit in table if omit]

    def unstructure(obj: Any) -> dict[str, Any]:
        held = obj.__dict__
        out = {f: held[f] for f in names}
        for field, convert in converts:
            out[field] = convert(out[field])
        for field, default in omitted:
            if out[field] == default:
                del out[field]
        return out

    return unstructure


# The records that travel inside messages, and every message, by name.
_CLASSES: dict[str, type] = {
    "ChildInfo": _messages.ChildInfo,
    "ClaimedChild": _messages.ClaimedChild,
    **{cls.__name__: cls for cls in _messages.MESSAGE_TYPES.values()},
}
FIELDS: dict[str, FieldTable] = {
    name: field_table(cls, _CLASSES, _messages.LITERALS, OMIT_IF_DEFAULT.get(name, ()))
    for name, cls in _CLASSES.items()
}
_STRUCTURE = structurers(_CLASSES, FIELDS, _SCALARS, forbid_extra=True)
_UNSTRUCTURE: dict[str, Convert] = {name: _record_unstructurer(name) for name in FIELDS}


def encode_body(msg: Message, version: int = PROTOCOL_VERSION) -> tuple[bytes, bytes]:
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


def encode_frame(msg: Message, version: int, nfds: int = 0) -> bytes:
    return _frames.encode_frame(MESSAGES, msg, version, nfds)


MESSAGES = Family(
    types=dict(_messages.MESSAGE_TYPES),
    client=frozenset(cls.TYPE for cls in _messages.CLIENT_MESSAGES),
    max_fds={cls.TYPE: n for cls, n in _messages.MAX_FDS.items()},
    encode_body=encode_body,
    decode_body=decode_body,
)


class Codec(_frames.Codec):
    """One side of one connection."""

    def __init__(self, role: Role, *, max_frame: int = MAX_FRAME) -> None:
        super().__init__(role, MESSAGES, max_frame=max_frame)
