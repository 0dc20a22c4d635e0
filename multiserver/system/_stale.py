"""Which of a daemon's files may go, and removing them: the one rule the
daemon, the client that starts it and the adopter's sweep all follow.

- A socket file is removed only when nothing answers on it: a non-blocking
  ``connect()`` is refused (ECONNREFUSED). A connection that succeeds, or a
  full backlog (EAGAIN), means a live listener: the file is left alone.
  Callers hold the daemon's lock while they ask, so no daemon can start or
  exit in between. (macOS refuses a connect to a full backlog, so there a
  swamped daemon that lost its lock file would look stale.)
- A file a process recorded as its own (the socket it bound, the lock it
  holds) is unlinked only while the path still names that very file: a
  daemon never removes what a later daemon put there.

Plain synchronous calls: a connect to a Unix socket never waits.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

from multiserver._errors import MultiserverError, UnsafeDirectory

# What ``remove_stale_socket`` found, and did:
# - "removed": nothing answered; the socket file was unlinked.
# - "live": something accepts connections there; left alone.
# - "gone": no file there (or it went meanwhile).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    SocketFound = Literal["removed", "live", "gone"]


def __getattr__(name: str) -> object:
    # ``SocketFound`` at run time, for the face: ``typing`` only when asked
    # (every command checks for a stale socket; none needs the type).
    if name == "SocketFound":
        from typing import Literal

        return Literal["removed", "live", "gone"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_LIVE = (0, errno.EAGAIN, errno.EINPROGRESS)


def remove_stale_socket(path: Path) -> SocketFound:
    """Unlink the socket at ``path`` if nothing answers on it; call it while
    holding the daemon's lock. A live daemon's socket is never unlinked.

    Raises UnsafeDirectory, leaving it alone and never connecting to it, if
    the path names a symlink, something not a socket or another user's
    socket; MultiserverError for any other connect or unlink error.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone"
    except OSError as exc:
        raise MultiserverError(f"{path}: {exc.strerror}") from exc
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        raise UnsafeDirectory(f"{path}: not a socket of ours; leaving it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.setblocking(False)
        err = probe.connect_ex(os.fspath(path))
    finally:
        probe.close()
    if err in _LIVE:
        return "live"
    if err == errno.ENOENT:
        return "gone"
    if err != errno.ECONNREFUSED:
        raise MultiserverError(f"{path}: cannot tell if a daemon answers: {os.strerror(err)}")
    try:
        os.unlink(path)
    except FileNotFoundError:
        return "gone"
    except OSError as exc:
        raise MultiserverError(f"{path}: cannot remove: {exc.strerror}") from exc
    return "removed"


def unlink_if_same(path: Path, own: os.stat_result) -> bool:
    """Unlink ``path`` if it still names the file ``own`` describes (by
    st_dev and st_ino); returns whether it did."""
    try:
        here = os.lstat(path)
    except FileNotFoundError:
        return False
    if not os.path.samestat(here, own):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
