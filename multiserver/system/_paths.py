"""Where the daemon's socket, lock, log and state live; which socket dirs
fail the checks of ``_trust`` (which make a planted socket or a shared
directory unusable).

- Runtime dir: ``$MULTISERVER_RUNTIME_DIR``, else the XDG runtime dir
  (``$XDG_RUNTIME_DIR``, ``/run/user/UID``, else ``$TMPDIR/runtime-UID``, as
  platformdirs picks it) + ``/multiserver``; on macOS the user's
  Application Support dir. Created 0700; refused if
  it is a symlink, not owned by this uid, or group/other accessible, or if
  a dir above it lets another user replace it (``_trust.check_path_chain``:
  an owner other than this uid or root, or group/other write, as OpenSSH's
  ``StrictModes``); missing dirs above it are made 0700, each checked
  before anything is made in it.
- Socket ``multiserver-daemon-N.socket``, lock ``...socket.lock`` beside it.
  When the socket path would not fit in ``sun_path``, both go to the short
  fallback dir ``$TMPDIR/ms-UID`` (checked the same way).
- State dir: ``$MULTISERVER_STATE_DIR``, else ``$XDG_STATE_HOME/multiserver``
  (``~/.local/state/multiserver``; on macOS platformdirs' user state dir);
  the daemon's log goes there. Checked as the runtime dir is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
from pathlib import Path

from multiserver._errors import UnsafeDirectory
from multiserver.system._trust import (
    check_path_chain,
    check_private_dir,
    ensure_private_dir,
    split_existing,
)

APP = "multiserver"
SOCKET_PREFIX = "multiserver-daemon-"
SOCKET_SUFFIX = ".socket"
SOCKET_RE = re.compile(r"^multiserver-daemon-([1-9][0-9]{0,5})\.socket$")
# sun_path is 108 bytes on Linux, 104 on macOS, including the final NUL.
SUN_PATH_MAX = 104 if sys.platform == "darwin" else 108


def _given_dir(variable: str) -> Path | None:
    """The dir ``variable`` names, absolute: a relative one is taken from
    the directory this process runs in, once, as the daemon it starts
    runs in ``/``."""
    given = os.environ.get(variable)
    return Path(os.path.abspath(given)) if given else None


def runtime_dir() -> Path:
    given = _given_dir("MULTISERVER_RUNTIME_DIR")
    if given is not None:
        return given
    if sys.platform == "darwin":  # pragma: no cover
        import platformdirs  # only when no dir is given: the daemon never needs it

        return Path(platformdirs.user_data_dir(APP, appauthor=False))
    # The XDG base directory spec, as platformdirs reads it, without its
    # 13 ms of imports in every command, nor its two-line warning when
    # $XDG_RUNTIME_DIR is unset (ssh logins without logind, containers):
    # an owned 0700 $XDG_RUNTIME_DIR, else /run/user/UID, else
    # $TMPDIR/runtime-UID (platformdirs' fallback, so sockets stay put).
    for base in (os.environ.get("XDG_RUNTIME_DIR", ""), f"/run/user/{os.getuid()}"):
        if os.path.isabs(base) and _is_private_dir(base):
            return Path(base, APP)
    return Path(_temp_root(), f"runtime-{os.getuid()}", APP)


def state_dir() -> Path:
    given = _given_dir("MULTISERVER_STATE_DIR")
    if given is not None:
        return given
    return user_dir("state")


def user_dir(kind: str) -> Path:
    """This user's ``kind`` dir (state, config) for multiserver: on Linux the
    XDG base directory spec's (``$XDG_STATE_HOME`` if absolute, else
    ``~/.local/state``), on macOS platformdirs' (Application Support)."""
    if sys.platform == "darwin":  # pragma: no cover
        import platformdirs

        return Path(getattr(platformdirs, f"user_{kind}_dir")(APP, appauthor=False))
    variable, default = _XDG_HOMES[kind]
    value = os.environ.get(variable, "")
    return Path(value if os.path.isabs(value) else os.path.expanduser(default), APP)


_XDG_HOMES = {
    "state": ("XDG_STATE_HOME", "~/.local/state"),
    "config": ("XDG_CONFIG_HOME", "~/.config"),
}


def _is_private_dir(path: str) -> bool:
    """Whether ``path`` is a dir (not a link) of this uid that nobody else
    may enter: what the XDG spec asks of a runtime dir."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _temp_root() -> str:
    # $TMPDIR as tempfile.gettempdir() reads it, without its 4-5 ms of
    # imports (shutil, random) in every command that lists the socket dirs.
    return os.path.abspath(os.environ.get("TMPDIR") or "/tmp")


def fallback_dir() -> Path:
    return Path(_temp_root(), f"ms-{os.getuid()}")


def write_whole(path: str | os.PathLike[str], data: bytes, *, sync: bool = False) -> None:
    """Replace the file ``path`` with ``data``, whole or not at all (a
    temporary file beside it, mode 0600, renamed over it; ``sync``: on
    disk first), so a reader never sees half of it. Raises OSError, with
    the temporary file removed."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with open(fd, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def unsafe_socket_dirs(dirs: list[Path] | None = None) -> dict[Path, UnsafeDirectory]:
    """Of ``dirs`` (default ``socket_dirs()``), those no daemon socket in
    should be trusted, each with why: one that is there and fails
    ``check_private_dir``, or, missing, where a dir above it fails
    ``check_path_chain`` (it would be made there)."""
    unsafe = {}
    for d in socket_dirs() if dirs is None else dirs:
        try:
            there, missing = split_existing(d)
            if missing:
                check_path_chain(there)
            else:
                check_private_dir(d)
        except UnsafeDirectory as exc:
            unsafe[d] = exc
    return unsafe


