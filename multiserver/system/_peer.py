"""Who is on the other end of a connected Unix socket: its uid
(``SO_PEERCRED`` on Linux, ``LOCAL_PEERCRED`` on macOS), and the client's
check of the daemon it connected to. Both sides ask: the daemon refuses a
client of another uid (``_connection``), a client refuses a listener of
another uid before it sends a byte (``verify_peer``). A seam of its own,
apart from ``_platform``: every command connects, and the command line's
light path loads none of the rest (terminals, spawning, pollable sets).

A connected stream socket's peer credentials are the listener's as they
were when it called ``listen()``: a process that binds as this user and
then becomes another before it listens is that other user here.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from pathlib import Path

from multiserver._errors import UntrustedPeer

IS_LINUX = sys.platform.startswith("linux")
_SOL_LOCAL = 0
_LOCAL_PEERCRED = 1


def peer_uid(fd: int) -> int:
    """The effective uid of the peer of the connected Unix socket ``fd``."""
    sock = socket.socket(fileno=fd)
    try:
        if IS_LINUX:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", raw)
            return int(uid)
        # struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]; }
        raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, 76)
        _version, uid = struct.unpack_from("Ii", raw)
        return int(uid)
    finally:
        sock.detach()


def verify_peer(fd: int, path: str | Path) -> None:
    """Raise UntrustedPeer unless the process listening at ``path``, on the
    other end of the connected socket ``fd``, runs as this uid. Call it
    right after ``connect`` and before anything is sent: a process of
    another user that took the path (a dir it could write, a race) is
    refused before it reads a request, with its environment, or answers
    one with a terminal of its own."""
    try:
        uid = peer_uid(fd)
    except OSError as exc:
        raise UntrustedPeer(
            f"{path}: cannot tell which user listens there ({exc.strerror}); refusing to talk to it"
        ) from exc
    if uid != os.getuid():
        raise UntrustedPeer(
            f"{path}: the process listening runs as uid {uid}, not {os.getuid()};"
            " refusing to talk to it"
        )
