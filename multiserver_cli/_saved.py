"""The saved sessions as a command looks them up (``Saved``): read lightly
(``restore.read_saved``: no attrs, no converter) while the light read
vouches for the file, all of them once or one session by its own rows; the
store itself opened only when the command changes it. And the two changes a
command makes through it: a new session recorded, a notice taken.

Blocking calls only (the command line's fast path imports no trio).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from multiserver import MultiserverError
from multiserver.internal import replaced
from multiserver_cli._state import leaf_for, open_store, warn

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import TypeVar

    from multiserver import ChildInfo
    from restore import ArrangementStore, SessionLeaf

    _T = TypeVar("_T")


class Saved:
    """The saved sessions as a command looks them up, and the store, opened
    on first use, for what it changes. Read lightly (``restore.read_saved``)
    while the light read vouches for the file: all of them once
    (``leaves``), or one by name (``find``) reading that session's rows
    only. Where it cannot (None: a close pending, an older file, damage),
    the store is opened and read instead, which also finishes, migrates or
    quarantines what it must."""

    def __init__(self, state: Path | None) -> None:
        self._state = state  # the state dir to read lightly; None: the store's to read
        self._leaves: list[SessionLeaf] | None = None  # all of them, once read
        self._sockets: list[str] | None = None  # the refs' sockets, as ``about`` read them
        self._opened: contextlib.ExitStack | None = None
        self._store: ArrangementStore | None = None

    def store(self) -> ArrangementStore | None:
        """The store (opened now if it is not yet); None if it cannot be
        used (its warning said once)."""
        if self._opened is None:
            self._opened = contextlib.ExitStack()
            self._store = self._opened.enter_context(open_store())
        return self._store

    def leaves(self) -> list[SessionLeaf]:
        """Every saved session, read once."""
        if self._leaves is None:
            leaves = self._light()
            if leaves is None:
                leaves = self._from_store(lambda store: store.load().leaves()) or []
            self._leaves = leaves
        return self._leaves

    def find(self, name: str) -> SessionLeaf | None:
        """The saved session ``name``, with its bytes fields; None if none."""
        if self._leaves is not None:
            return next((leaf for leaf in self._leaves if leaf.name == name), None)
        found = self._light(names=[name])
        if found is not None:
            return found[0] if found else None
        return self._from_store(lambda store: store.find(name))

    def about(self, prefix: str, name: str) -> list[SessionLeaf]:
        """The saved sessions whose names begin with ``prefix``, and the
        other hosts' sessions called ``name`` there (``HOST:NAME``): their
        rows only, where the light read vouches for the file (which also
        gives ``ref_sockets``, on the same connection). Else every saved
        session: ``_narrow.narrowed`` cuts them to these."""
        if self._leaves is None:
            from restore import read_about

            found = self._lightly(lambda state: read_about(state, prefix, name))
            if found is not None:
                leaves, self._sockets = found
                return leaves
        return self.leaves()

    def referring(self, keys: Iterable[tuple[str, str, int]]) -> list[SessionLeaf]:
        """The saved sessions whose ref names one of these children (daemon
        socket, normalised; instance; child id), found by the ref index.
        Else every saved session, as ``about``."""
        wanted = list(dict.fromkeys(keys))
        if self._leaves is None:
            found = self._light(refs=wanted) if wanted else []
            if found is not None:
                return found
        return self.leaves()

    def ref_sockets(self) -> list[str]:
        """The daemon sockets the saved sessions of this host refer to
        (normalised): as ``about`` read them from the ref columns, else
        from every saved session."""
        if self._sockets is not None:
            return self._sockets
        return list(
            dict.fromkeys(
                os.path.normpath(leaf.ref.socket)
                for leaf in self.leaves()
                if leaf.host is None and leaf.ref is not None
            )
        )

    def add(self, leaf: SessionLeaf, window: str) -> bool:
        """Add ``leaf`` (a light twin) lightly (``restore.add_saved``), unless
        the store is open or the light read could not vouch for the file;
        whether it was."""
        if self._state is None or self._opened is not None:
            return False
        from restore import add_saved

        try:
            added = add_saved(self._state, leaf, window)
        except OSError:
            return False
        if added and self._leaves is not None:
            self._leaves.append(leaf)
        return added

    def close(self) -> None:
        if self._opened is not None:
            self._opened.close()

    def _light(
        self,
        names: list[str] | None = None,
        *,
        refs: list[tuple[str, str, int]] | None = None,
    ) -> list[SessionLeaf] | None:
        """``read_saved``'s answer (all, or those ``names`` and ``refs``
        select), as ``_lightly`` gives it."""
        from restore import read_saved

        return self._lightly(lambda state: read_saved(state, names=names, refs=refs))

    def _lightly(self, read: Callable[[Path], _T | None]) -> _T | None:
        """``read`` of the state dir (a light read of the store); None once
        one could not vouch, or once the store is open (it is the one to
        ask then)."""
        if self._state is None or self._opened is not None:
            return None
        try:
            found = read(self._state)
        except (MultiserverError, OSError):
            found = None
        if found is None:
            self._state = None  # the store says what is wrong, once
        return found

    def _from_store(self, read: Callable[[ArrangementStore], _T]) -> _T | None:
        """``read`` of the store; None if it cannot be used or read (said)."""
        store = self.store()
        if store is None:
            return None
        from restore import StoreError

        try:
            return read(store)
        except StoreError as exc:  # a newer file it cannot read, a busy one
            warn(f"saved arrangement unavailable: {exc}")
            return None


@contextlib.contextmanager
def open_saved() -> Iterator[Saved]:
    """The saved sessions (``Saved``) for one command; nothing is read yet."""
    from multiserver.internal import state_dir

    state: Path | None = None
    with contextlib.suppress(MultiserverError, OSError):
        state = state_dir()
    saved = Saved(state)
    try:
        yield saved
    finally:
        saved.close()


def record_new(
    saved: Saved,
    child: ChildInfo,
    socket: Path,
    instance_id: str,
    window: str,
    argv: list[str] | None = None,
) -> None:
    """Add the new session to the arrangement (replacing a stale leaf of the
    same name, whose child is gone since the daemon accepted the name):
    lightly where it can (``Saved.add``), else through the store.
    ``argv``: the whole command, where the daemon's answer shortened it."""
    light = leaf_for(child, socket, instance_id, light=True)
    if argv is not None:
        light = replaced(light, argv=list(argv))
    if saved.add(light, window):
        return
    store = saved.store()
    if store is None:
        return
    from restore import StoreError

    leaf = leaf_for(child, socket, instance_id)
    if argv is not None:
        leaf = replaced(leaf, argv=list(argv))
    try:
        if store.sessions(names=[leaf.name]):
            store.update_session(leaf)
        else:
            store.add_session(leaf, window=window)
    except (StoreError, ValueError, KeyError) as exc:
        warn(f"could not save session {leaf.name}: {exc}")


def take_notice(saved: Saved, name: str) -> bytes:
    """The notice waiting for the first attach of ``name`` (e.g. saved
    scrollback of a relaunched session); cleared once taken. The store is
    opened only when there is one."""
    seen = saved.find(name)
    if seen is None or not seen.notice:
        return b""
    store = saved.store()
    if store is None:
        return b""
    from restore import StoreError

    try:
        leaf = store.find(name)
        if leaf is None or not leaf.notice:
            return b""
        store.update_session(replaced(leaf, notice=None))
        return leaf.notice
    except (StoreError, KeyError) as exc:
        warn(f"could not read the saved notice of {name}: {exc}")
        return b""
