"""The body codec of the attrs message classes: the one private cattrs
converter, and ``FULL``, the message family of the daemon, the trio client
and the test harness. The frames around the bodies (header, versions, fds,
every rule of docs/protocol.md) are ``_frames``; its names are re-exported
here, and ``Codec(role)`` is a frames codec of this family.

A body is a UTF-8 JSON object (RFC 8259: no NaN or Infinity, no lone
surrogates in strings) whose fields match the message exactly. An OS string
(``OsStr``: argv, cwd, the environment) whose bytes are not UTF-8 travels as
``{"b": base64}`` from version 5 (and an environment with such a name as a
list of pairs); an older version cannot carry it, and ``encode_body``
refuses it (``Unrepresentable``) rather than write a frame the peer cannot
parse.
"""

from __future__ import annotations

from typing import Any, Literal

import cattrs
import cattrs.gen

from multiserver.protocol import _frames
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
from multiserver.protocol._messages import (
    CLIENT_MESSAGES,
    DAEMON_MESSAGES,
    MAX_FDS,
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    ChildInfo,
    Message,
    is_os_str,
)
from multiserver.protocol._proto import OMIT_IF_DEFAULT
from multiserver.system._osstr import to_wire

Role = Literal["client", "daemon"]

# --- the one private converter --------------------------------------------------


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(int, strict(int, "integer"))
    conv.register_structure_hook(float, strict(float, "number"))
    conv.register_structure_hook(str, strict(str, "string"))
    conv.register_structure_hook(bool, strict(bool, "boolean"))

    def is_list(t: Any) -> bool:
        return getattr(t, "__origin__", None) is list

    def is_dict(t: Any) -> bool:
        return getattr(t, "__origin__", None) is dict

    def is_env(t: Any) -> bool:
        return is_dict(t) and is_os_str(t.__args__[0])

    def is_os_list(t: Any) -> bool:
        return is_list(t) and is_os_str(t.__args__[0])

    def list_hook(t: Any) -> Any:
        (item,) = t.__args__
        inner = conv.get_structure_hook(item)

        def structure(value: Any, _t: Any) -> list[Any]:
            if not isinstance(value, list):
                raise TypeError(f"expected list, got {type(value).__name__}")
            return [inner(v, item) for v in value]

        return structure

    def dict_hook(t: Any) -> Any:
        key_t, val_t = t.__args__
        kh = conv.get_structure_hook(key_t)
        vh = conv.get_structure_hook(val_t)

        def structure(value: Any, _t: Any) -> dict[Any, Any]:
            if not isinstance(value, dict):
                raise TypeError(f"expected object, got {type(value).__name__}")
            return {kh(k, key_t): vh(v, val_t) for k, v in value.items()}

        return structure

    conv.register_structure_hook_factory(is_list, list_hook)
    conv.register_structure_hook_factory(is_dict, dict_hook)
    # OS strings, before the messages' hooks are made (registered later,
    # is_env wins over is_dict).
    conv.register_structure_hook_func(is_os_str, os_str)
    conv.register_unstructure_hook_func(is_os_str, to_wire)
    conv.register_structure_hook_func(is_env, env_from_wire)
    conv.register_unstructure_hook_func(is_env, env_to_wire)
    conv.register_unstructure_hook_func(is_os_list, list_to_wire)
    # Hello leaves out fields at their default: the handshake frame stays
    # what the first version-2 clients sent. The fields version 4 added are
    # left out at their default too, so an older peer (which rejects unknown
    # fields) sees the frames it knows. Built on first use, like every hook:
    # a client never encodes a Welcome.
    omit = cattrs.gen.override(omit_if_default=True)
    by_name: dict[str, type] = {cls.__name__: cls for cls in MESSAGE_TYPES.values()}
    by_name["ChildInfo"] = ChildInfo
    omitting: dict[type, dict[str, Any]] = {
        by_name[name]: {"_cattrs_omit_if_default": True}
        if fields == ("*",)
        else {field: omit for field in fields}
        for name, fields in OMIT_IF_DEFAULT.items()
    }
    conv.register_unstructure_hook_factory(
        lambda t: t in omitting,
        lambda t: cattrs.gen.make_dict_unstructure_fn(t, conv, **omitting[t]),
    )
    return conv


_converter = _make_converter()


def prepare_daemon() -> None:
    """Build now, rather than on first use, the hooks the daemon needs: for
    the requests it reads and the replies it sends. cattrs generates them
    lazily (5-15 ms for the first Claimed); the daemon pays that once at
    start instead of inside its first answers."""
    for cls in CLIENT_MESSAGES:
        _converter.get_structure_hook(cls)
    for cls in DAEMON_MESSAGES:
        _converter.get_unstructure_hook(cls)


def _describe(exc: BaseException) -> str:
    """One line out of a cattrs error tree."""
    if isinstance(exc, cattrs.errors.ForbiddenExtraKeysError):
        return "extra fields: " + ", ".join(map(repr, sorted(exc.extra_fields)))
    if isinstance(exc, KeyError):  # cattrs reports a missing field as KeyError
        return f"missing field {exc.args[0]!r}" if exc.args else "missing field"
    if isinstance(exc, BaseExceptionGroup):
        notes = getattr(exc, "__notes__", None) or []
        for sub in exc.exceptions:
            sub_notes = getattr(sub, "__notes__", None) or []
            inner = _describe(sub)
            where = sub_notes[0] if sub_notes else (notes[0] if notes else "")
            return f"{where}: {inner}" if where else inner
    return str(exc) or type(exc).__name__


def encode_body(msg: Message, version: int = PROTOCOL_VERSION) -> tuple[bytes, bytes]:
    """Message -> (JSON body, blob), as a peer of ``version`` reads it.
    Raises Unrepresentable if that version cannot carry it."""
    return dump_message(type(msg), _converter.unstructure(msg), version)


def decode_body(cls: type[Message], body: bytes, blob: bytes) -> Message:
    """(JSON body, blob) -> message; raises ProtocolError with one line."""
    data = load_body(cls, body, blob)
    try:
        msg: Message = _converter.structure(data, cls)
    except Exception as exc:
        raise ProtocolError(f"{cls.__name__}: malformed body: {one_line(_describe(exc))}") from None
    return msg


def encode_frame(msg: Message, version: int, nfds: int = 0) -> bytes:
    return _frames.encode_frame(FULL, msg, version, nfds)


FULL = Family(
    types={code: cls for code, cls in MESSAGE_TYPES.items()},
    client=frozenset(cls.TYPE for cls in CLIENT_MESSAGES),
    max_fds={cls.TYPE: n for cls, n in MAX_FDS.items()},
    encode_body=encode_body,
    decode_body=decode_body,
)


class Codec(_frames.Codec):
    """One side of one connection, holding the attrs message classes."""

    def __init__(self, role: Role, *, max_frame: int = MAX_FRAME) -> None:
        super().__init__(role, FULL, max_frame=max_frame)
