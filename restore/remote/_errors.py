"""What goes wrong with a host, as types that keep their kind up to the
place that decides on it (restore defers a host that needs a credential,
reports a silent one timed out, and fails on the rest); nobody reads an
error's words to learn what happened."""

from __future__ import annotations

from multiserver import MultiserverError

# credential: ssh needs a passphrase or password nobody can type now;
# unreachable: ssh could not run the command there (refused, no route,
# a host key problem, no ssh here); silent: no answer within the bound;
# missing: no multiserver there; error: the remote multiserver ran and
# said why it failed; garbage: it answered something we cannot read.
_KINDS = ("credential", "unreachable", "silent", "missing", "error", "garbage")
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    FailureKind = Literal["credential", "unreachable", "silent", "missing", "error", "garbage"]


def __getattr__(name: str) -> object:
    # ``FailureKind`` at run time, for the face: ``typing`` only when asked
    # (`ls` reads the hosts file, and these errors with it, every run).
    if name == "FailureKind":
        from typing import Literal

        return Literal[_KINDS]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class HostFailure(MultiserverError):
    """A command on ``host`` did not do its work: its ``kind``, and one
    line for a person (``str``)."""

    def __init__(self, host: str, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.host = host
        self.kind: FailureKind = kind


class HostSettingError(MultiserverError):
    """A host's name, destination, command, grace or timeout that is not
    one (a usage error: the command line exits 2)."""


class HostsFileError(MultiserverError):
    """The hosts file cannot be read or written (one line; the file is
    never overwritten by a command that only reads it)."""
