"""Which live child a saved session's name belongs to: one name, one
session, at every moment. Pure, and light (no attrs): the command line's
``ls`` and name lookups use it as the adopter does.

A daemon knows a session's child by the session's name. Two children of
one name can be alive at once when a daemon that did not answer a restore
in time (wedged, then woken) still has the session's original child while
the restore started the session again elsewhere. The arrangement names one
of them: the other is that session's **late original**, listed, addressed
and adopted as ``NAME-late`` (``late_name``), never as a second ``NAME``,
so a person sees both and picks the one with their work in it.

The exception is the session's own relaunch whose record was lost (a crash
between the launch and its record): it lives where the session's intent or
ref says, and it is the session (``relaunch_of``).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from multiserver import ChildInfo
    from restore.store._model import SessionLeaf

# What a late original's name ends with (then 2, 3... if that is taken).
LATE_SUFFIX = "-late"
# NAME_RE's longest name.
_NAME_MAX = 128


def norm_socket(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.fspath(path))


def relaunch_of(child: ChildInfo, socket: str, instance_id: str, leaf: SessionLeaf | None) -> bool:
    """Whether ``child`` is the saved session ``leaf``'s own relaunch whose
    record was lost (a crash, a store that could not be written): its
    daemon calls it by the session's name, and the session was relaunched
    there (its intent names this run of the daemon) or lived on this daemon
    (its ref: a daemon has one child of a name, so the session's own child
    would be this one). Restore takes such a child back as the session;
    adopted, it would run twice under two names. A child of that name on
    another daemon (a late arrival of a session relaunched elsewhere) is
    its late original."""
    if leaf is None or leaf.name != child.name:
        return False
    sock = norm_socket(socket)
    intent = leaf.pending_launch
    if intent is not None and (norm_socket(intent.socket), intent.instance_id) == (
        sock,
        instance_id,
    ):
        return True
    return leaf.ref is not None and norm_socket(leaf.ref.socket) == sock


def late_family(name: str) -> str:
    """What every name that can bear on the session ``name`` begins with:
    the name itself, its late originals' names, and the names those count
    past; for a late name, its session's. Cut as ``late_name`` cuts (up to
    7 digits of N), so a long name's late names begin with it too."""
    root, sep, number = name.rpartition(LATE_SUFFIX)
    if sep and root and (number == "" or number.isdigit()):
        name = root
    return name[: _NAME_MAX - len(LATE_SUFFIX) - 7]


def late_name(name: str, taken: Iterable[str]) -> str:
    """The name of the late original of the session ``name``: ``NAME-late``,
    else ``NAME-late2``, ``NAME-late3``... the first not ``taken`` (a valid
    session name: ``name`` is cut to fit)."""
    used = set(taken)
    n = 1
    while True:
        suffix = LATE_SUFFIX if n == 1 else f"{LATE_SUFFIX}{n}"
        candidate = name[: _NAME_MAX - len(suffix)] + suffix
        if candidate not in used:
            return candidate
        n += 1
