"""Sessions a client still holds after their daemon died.

When the daemon of an attached session dies, ``multiserver attach`` goes
on: it holds the session's PTY master, so the program runs on in that
terminal until the client lets go of it (the kernel then hangs the
terminal up). Meanwhile the session's daemon is gone, and a restore would
start it again: a second copy of a session the user is typing in. So the
client records the hold in the runtime dir, one file per child
(``multiserver-held/INSTANCE-CHILD``, as the daemon knew it: what a saved
session's ``ref`` names), and restore leaves such a session alone
(``restore._build``: outcome ``held``).

A record counts while its client holds an ``flock`` on it (from before the
file has its name to the moment it is removed: a client that dies, even by
SIGKILL, lets go of it) and its child's pid is alive. A reader removes a
record nobody holds, if the path still names the file it looked at.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from pathlib import Path

import attrs
import cattrs

from multiserver import MultiserverError
from multiserver.internal import check_private_dir, ensure_private_dir, runtime_dir, unlink_if_same
from restore.store._schema import _exact

DIR_NAME = "multiserver-held"
_NAME = re.compile(r"^([0-9a-f]+)-([0-9]+)$")
MAX_SIZE = 64 * 1024

Key = tuple[str, int]  # daemon instance id, child id


@attrs.frozen
class Hold:
    """Client ``client_pid`` holds child ``child_id`` (pid ``child_pid``) of
    daemon instance ``instance_id``, once on ``socket``, known as ``name``."""

    name: str
    socket: str
    instance_id: str
    child_id: int
    child_pid: int
    client_pid: int

    @property
    def key(self) -> Key:
        return (self.instance_id, self.child_id)

    def to_bytes(self) -> bytes:
        return json.dumps(_converter.unstructure(self)).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Hold | None:
        """The hold in ``data``, or None if it holds none (another format, a
        value of the wrong type). Unknown fields are ignored."""
        try:
            return _converter.structure(json.loads(data), cls)
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError):
            return None


def _make_converter() -> cattrs.Converter:
    # The records' own: values exactly typed as the store's are, unknown
    # fields tolerated (a newer multiserver may add some).
    conv = cattrs.Converter(forbid_extra_keys=False)
    for kind in (int, str):
        conv.register_structure_hook(kind, _exact(kind))
    return conv


_converter = _make_converter()


def _dir() -> Path:
    return runtime_dir() / DIR_NAME


@attrs.define(eq=False)
class HoldRecord:
    """The record of one hold, and the locked fd that makes it count (it
    owns that fd). ``write`` it; ``remove`` it once the master is closed."""

    hold: Hold
    _path: Path
    _fd: int
    _stat: os.stat_result

    @classmethod
    def write(cls, hold: Hold) -> HoldRecord | None:
        """Write the record, locked before it has its name (a reader never
        takes it for a stale one). None if it cannot be written: restore
        may then start the session again, as before."""
        if not re.fullmatch(r"[0-9a-f]+", hold.instance_id):
            return None
        try:
            d = ensure_private_dir(_dir())
        except MultiserverError:
            return None
        path = d / f"{hold.instance_id}-{hold.child_id}"
        tmp = d / f".{path.name}.{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, hold.to_bytes())
            os.replace(tmp, path)
            return cls(hold, path, fd, os.fstat(fd))
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return None

    def remove(self) -> None:
        """Unlink the record (if it is still this one), then let go of it."""
        try:
            with contextlib.suppress(OSError):
                unlink_if_same(self._path, self._stat)
        finally:
            os.close(self._fd)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a process whose
    daemon died is reaped by whoever inherits it, if that reaps at all)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): it exists
    return state not in (b"Z", b"X")


def live_holds() -> dict[Key, Hold]:
    """Every hold whose client still holds its record and whose child
    lives, by (instance id, child id). Records nobody holds are removed.
    None from a dir another user could have written (``check_private_dir``)."""
    out: dict[Key, Hold] = {}
    try:
        check_private_dir(_dir())
        names = os.listdir(_dir())
    except (OSError, MultiserverError):
        return out
    for name in names:
        if _NAME.match(name) is None:
            continue
        hold = _read_held(_dir() / name)
        if hold is not None and pid_alive(hold.child_pid):
            out[hold.key] = hold
    return out


def _read_held(path: Path) -> Hold | None:
    """The record at ``path`` if its client holds it; a record nobody holds
    is removed (and None)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return Hold.from_bytes(os.read(fd, MAX_SIZE))  # held: it counts
        unlink_if_same(path, os.fstat(fd))  # nobody holds it: its client is gone
        return None
    except OSError:
        return None
    finally:
        os.close(fd)
