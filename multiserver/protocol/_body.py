"""JSON bodies, as the codec (``_codec``) reads and writes them, and the
store's light read too: one strict check per JSON type, the OS string
forms, and the body's JSON itself. Pure; no attrs.

OS strings (``OsStr``: argv, cwd, the environment). Unstructured, an OS
string is a str when its bytes are UTF-8 and those bytes otherwise.
json.dumps cannot write bytes, so it asks its ``default``: ``_tagged``
writes {"b": base64} (version 5), ``_untagged`` refuses (older versions). So
the version is decided in one place, and the common case costs one
isascii() per string.
"""

from __future__ import annotations

import json

from multiserver.protocol._frames import ProtocolError, Unrepresentable
from multiserver.protocol._proto import OS_BYTES_VERSION
from multiserver.system._osstr import escaped, from_wire_bytes, from_wire_text, is_utf8, to_wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def strict(kind: type, name: str) -> Any:
    """A structure hook that accepts exactly ``kind`` (an int for a float
    too), nothing converted: "5" is not 5 and true is not 1. The common case
    (the exact type) costs one comparison: it runs for every field."""

    def check(value: Any, _type: Any) -> Any:
        if type(value) is kind:
            if isinstance(value, str) and not value.isascii():
                # A lone surrogate ("\ud800" in JSON) has no UTF-8 form:
                # echoing it back would fail in send(), far from its sender.
                try:
                    value.encode()
                except UnicodeEncodeError:
                    raise ValueError("string is not valid Unicode (lone surrogate)") from None
            return value
        if kind is float and type(value) is int:
            return float(value)
        raise TypeError(f"expected {name}, got {type(value).__name__}")

    return check


#

_TAG = "b"


def _tagged(value: object) -> dict[str, str]:
    if type(value) is bytes:
        import base64  # only for bytes that are not UTF-8

        return {_TAG: base64.b64encode(value).decode("ascii")}
    raise TypeError(f"cannot encode {type(value).__name__}")


def _untagged(value: object) -> Any:
    if type(value) is bytes:
        raise Unrepresentable(
            f"a string that is not UTF-8 ({value.decode('utf-8', 'backslashreplace')})"
            f" needs protocol version {OS_BYTES_VERSION}"
        )
    raise TypeError(f"cannot encode {type(value).__name__}")


def os_str(value: Any, _type: Any = None) -> str:
    """An OS string field: a JSON string, or the tagged bytes of one that is
    not UTF-8 (in that one form: canonical base64, bytes that are not UTF-8)."""
    if type(value) is str:
        return from_wire_text(value)
    if type(value) is dict and len(value) == 1 and type(value.get(_TAG)) is str:
        import base64  # only for bytes that are not UTF-8

        text = value[_TAG]
        try:
            raw = base64.b64decode(text, validate=True)
        except ValueError:  # binascii.Error, or not ASCII
            raise ValueError(f'"{_TAG}" is not base64') from None
        if base64.b64encode(raw).decode("ascii") != text:
            raise ValueError(f'"{_TAG}" is not canonical base64')
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return from_wire_bytes(raw)
        raise ValueError("tagged bytes are UTF-8: they travel as a JSON string")
    if type(value) is dict:
        raise ValueError(f'expected a string or {{"{_TAG}": base64}}, got another object')
    raise TypeError(f"expected string, got {type(value).__name__}")


def list_to_wire(items: list[str]) -> list[str | bytes]:
    """An argv: one check for the whole list in the common case, ASCII."""
    if "".join(items).isascii():
        return list(items)
    return [to_wire(item) for item in items]


def env_to_wire(env: dict[str, str]) -> dict[str, str | bytes] | list[list[str | bytes]]:
    """An object; a list of [name, value] pairs if a name is not UTF-8 (a
    JSON object's keys are strings)."""
    if "".join(env).isascii() and "".join(env.values()).isascii():
        return dict(env)
    out: dict[str, str | bytes] = {}
    for name, value in env.items():
        key = to_wire(name)
        if type(key) is not str:
            return [[to_wire(k), to_wire(v)] for k, v in env.items()]
        out[key] = to_wire(value)
    return out


def env_from_wire(value: Any, _type: Any) -> dict[str, str]:
    if type(value) is dict:
        return {os_str(k): os_str(v) for k, v in value.items()}
    if type(value) is not list:
        raise TypeError(f"expected object or list of pairs, got {type(value).__name__}")
    env: dict[str, str] = {}
    for pair in value:
        if type(pair) is not list or len(pair) != 2:
            raise TypeError("expected [name, value] pairs")
        name = os_str(pair[0])
        if name in env:
            raise ValueError(f"variable {escaped(name)} given twice")
        env[name] = os_str(pair[1])
    if all(map(is_utf8, env)):
        raise ValueError("every name is UTF-8: the environment travels as an object")
    return env


def one_line(text: str) -> str:
    """An error that quotes what a peer sent, on one line whatever it sent."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def dump_message(cls: type[Any], data: dict[str, Any], version: int) -> tuple[bytes, bytes]:
    """An unstructured message of ``cls`` -> (its JSON body, its blob: the
    ``BLOB`` field, taken out of ``data``), for a peer of ``version``."""
    blob_field: str | None = getattr(cls, "BLOB", None)
    blob = data.pop(blob_field) if blob_field is not None else b""
    return dump_body(data, version), blob


def dump_body(data: dict[str, Any], version: int) -> bytes:
    """An unstructured message -> its JSON body, for a peer of ``version``.
    Raises Unrepresentable if that version cannot carry it."""
    default = _tagged if version >= OS_BYTES_VERSION else _untagged
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=default).encode()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_body(cls: type[Any], body: bytes, blob: bytes) -> dict[str, Any]:
    """A body (and the frame's blob, under the class's ``BLOB`` field) ->
    the JSON object to structure; raises ProtocolError with one line."""
    try:
        # Decode first: json.loads(bytes) would also accept UTF-16/32 and a BOM.
        data = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"{cls.__name__}: body is not valid JSON ({exc})") from None
    except RecursionError:
        # "[[[[..." a few thousand deep: json.loads recurses per level. Left
        # alone, it would escape the codec and take the daemon down with it.
        raise ProtocolError(f"{cls.__name__}: body is not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{cls.__name__}: body is not a JSON object")
    blob_field: str | None = getattr(cls, "BLOB", None)
    if blob_field is not None:
        if blob_field in data:
            raise ProtocolError(f"{cls.__name__}: field {blob_field!r} must travel as the blob")
        data[blob_field] = blob
    elif blob:
        raise ProtocolError(f"{cls.__name__}: carries no blob, got {len(blob)} bytes")
    return data
