"""What a session's daemon kept of it on disk (``multiserver.DurableOutput``:
its output file and the state beside it), read for a saved session: the
newest output it showed, where its foreground process was and what it ran,
and how its program ended. The daemon writes them while nobody holds the
session, the attach client while it does; after a reboot they are what is
left of it, found by the session's ref (daemon instance, child id) in the
daemon's state dir.

A restore that relaunched a session from them (the output is in the
relaunch's notice then, saved in the arrangement) forgets them.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from multiserver.internal import escaped, output_path, read_output, read_state, state_dir
from restore.store._model import RestorationRef, SessionLeaf
from restore.store._rules import SCROLLBACK_LIMIT


def _path(ref: RestorationRef) -> Path | None:
    try:  # in its daemon's state dir, which is the user's (``state_dir``)
        return output_path(state_dir(), ref.instance_id, ref.child_id)
    except ValueError:  # an instance id that names no file
        return None


def kept_scrollback(ref: RestorationRef | None) -> bytes | None:
    """The newest output the child of ``ref`` showed, as kept; None if none."""
    path = None if ref is None else _path(ref)
    return None if path is None else read_output(path, SCROLLBACK_LIMIT)


def kept_fields(ref: RestorationRef | None) -> dict[str, object]:
    """What the kept state of the child of ``ref`` says of its leaf's
    fields (``cwd``, ``title``, ``exit_code``), each only if it is what it
    should be. Empty if none is kept."""
    path = None if ref is None else _path(ref)
    if path is None:
        return {}
    state = read_state(path) or {}
    found: dict[str, object] = {}
    cwd, argv, code = state.get("cwd"), state.get("argv"), state.get("exit_code")
    if isinstance(cwd, str) and os.path.isabs(cwd):
        found["cwd"] = cwd
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        found["title"] = " ".join(map(escaped, argv))
    if isinstance(code, int) and not isinstance(code, bool) and -255 <= code <= 255:
        found["exit_code"] = code
    return found


def with_kept_state(leaf: SessionLeaf) -> SessionLeaf:
    """``leaf`` as its child's kept state has it: the cwd and title of its
    foreground process when last written, and its exit code if its program
    ended (``kept_fields``)."""
    found = kept_fields(leaf.ref)
    return attrs.evolve(leaf, **found) if found else leaf  # type: ignore[arg-type]


def forget_kept(ref: RestorationRef | None) -> None:
    """The files the child of ``ref`` left go (its output is saved elsewhere now)."""
    from multiserver.internal import DurableOutput

    path = None if ref is None else _path(ref)
    if path is not None:
        DurableOutput(path, 1).remove()
