"""The two system calls of the protocol, without an event loop: one
``recvmsg`` with room for the largest batch of fds (so the kernel never
drops fds silently; received fds are close-on-exec), and one ``sendmsg`` of
a frame's next bytes with its fds on the first. ``_wire.FramedSocket`` (trio)
and ``_sync.SyncClient`` (blocking) both call these, and nothing else calls
``sendmsg`` or ``recvmsg``. Errors become the project's own here.
"""

from __future__ import annotations

import array
import os
import socket
from collections.abc import Sequence

from multiserver._errors import ConnectionClosed
from multiserver.protocol._frames import MAX_FDS_PER_FRAME

RECV_SIZE = 256 * 1024
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS_PER_FRAME * array.array("i").itemsize)
_CLOEXEC_FLAG = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


def _unpack_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            usable = len(data) - (len(data) % arr.itemsize)
            arr.frombytes(data[:usable])
            fds.extend(arr)
    if not _CLOEXEC_FLAG:  # macOS: no MSG_CMSG_CLOEXEC
        for fd in fds:
            os.set_inheritable(fd, False)
    return fds


def receive_chunk(sock: socket.socket, size: int = RECV_SIZE) -> tuple[bytes, list[int], bool]:
    """One ``recvmsg``: (data, fds, whether ancillary data was truncated).
    Raises BlockingIOError (a non-blocking socket with nothing to read),
    TimeoutError (a blocking one past its timeout), ConnectionClosed."""
    try:
        data, ancdata, flags, _ = sock.recvmsg(size, _ANCILLARY, _CLOEXEC_FLAG)
    except (BlockingIOError, TimeoutError):
        raise
    except OSError as exc:
        raise ConnectionClosed(f"connection broken: {exc.strerror or exc}") from exc
    return data, _unpack_fds(ancdata), bool(flags & socket.MSG_CTRUNC)


def rights(fds: Sequence[int]) -> list[tuple[int, int, bytes]]:
    """The ancillary data that passes ``fds`` (none for no fds)."""
    if not fds:
        return []
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]


def send_some(sock: socket.socket, data: memoryview, anc: list[tuple[int, int, bytes]]) -> int:
    """One ``sendmsg`` (``send`` without fds); how many bytes went. Raises
    BlockingIOError / TimeoutError as the socket does, ConnectionClosed."""
    try:
        return sock.sendmsg([data], anc) if anc else sock.send(data)
    except (BlockingIOError, TimeoutError):
        raise
    except OSError as exc:
        raise ConnectionClosed(f"connection broken: {exc.strerror or exc}") from exc
