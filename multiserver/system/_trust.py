"""Which paths this user can trust: nobody else can change what they
name. The checks OpenSSH's ``StrictModes`` makes of a path, from the root
down (``check_path_chain``); a private dir (``check_private_dir``), made
so with its missing parents (``ensure_private_dir``); a daemon's socket
(``check_socket``). ``lstat`` and ``readlink`` only: every command runs
them, in a few microseconds each.

Each check raises UnsafeDirectory, one line naming the path and why, and
changes nothing: a dir that fails is never ``chmod``-ed, made anything
in, or used.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from multiserver._errors import UnsafeDirectory

# How many symlinks a checked path may go through (the kernel's bound).
_MAX_LINKS = 40


def check_path_chain(path: str | os.PathLike[str]) -> None:
    """Raise UnsafeDirectory unless nobody but this user and root can
    change what ``path`` names, as OpenSSH's ``StrictModes`` checks a path:
    every component from the root down, ``path`` included, is owned by
    this uid or root and not writable by group or others, except a
    root-owned dir with the sticky bit (``/tmp``: there nobody may rename
    or remove an entry not their own). A symlink on the way must be owned
    by this uid or root too (in a sticky dir its owner could point it
    elsewhere); it is followed, and each component of its target checked
    the same way, as the kernel would walk them (OpenSSH resolves the
    path first, which leaves the dirs holding the links unchecked). What
    passes stays true: only this user or root could make it fail later.

    A component that cannot be looked at (missing) is UnsafeDirectory
    raised from the OSError. ``lstat`` and ``readlink`` only."""
    uid = os.getuid()
    raw = os.fspath(path)
    # Not normalized: ".." after a symlink is the link target's parent.
    todo = _names(raw if os.path.isabs(raw) else os.path.join(os.getcwd(), raw))
    here = "/"
    _check_component(here, _lstat(here), uid)
    links = 0
    while todo:
        name = todo.pop()
        if name == "..":
            here = os.path.dirname(here)  # ``here`` has no link in it: its real parent
            continue
        entry = os.path.join(here, name)
        st = _lstat(entry)
        _check_component(entry, st, uid)
        if not stat.S_ISLNK(st.st_mode):
            here = entry
            continue
        links += 1
        if links > _MAX_LINKS:
            raise UnsafeDirectory(f"{raw}: more than {_MAX_LINKS} symbolic links on the way")
        try:
            target = os.readlink(entry)
        except OSError as exc:
            raise UnsafeDirectory(f"{entry}: {exc.strerror}") from exc
        if os.path.isabs(target):
            here = "/"
        todo.extend(_names(target))


def _names(path: str) -> list[str]:
    """The components of ``path``, last first (to be popped)."""
    return [n for n in reversed(path.split("/")) if n not in ("", ".")]


def _lstat(path: str) -> os.stat_result:
    """``os.lstat``; its OSError as UnsafeDirectory (from it), naming ``path``."""
    try:
        return os.lstat(path)
    except OSError as exc:
        raise UnsafeDirectory(f"{path}: {exc.strerror}") from exc


def _check_component(entry: str, st: os.stat_result, uid: int) -> None:
    """One component of ``check_path_chain``."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        risk = "another user could replace what is in it"
    elif stat.S_ISLNK(mode):
        risk = "another user could point it elsewhere"
    else:
        risk = "another user could change it"
    if st.st_uid not in (uid, 0):
        owner = "not 0" if uid == 0 else f"not {uid} or root"
        raise UnsafeDirectory(f"{entry}: owned by uid {st.st_uid}, {owner}: {risk}; refusing it")
    if stat.S_ISLNK(mode) or not mode & 0o022:
        return
    if stat.S_ISDIR(mode) and mode & stat.S_ISVTX and st.st_uid == 0:
        return  # /tmp: others may add entries, never replace ours
    raise UnsafeDirectory(
        f"{entry}: mode {stat.S_IMODE(mode):04o} lets group or others write to it: {risk};"
        " refusing it"
    )


def check_private_dir(path: Path) -> None:
    """Raise UnsafeDirectory unless ``path`` is a real dir, ours, mode
    0700-ish, in dirs that pass ``check_path_chain``."""
    check_path_chain(path.parent)
    st = _lstat(os.fspath(path))
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeDirectory(f"{path}: refusing a runtime dir that is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path}: not a directory")
    if st.st_uid != os.getuid():
        raise UnsafeDirectory(f"{path}: owned by uid {st.st_uid}, not {os.getuid()}")
    if st.st_mode & 0o077:
        raise UnsafeDirectory(
            f"{path}: mode {stat.S_IMODE(st.st_mode):04o} lets other users in (want 0700)"
        )


def split_existing(path: Path) -> tuple[Path, list[Path]]:
    """The deepest of ``path`` and its parents that exists (or is a
    link), and the missing dirs below it, the top one first."""
    missing = []
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    return path, missing[::-1]


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` 0700 if missing, and each missing dir above it 0700
    too (``mkdir -p`` makes them as the umask says: 002 leaves them
    group-writable), each checked before anything is made in it; then
    check ``path`` (``check_private_dir``). Nothing is made in, nor
    changed of, a dir that fails a check: UnsafeDirectory."""
    there, missing = split_existing(path)
    if missing:
        check_path_chain(there)
    for made in missing:
        try:
            os.mkdir(made, 0o700)
        except FileExistsError:
            pass  # made meanwhile, maybe by someone else: checked next
        except OSError as exc:
            raise UnsafeDirectory(f"{made}: cannot create: {exc.strerror}") from exc
        if made != path:
            check_path_chain(made)
    check_private_dir(path)
    return path


def check_socket(path: Path) -> None:
    """Raise UnsafeDirectory unless ``path`` is a socket owned by us."""
    check_private_dir(path.parent)
    st = _lstat(os.fspath(path))
    if not stat.S_ISSOCK(st.st_mode):
        raise UnsafeDirectory(f"{path}: not a socket")
    if st.st_uid != os.getuid():
        raise UnsafeDirectory(f"{path}: socket owned by uid {st.st_uid}, not {os.getuid()}")
