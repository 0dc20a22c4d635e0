"""How a daemon was started, and so whether it exits when idle: written in
its lock file, which it holds for life, so that ``multiserver daemon`` can
say it without a change to the protocol.

A daemon is started one of three ways:

- ``on-demand``: by a client that found none (``python -m multiserver``,
  detached); it exits when idle (``DaemonConfig.idle_exit``, 5 s).
- ``service``: by the service manager (``multiserver daemon --service``:
  a systemd user unit, a launchd agent); it never exits when idle.
- ``foreground``: by hand, ``multiserver daemon --foreground``.

The lock file is the daemon's while it runs (it holds the lock, and its
file watch makes the file again if it is deleted, ``_files.py``), and is
removed at exit; it is the classic pidfile next to the socket. One line of
JSON: the daemon's pid and instance id, how it was started and its idle
exit, since when it serves (``started_at``; ``upgraded_at`` once a
daemon can take new code in place), and how many fds it may have open
(``open_files``: its soft limit, raised at start). A reader trusts it only when the instance id matches the ``Welcome``
of the daemon it talks to: a daemon killed by SIGKILL leaves its lock file
behind, with its own line in it, until the next daemon writes its own.
"""

from __future__ import annotations

import json
import os

from multiserver.protocol._body import strict
from multiserver.protocol._record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Literal

    Started = Literal["on-demand", "service", "foreground"]


def __getattr__(name: str) -> object:
    # ``Started`` at run time: ``typing`` only when asked (`multiserver
    # daemon` reads the lock file; it needs no types).
    if name == "Started":
        from typing import Literal

        return Literal[_STARTED]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_STARTED = ("on-demand", "service", "foreground")
# Longer than any line written here; a file past it is no origin.
MAX_SIZE = 4096
# Each field and the check of its value (the wire's: exact JSON types).
_FIELDS = {
    "pid": strict(int, "integer"),
    "instance_id": strict(str, "string"),
    "started": strict(str, "string"),
    "idle_exit": strict(float, "number"),
}
# Fields a lock file of an older multiserver does not have: None then.
_OPTIONAL = {
    "started_at": strict(float, "number"),  # time.time() when it began serving
    "upgraded_at": strict(float, "number"),  # when it last took new code (issue 25)
    "open_files": strict(int, "integer"),  # its soft RLIMIT_NOFILE, raised (issue 35)
}


# A light record, not attrs: `multiserver daemon` reads this, and imports
# no attrs. Its one line of JSON is read field by field below.
@record
class DaemonOrigin:
    pid: int
    instance_id: str
    started: Started
    idle_exit: float | None  # seconds; None: never exits when idle
    started_at: float | None = None
    upgraded_at: float | None = None
    open_files: int | None = None  # how many fds it may have open

    def to_bytes(self) -> bytes:
        fields = {name: getattr(self, name) for name in (*_FIELDS, *_OPTIONAL)}
        return (json.dumps(fields) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> DaemonOrigin | None:
        """The origin in ``data``, or None if it holds none (empty, another
        format, a half-written line, a value of the wrong type). Unknown
        fields are ignored (a newer multiserver may add some)."""
        try:
            raw = json.loads(data)
            if type(raw) is not dict:
                return None
            values = {
                name: None if name == "idle_exit" and raw[name] is None else check(raw[name], None)
                for name, check in _FIELDS.items()
            }
            values.update(
                (name, check(raw[name], None))
                for name, check in _OPTIONAL.items()
                if raw.get(name) is not None
            )
        except (ValueError, TypeError, KeyError, RecursionError):
            return None
        if values["started"] not in _STARTED:
            return None
        return cls(**values)  # type: ignore[arg-type]  # each checked above

    def lifetime(self) -> str:
        """How it started and when it ends, for a person: "started by the
        service (stays up)", "started on demand (exits when idle for 5 s)"."""
        how = {
            "service": "started by the service",
            "on-demand": "started on demand",
            "foreground": "started in the foreground",
        }[self.started]
        if self.idle_exit is None:
            return f"{how} (stays up)"
        return f"{how} (exits when idle for {self.idle_exit:g} s)"


def write_origin(lock_fd: int, origin: DaemonOrigin) -> None:
    """Replace the lock file's contents with ``origin``. Raises OSError."""
    data = origin.to_bytes()
    os.ftruncate(lock_fd, 0)
    os.pwrite(lock_fd, data, 0)


def read_origin(lock: Path) -> DaemonOrigin | None:
    """What the lock file at ``lock`` says, if anything (never raises). Match
    its ``instance_id`` against the daemon's before trusting it."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_SIZE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if len(data) > MAX_SIZE else DaemonOrigin.from_bytes(data)
