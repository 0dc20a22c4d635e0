"""The sans-IO codec of the multiserver protocol.

It never touches a socket and imports neither trio nor socket: the I/O layer
feeds it what ``recvmsg`` returned (``receive_data(data, fds)``), asks for
parsed events (``next_event()``) and asks it to encode messages (``send``),
then sends the bytes with the fds itself. See docs/protocol.md.

Frame layout (network byte order)::

    offset size field
    0      2    magic b"MS"
    2      2    protocol version
    4      2    message type
    6      2    number of fds that travel with the frame (SCM_RIGHTS, sent
                with the frame's first byte)
    8      4    length of the JSON body (UTF-8 object)
    12     4    length of the blob (raw bytes of the message's BLOB field)
    16     ...  JSON body, then blob

Rules, all enforced here:

- A frame's total size is at most ``max_frame``.
- The first frame a daemon receives is ``Hello``; the first a client receives
  is ``Welcome``, ``Refused`` or ``Error``. Those handshake frames are read
  whatever their header version; once a version is negotiated every frame must
  carry it, and ``Hello``, ``Welcome`` and ``Refused`` may not come again.
- A body is a UTF-8 JSON object (RFC 8259: no NaN or Infinity, no lone
  surrogates in strings) whose fields match the message exactly.
- An OS string (``OsStr``: argv, cwd, the environment) whose bytes are not
  UTF-8 travels as ``{"b": base64}`` from version 5 (and an environment with
  such a name as a list of pairs); an older version cannot carry it, and
  ``send`` refuses it (``Unrepresentable``) rather than write a frame the
  peer cannot parse.
- Each side accepts only the messages the other side may send, and only the
  message types that may carry fds carry them (at most ``MAX_FDS`` each, never
  more than 253).
- fds belong to the frame whose first byte arrived in the same read. An fd
  that no frame claims, a frame that lacks its fds, or a read whose ancillary
  data was truncated is a protocol error. A daemon's codec refuses every fd
  as it arrives: no client message carries any.
- On any protocol error every fd the codec holds is closed, the codec is broken
  for good, and the error says what went wrong in one line.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import struct
from collections.abc import Sequence
from typing import Any, Literal

import attrs
import cattrs
import cattrs.gen

from multiserver._messages import (
    CLIENT_MESSAGES,
    DAEMON_MESSAGES,
    MAX_FDS,
    MESSAGE_TYPES,
    OS_BYTES_VERSION,
    PROTOCOL_VERSION,
    ChildInfo,
    Children,
    Error,
    Hello,
    Message,
    Refused,
    Welcome,
)
from multiserver._osstr import (
    escaped,
    from_wire_bytes,
    from_wire_text,
    is_os_str,
    is_utf8,
    to_wire,
)

MAGIC = b"MS"
HEADER = struct.Struct("!2sHHHII")
HEADER_SIZE = HEADER.size
MAX_FRAME = 16 * 1024 * 1024
MAX_FDS_PER_FRAME = 253
# fds queued but not yet claimed by a parsed frame; more is hostile.
MAX_QUEUED_FDS = 4 * MAX_FDS_PER_FRAME

Role = Literal["client", "daemon"]


class ProtocolError(Exception):
    """The peer broke the protocol. The message is one line for a human."""


class FrameTooLarge(ValueError):
    """``Codec.send``: the encoded frame exceeds the maximum; nothing was sent."""


class Unrepresentable(ValueError):
    """``Codec.send``: the message holds an OS string whose bytes are not
    UTF-8, and the negotiated version is older than 5; nothing was sent."""


@attrs.frozen
class Event:
    """A parsed message and the fds that travelled with it (now the caller's)."""

    message: Message
    fds: tuple[int, ...] = ()


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def close_fds(fds: Sequence[int]) -> None:
    """Close fds the caller owns, ignoring ones already closed."""
    _close_all(fds)


# --- the one private converter --------------------------------------------------


def _strict(kind: type, name: str) -> Any:
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


# --- OS strings (``OsStr``: argv, cwd, the environment) --------------------------
#
# Unstructured, an OS string is a str when its bytes are UTF-8 and those
# bytes otherwise. json.dumps cannot write bytes, so it asks its ``default``:
# ``_tagged`` writes {"b": base64} (version 5), ``_untagged`` refuses (older
# versions). So the version is decided in one place, and the common case
# costs one isascii() per string.

_TAG = "b"


def _tagged(value: object) -> dict[str, str]:
    if type(value) is bytes:
        return {_TAG: base64.b64encode(value).decode("ascii")}
    raise TypeError(f"cannot encode {type(value).__name__}")


def _untagged(value: object) -> Any:
    if type(value) is bytes:
        raise Unrepresentable(
            f"a string that is not UTF-8 ({value.decode('utf-8', 'backslashreplace')})"
            f" needs protocol version {OS_BYTES_VERSION}"
        )
    raise TypeError(f"cannot encode {type(value).__name__}")


def _os_str(value: Any, _type: Any = None) -> str:
    """An OS string field: a JSON string, or the tagged bytes of one that is
    not UTF-8 (in that one form: canonical base64, bytes that are not UTF-8)."""
    if type(value) is str:
        return from_wire_text(value)
    if type(value) is dict and len(value) == 1 and type(value.get(_TAG)) is str:
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


def _list_to_wire(items: list[str]) -> list[str | bytes]:
    """An argv: one check for the whole list in the common case, ASCII."""
    if "".join(items).isascii():
        return list(items)
    return [to_wire(item) for item in items]


def _env_to_wire(env: dict[str, str]) -> dict[str, str | bytes] | list[list[str | bytes]]:
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


def _env(value: Any, _type: Any) -> dict[str, str]:
    if type(value) is dict:
        return {_os_str(k): _os_str(v) for k, v in value.items()}
    if type(value) is not list:
        raise TypeError(f"expected object or list of pairs, got {type(value).__name__}")
    env: dict[str, str] = {}
    for pair in value:
        if type(pair) is not list or len(pair) != 2:
            raise TypeError("expected [name, value] pairs")
        name = _os_str(pair[0])
        if name in env:
            raise ValueError(f"variable {escaped(name)} given twice")
        env[name] = _os_str(pair[1])
    if all(map(is_utf8, env)):
        raise ValueError("every name is UTF-8: the environment travels as an object")
    return env


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(int, _strict(int, "integer"))
    conv.register_structure_hook(float, _strict(float, "number"))
    conv.register_structure_hook(str, _strict(str, "string"))
    conv.register_structure_hook(bool, _strict(bool, "boolean"))

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
    conv.register_structure_hook_func(is_os_str, _os_str)
    conv.register_unstructure_hook_func(is_os_str, to_wire)
    conv.register_structure_hook_func(is_env, _env)
    conv.register_unstructure_hook_func(is_env, _env_to_wire)
    conv.register_unstructure_hook_func(is_os_list, _list_to_wire)
    # Hello leaves out fields at their default: the handshake frame stays
    # what the first version-2 clients sent. The fields version 4 added are
    # left out at their default too, so an older peer (which rejects unknown
    # fields) sees the frames it knows. Built on first use, like every hook:
    # a client never encodes a Welcome.
    omit = cattrs.gen.override(omit_if_default=True)
    omitting: dict[type, dict[str, Any]] = {
        Hello: {"_cattrs_omit_if_default": True},
        ChildInfo: {"argv_omitted": omit},
        Welcome: {"more": omit},
        Children: {"last": omit},
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
    data = _converter.unstructure(msg)
    blob_field: str | None = getattr(type(msg), "BLOB", None)
    blob = b""
    if blob_field is not None:
        blob = data.pop(blob_field)
    default = _tagged if version >= OS_BYTES_VERSION else _untagged
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=default).encode()
    return body, blob


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_body(cls: type[Message], body: bytes, blob: bytes) -> Message:
    """(JSON body, blob) -> message; raises ProtocolError with one line."""
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
    try:
        msg: Message = _converter.structure(data, cls)
    except Exception as exc:
        raise ProtocolError(f"{cls.__name__}: malformed body: {_describe(exc)}") from None
    return msg


def encode_frame(msg: Message, version: int, nfds: int = 0) -> bytes:
    body, blob = encode_body(msg, version)
    return HEADER.pack(MAGIC, version, msg.TYPE, nfds, len(body), len(blob)) + body + blob


# --- the codec ------------------------------------------------------------------


@attrs.frozen
class _FdBatch:
    start: int  # stream offset of the first byte read with these fds
    end: int
    fds: collections.deque[int]


class Codec:
    """One side of one connection. Not thread-safe; owns the fds it queues."""

    def __init__(self, role: Role, *, max_frame: int = MAX_FRAME) -> None:
        self._role: Role = role
        self._accepts = CLIENT_MESSAGES if role == "daemon" else DAEMON_MESSAGES
        self._sends = DAEMON_MESSAGES if role == "daemon" else CLIENT_MESSAGES
        self._max_frame = max_frame
        # No message a client sends carries fds: a daemon's codec refuses
        # any at once, rather than queue them for a frame that may never
        # complete (a peer could pin a thousand of the daemon's fds so).
        self._max_queued_fds = (
            MAX_QUEUED_FDS if any(MAX_FDS.get(cls, 0) for cls in self._accepts) else 0
        )
        self._buf = bytearray()
        self._offset = 0  # stream offset of self._buf[0]
        self._batches: collections.deque[_FdBatch] = collections.deque()
        self._received = 0  # stream offset of the end of what was received
        self._version: int | None = None
        self._broken: ProtocolError | None = None

    @property
    def version(self) -> int | None:
        """The negotiated version, or None before the handshake."""
        return self._version

    def set_version(self, version: int) -> None:
        self._version = version

    @property
    def queued_fds(self) -> int:
        return sum(len(b.fds) for b in self._batches)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def frame_size(self) -> int | None:
        """The size its header declares for the frame at the head of the
        buffer (None until the header is in)."""
        if len(self._buf) < HEADER_SIZE:
            return None
        *_, body_len, blob_len = HEADER.unpack_from(self._buf)
        return int(HEADER_SIZE + body_len + blob_len)

    def _fail(self, message: str, extra_fds: Sequence[int] = ()) -> ProtocolError:
        _close_all(extra_fds)
        self.close()
        self._broken = ProtocolError(message)
        return self._broken

    def close(self) -> None:
        """Close every fd still queued and let go of the bytes of an
        incomplete frame (up to 16 MiB of a peer that stalled); the codec
        reads nothing more. Safe to call more than once."""
        while self._batches:
            _close_all(self._batches.popleft().fds)
        if self._buf:
            self._offset += len(self._buf)
            self._buf = bytearray()
        if self._broken is None:
            self._broken = ProtocolError("the connection is closed")

    def receive_data(
        self, data: bytes, fds: Sequence[int] = (), *, truncated: bool = False
    ) -> None:
        """Feed what one read returned. The codec owns ``fds`` from here on.

        ``truncated`` is MSG_CTRUNC: the kernel dropped fds, a protocol error.
        Raises ProtocolError (after closing every fd it holds).
        """
        if self._broken is not None:
            _close_all(fds)
            raise self._broken
        start = self._received
        self._received += len(data)
        if fds:
            self._batches.append(_FdBatch(start, self._received, collections.deque(fds)))
        if truncated:
            raise self._fail("ancillary data truncated (MSG_CTRUNC): fds were lost")
        if fds and not data:
            raise self._fail("fds arrived without data")
        if fds and not self._max_queued_fds:
            raise self._fail(
                f"{len(fds)} fds arrived; no message a {self._peer_role()} sends carries fds"
            )
        if self.queued_fds > self._max_queued_fds:
            raise self._fail(f"too many fds queued ({self.queued_fds})")
        self._buf += data

    def next_event(self) -> Event | _NeedData:
        """The next complete message, or NEED_DATA. Raises ProtocolError."""
        if self._broken is not None:
            raise self._broken
        frame_start = self._offset
        self._check_orphan_fds(frame_start)
        if len(self._buf) < HEADER_SIZE:
            if self._buf and self._buf[: len(MAGIC)] != MAGIC[: len(self._buf)]:
                raise self._fail("bad magic: not a multiserver frame")
            return NEED_DATA
        magic, version, mtype, nfds, body_len, blob_len = HEADER.unpack_from(self._buf)
        if magic != MAGIC:
            raise self._fail("bad magic: not a multiserver frame")
        cls = MESSAGE_TYPES.get(mtype)
        if cls is None:
            raise self._fail(f"unknown message type {mtype}")
        if cls not in self._accepts:
            raise self._fail(f"{cls.__name__} may not be sent by a {self._peer_role()}")
        self._check_version(cls, version)
        total = HEADER_SIZE + body_len + blob_len
        if total > self._max_frame:
            raise self._fail(f"frame of {total} bytes exceeds the maximum of {self._max_frame}")
        if nfds > min(MAX_FDS.get(cls, 0), MAX_FDS_PER_FRAME):
            raise self._fail(f"{cls.__name__} may not carry {nfds} fds")
        if nfds > self._available_fds(frame_start):
            raise self._fail(f"{cls.__name__} announces {nfds} fds, fewer arrived")
        if len(self._buf) < total:
            return NEED_DATA
        fds = self._take_fds(frame_start, nfds)
        body = bytes(self._buf[HEADER_SIZE : HEADER_SIZE + body_len])
        blob = bytes(self._buf[HEADER_SIZE + body_len : total])
        del self._buf[:total]
        self._offset += total
        try:
            msg = decode_body(cls, body, blob)
        except ProtocolError as exc:
            raise self._fail(str(exc), fds) from None
        check = getattr(msg, "check", None)
        problem = check(len(fds)) if check is not None else None
        if problem is not None:
            raise self._fail(problem, fds)
        self._after_handshake(msg)
        self._check_orphan_fds(self._offset, fds)
        return Event(msg, tuple(fds))

    def send(self, msg: Message, nfds: int = 0) -> bytes:
        """Encode ``msg`` into a frame; the caller sends ``nfds`` fds with its
        first byte. Raises FrameTooLarge, or Unrepresentable for what the
        negotiated version cannot carry."""
        if type(msg) not in self._sends:
            raise ValueError(f"a {self._role} may not send {type(msg).__name__}")
        if nfds > min(MAX_FDS.get(type(msg), 0), MAX_FDS_PER_FRAME):
            raise ValueError(f"{type(msg).__name__} may not carry {nfds} fds")
        check = getattr(msg, "check", None)
        problem = check(nfds) if check is not None else None
        if problem is not None:
            raise ValueError(problem)
        if isinstance(msg, Welcome):
            version = msg.version
        elif isinstance(msg, Refused | Hello):
            version = msg.max_version
        else:
            version = self._version or 0
        frame = encode_frame(msg, version, nfds)
        if len(frame) > self._max_frame:
            raise FrameTooLarge(
                f"{type(msg).__name__}: frame of {len(frame)} bytes exceeds the maximum of {self._max_frame}"
            )
        if isinstance(msg, Welcome):
            self._version = msg.version
        return frame

    # --- internals -------------------------------------------------------------

    def _peer_role(self) -> str:
        return "client" if self._role == "daemon" else "daemon"

    def _check_version(self, cls: type[Message], version: int) -> None:
        handshake = (Hello,) if self._role == "daemon" else (Welcome, Refused, Error)
        if self._version is None:
            if cls not in handshake:
                raise self._fail(
                    f"expected {' or '.join(c.__name__ for c in handshake)} first, got {cls.__name__}"
                )
            return
        if cls is Hello:
            raise self._fail("Hello sent twice")
        if cls is Welcome or cls is Refused:
            raise self._fail(f"{cls.__name__} after the handshake")
        if version != self._version:
            raise self._fail(f"frame has protocol version {version}, negotiated {self._version}")

    def _after_handshake(self, msg: Message) -> None:
        if isinstance(msg, Welcome):
            self._version = msg.version

    def _available_fds(self, frame_start: int) -> int:
        return sum(len(b.fds) for b in self._batches if b.start <= frame_start < b.end)

    def _take_fds(self, frame_start: int, n: int) -> list[int]:
        taken: list[int] = []
        for batch in self._batches:
            if len(taken) == n:
                break
            if batch.start <= frame_start < batch.end:
                while batch.fds and len(taken) < n:
                    taken.append(batch.fds.popleft())
        while self._batches and not self._batches[0].fds:
            self._batches.popleft()
        return taken

    def _check_orphan_fds(self, upto: int, taken: Sequence[int] = ()) -> None:
        """fds read with bytes before ``upto`` that no frame started there:
        nobody will ever claim them. ``taken``: fds of the frame just parsed,
        closed too on error since its event is never returned."""
        for batch in self._batches:
            if batch.fds and batch.end <= upto:
                raise self._fail(f"{len(batch.fds)} fds arrived that no frame announced", taken)