def socket_name(number: int) -> str:
    return f"{SOCKET_PREFIX}{number}{SOCKET_SUFFIX}"


def fits_sun_path(path: Path) -> bool:
    return len(os.fsencode(path)) < SUN_PATH_MAX


class DaemonPaths:
    """The files of daemon number ``number``. Building it does no I/O.
    Immutable, compared and hashed by its fields. (A plain class: every
    command needs it, and none should pay for importing attrs.)"""

    __slots__ = ("lock", "number", "socket", "state_dir")
    number: int
    socket: Path
    lock: Path
    state_dir: Path

    def __init__(self, number: int, socket: Path, lock: Path, state_dir: Path) -> None:
        set_ = object.__setattr__
        set_(self, "number", number)
        set_(self, "socket", socket)
        set_(self, "lock", lock)
        set_(self, "state_dir", state_dir)

    def _fields(self) -> tuple[int, Path, Path, Path]:
        return (self.number, self.socket, self.lock, self.state_dir)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"DaemonPaths is immutable: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not DaemonPaths:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"DaemonPaths(number={self.number!r}, socket={self.socket!r},"
            f" lock={self.lock!r}, state_dir={self.state_dir!r})"
        )

    def replace(self, *, state_dir: Path) -> DaemonPaths:
        """The same daemon's files with another state dir."""
        return DaemonPaths(self.number, self.socket, self.lock, state_dir)

    @property
    def dir(self) -> Path:
        return self.socket.parent

    @property
    def log(self) -> Path:
        return self.state_dir / f"daemon-{self.number}.log"

    @classmethod
    def for_number(cls, number: int = 1) -> DaemonPaths:
        if not 1 <= number <= 999_999:
            raise ValueError(f"daemon number must be 1..999999, got {number}")
        name = socket_name(number)
        sock = runtime_dir() / name
        if not fits_sun_path(sock):
            sock = fallback_dir() / name
        return cls(number, sock, sock.with_name(name + ".lock"), state_dir())

    @classmethod
    def for_socket(cls, sock: Path, state: Path | None = None) -> DaemonPaths:
        """The files of the daemon on ``sock``; its state dir is ``state``,
        else the user's (``state_dir()``). Relative paths are taken from
        this directory: a daemon runs in ``/``."""
        sock = Path(os.path.abspath(sock))
        m = SOCKET_RE.match(sock.name)
        number = int(m.group(1)) if m else 0
        return cls(
            number,
            sock,
            sock.with_name(sock.name + ".lock"),
            state_dir() if state is None else Path(os.path.abspath(state)),
        )

    def prepare(self) -> None:
        """Create and check the socket's dir and the state dir."""
        ensure_private_dir(self.dir)
        ensure_private_dir(self.state_dir)


class LockBusy(Exception):
    pass


def try_lock(path: Path) -> int:
    """Take the daemon lock without waiting; returns the locked fd (close-on-exec).

    Raises LockBusy if a live process holds it. Guards against the lock file
    being unlinked and recreated between open and flock (a daemon removes it
    when it exits), by checking the path still names the locked file.
    """
    return _take_lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB)


def wait_lock(path: Path) -> int:
    """``try_lock``, waiting (blocking, as long as it takes) while another
    process holds the lock: the service's daemon waits so for a daemon
    started on demand to exit. A file unlinked while we waited on it (the
    exiting daemon removes its lock) is let go, and the path locked again."""
    return _take_lock(path, fcntl.LOCK_EX)


def _take_lock(path: Path, how: int) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, how)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise LockBusy(str(path)) from None
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def lock_is_held(path: Path) -> bool:
    """True if some process holds the lock at ``path`` (False if none or no file)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def socket_dirs() -> list[Path]:
    """Every dir where a daemon's socket may live: the runtime dir and the
    short-path fallback."""
    dirs = [runtime_dir(), fallback_dir()]
    return list(dict.fromkeys(dirs))


def find_sockets() -> list[Path]:
    """Every ``multiserver-daemon-N.socket`` in ``socket_dirs()``, by number.
    Only names are matched here; callers check ownership before connecting."""
    found: list[tuple[int, Path]] = []
    for d in socket_dirs():
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            m = SOCKET_RE.match(name)
            if m:
                found.append((int(m.group(1)), d / name))
    return [p for _, p in sorted(found)]
