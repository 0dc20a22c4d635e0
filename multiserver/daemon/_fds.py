"""An fd as an object with one owner: ``OwnedFd``.

The daemon never lets an fd *number* travel: a number kept across an
``await`` may name another file by the time it is used (the child that owned
it was collected, a new connection got the same number). Whatever leaves the
child table is duplicated into an ``OwnedFd`` in the same synchronous step
that decides to send it, and that object goes with the frame until it is
sent, then it is closed: exactly once. (trio's ``_FdHolder`` is the model.)
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable


class OwnedFd:
    """Owns one fd: ``close`` closes it once (later calls do nothing);
    ``detach`` hands the number over to a new owner, who closes it."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        if fd < 0:
            raise ValueError(f"not an fd: {fd}")
        self._fd = fd

    @classmethod
    def dup_of(cls, fd: int) -> OwnedFd:
        """A close-on-exec duplicate of ``fd`` (which stays its owner's).
        Raises OSError (EMFILE at the fd limit, EBADF)."""
        return cls(os.dup(fd))

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        """The fd, still owned here. Raises ValueError once closed or detached."""
        if self._fd < 0:
            raise ValueError("fd already closed or handed over")
        return self._fd

    def detach(self) -> int:
        """Hand the fd over: the caller owns it from now on."""
        fd = self.fileno()
        self._fd = -1
        return fd

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"OwnedFd({self._fd})" if self._fd >= 0 else "OwnedFd(closed)"

    def __del__(self) -> None:
        # A last resort, never relied on: an owner that forgot still frees
        # the fd, and the warning makes the bug visible (tests turn it into
        # a failure).
        if self._fd >= 0:
            warnings.warn(f"unclosed {self!r}", ResourceWarning, stacklevel=1)
            self.close()


def dup_all(fds: Iterable[int]) -> list[OwnedFd]:
    """Duplicate every fd, or none: if one ``dup`` fails, the duplicates
    already made are closed and the OSError is raised."""
    made: list[OwnedFd] = []
    try:
        for fd in fds:
            made.append(OwnedFd.dup_of(fd))
    except BaseException:
        close_all(made)
        raise
    return made


def close_all(owned: Iterable[OwnedFd]) -> None:
    for fd in owned:
        fd.close()


class Feed:
    """The write end of one holder's output feed (``_platform.feed_pipe``;
    the holder reads the other end): what the daemon reads from a shared
    session's master, written on without ever waiting. Owns its fd."""

    __slots__ = ("_fd", "capacity")

    def __init__(self, fd: int, capacity: int) -> None:
        self._fd = OwnedFd(fd)
        self.capacity = capacity

    @classmethod
    def open(cls) -> tuple[Feed, OwnedFd]:
        """A new feed and its read end (to hand over). Raises OSError."""
        from multiserver.system._platform import feed_pipe

        r, w, capacity = feed_pipe()
        return cls(w, capacity), OwnedFd(r)

    def unread(self) -> int:
        """Bytes written that the holder has not read yet (0 once closed)."""
        from multiserver.system._platform import unread_bytes

        if self._fd.closed:
            return 0
        try:
            return unread_bytes(self._fd.fileno())
        except OSError:
            return 0

    def write(self, data: bytes) -> int:
        """Write what fits now; how many bytes were written (all of them,
        when the caller counted the room). A holder gone takes nothing."""
        if self._fd.closed or not data:
            return 0
        try:
            return os.write(self._fd.fileno(), data)
        except (BlockingIOError, BrokenPipeError):
            return 0
        except OSError:
            return 0

    def close(self) -> None:
        """The end of what this holder is fed: it reads the master itself
        from here, or the session ended."""
        self._fd.close()

    @property
    def closed(self) -> bool:
        return self._fd.closed
