"""The project's own errors. OSError is translated into these at one boundary
(the I/O layer and the path checks), raised ``from`` the original."""

from __future__ import annotations

import errno as _errno


class MultiserverError(Exception):
    """Base of every error this library raises. ``str()`` is one line."""


class UnsafeDirectory(MultiserverError):
    """A runtime dir or socket fails the owner / mode / symlink checks, or
    a dir above it does (``_paths.check_path_chain``)."""


class UntrustedPeer(UnsafeDirectory):
    """The process listening on a daemon's socket runs as another uid (or
    which uid could not be told): the client closed the connection without
    sending it a byte."""


class SettingError(MultiserverError, ValueError):
    """A setting's value that its kind refuses (``_settings``): ``str()``
    is one line naming where it came from (a variable, a flag, a file's
    line) and what is allowed."""


class DaemonNotRunning(MultiserverError):
    """Nothing listens on the socket (and the caller asked not to start one)."""


class DaemonAlreadyRunning(MultiserverError):
    """A daemon about to start found another one answering on its socket
    path, and did not start."""


class ConnectionClosed(MultiserverError):
    """The peer closed the connection (or it broke)."""


class PeerProtocolError(MultiserverError):
    """The peer broke the protocol; the connection is gone."""


class VersionRefused(MultiserverError):
    """The daemon speaks no version this client speaks."""


class RequestFailed(MultiserverError):
    """The daemon answered a request with an error; the connection is healthy."""

    def __init__(self, errno: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno
        self.message = message


class DaemonTooOld(RequestFailed):
    """The request holds what the daemon's protocol version cannot carry (an
    argv, cwd or environment that is not UTF-8, before version 5), or asks
    for what it does not have (events, before version 8). Nothing was
    sent; the connection is healthy."""

    @classmethod
    def speaking(cls, version: int) -> DaemonTooOld:
        """The one line both clients say."""
        return cls(
            _errno.EILSEQ,
            f"the daemon speaks protocol {version}, which cannot carry"
            " non-UTF-8 arguments; restart it",
        )

    @classmethod
    def lacking(cls, what: str, version: int, needed: int) -> DaemonTooOld:
        """The one line both clients say of a daemon too old for ``what``
        ("events", "to share a session")."""
        return cls(
            _errno.EPROTO,
            f"the daemon speaks protocol {version}, too old {what} (protocol {needed});"
            " `multiserver upgrade` gives it the installed code, keeping its sessions",
        )


class ChildFailed(RequestFailed):
    """One child of a multi-child request failed."""

    def __init__(self, child_id: int, errno: int, message: str) -> None:
        super().__init__(errno, message)
        self.child_id = child_id
