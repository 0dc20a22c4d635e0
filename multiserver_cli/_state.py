"""Keeping the saved arrangement current from the command line.

A command opens the store once (``open_store``) and hands it to what it
calls; None stands for a store that cannot be used (its warning was said
once), and every function here then does nothing. The everyday commands
open ``Saved`` instead (``open_saved``): the saved sessions read lightly
(``restore.read_saved``: no attrs, no converter), all of them or one by
name, and the store itself opened only when the command changes it
(``Saved.store``). A command about one session reads and writes that
session's rows only (the store is kept by session), never the whole
arrangement.

A failure to write the arrangement never costs the user a session: the
session runs either way, and the failure is one warning line. A durable close
(``kill``, a program exiting while attached) is staged first, then the child
is ended and collected, then the close completes; a close left pending by a
crash is finished by the next command that opens the store.

Blocking calls only (the command line's fast path imports no trio).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from multiserver import (
    LightChildExited as ChildExited,
    MultiserverError,
    RequestFailed,
    TimedOut,
    dial_blocking,
    is_a,
    replaced,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import TypeVar

    from multiserver import ChildInfo, SyncClient
    from restore import ArrangementStore, RestorationRef, SessionLeaf

    _T = TypeVar("_T")

# How long finishing one pending close may take.
PENDING_TIMEOUT = 3.0
# After the signal `kill` sends, how long before SIGKILL.
KILL_WAIT = 3.0


def warn(line: str) -> None:
    """One line on stderr, printable (it may quote a name or a path)."""
    from multiserver import printable

    print(f"multiserver: {printable(line, lines=True)}", file=sys.stderr)


@contextlib.contextmanager
def open_store() -> Iterator[ArrangementStore | None]:
    """The arrangement store, or None (with a warning) if it cannot be used.
    A corrupt store is moved aside, never deleted."""
    from restore import ArrangementStore, StoreError

    try:
        store, warning = ArrangementStore.open_or_quarantine(on_warning=warn)
    except (StoreError, MultiserverError, OSError) as exc:
        warn(f"saved arrangement unavailable: {exc}")
        yield None
        return
    if warning:
        warn(warning)
    try:
        yield store
    finally:
        store.close()


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
        rows only, where the light read vouches for the file."""
        if self._leaves is None:
            index = self._index()
            if index is not None:
                there = [n for n in index[0] if n.partition(":")[2] == name]
                found = self._light(names=there, prefix=prefix)
                if found is not None:
                    return found
        return [
            leaf
            for leaf in self.leaves()
            if leaf.name.startswith(prefix)
            or (leaf.host is not None and leaf.name.partition(":")[2] == name)
        ]

    def referring(self, keys: Iterable[tuple[str, str, int]]) -> list[SessionLeaf]:
        """The saved sessions whose ref names one of these children (daemon
        socket, normalised; instance; child id), found by the ref index."""
        wanted = list(dict.fromkeys(keys))
        if self._leaves is None:
            found = self._light(refs=wanted) if wanted else []
            if found is not None:
                return found
        keys_ = set(wanted)
        return [
            leaf
            for leaf in self.leaves()
            if leaf.ref is not None
            and (os.path.normpath(leaf.ref.socket), leaf.ref.instance_id, leaf.ref.child_id)
            in keys_
        ]

    def ref_sockets(self) -> list[str]:
        """The daemon sockets the saved sessions of this host refer to
        (normalised), read from the ref columns alone where it can."""
        if self._leaves is None:
            index = self._index()
            if index is not None:
                return index[1]
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
        prefix: str | None = None,
    ) -> list[SessionLeaf] | None:
        """``read_saved``'s answer (all, or those ``names``, ``refs`` and
        ``prefix`` select); None once it could not vouch, or once the store
        is open (it is the one to ask then)."""
        if self._state is None or self._opened is not None:
            return None
        from restore import read_saved

        try:
            found = read_saved(self._state, names=names, refs=refs, prefix=prefix)
        except (MultiserverError, OSError):
            found = None
        if found is None:
            self._state = None  # the store says what is wrong, once
        return found

    def _index(self) -> tuple[list[str], list[str]] | None:
        """``read_index``'s answer; None as ``_light`` says None."""
        if self._state is None or self._opened is not None:
            return None
        from restore import read_index

        try:
            found = read_index(self._state)
        except (MultiserverError, OSError):
            found = None
        if found is None:
            self._state = None
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
    from multiserver import state_dir

    state: Path | None = None
    with contextlib.suppress(MultiserverError, OSError):
        state = state_dir()
    saved = Saved(state)
    try:
        yield saved
    finally:
        saved.close()


def leaf_for(
    child: ChildInfo, socket: Path, instance_id: str, *, light: bool = False
) -> SessionLeaf:
    """The saved session of a new child (``light``: as a light twin)."""
    if light:
        from restore import LightRestorationRef as RestorationRef, LightSessionLeaf as SessionLeaf
    else:
        from restore import RestorationRef, SessionLeaf

    return SessionLeaf(
        name=child.name,
        argv=list(child.argv),
        cwd=child.cwd,
        rows=child.rows,
        cols=child.cols,
        ref=RestorationRef(str(socket), instance_id, child.id, child.pid),
        created_at=child.started_at,
    )


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


def stage_close(
    store: ArrangementStore | None, socket: Path, instance_id: str, child: ChildInfo
) -> SessionLeaf | None:
    """Stage the durable close of the saved session whose child this is
    (found by daemon socket, instance and child id, so an adopted session
    saved under another name is found too). None if no leaf has it.
    StoreError if the store cannot take it: the caller then leaves the child
    as it is, since a close it did not record would be undone by the next
    restore (the session started again)."""
    if store is None:
        return None
    from restore import RestorationRef, ref_key

    key = ref_key(RestorationRef(str(socket), instance_id, child.id, child.pid))
    try:
        for leaf in store.sessions(refs=[key]):
            return store.stage_close(leaf.name)
        return None
    except KeyError:
        return None


def stage_close_named(store: ArrangementStore | None, name: str) -> SessionLeaf | None:
    """Stage the durable close of the saved session ``name`` (one with no
    live child: ``kill NAME`` forgets it). None if there is none; StoreError
    if the store cannot take it."""
    if store is None:
        return None
    try:
        return store.stage_close(name)
    except KeyError:
        return None


def close_pending(store: ArrangementStore | None, name: str) -> bool:
    """Whether a close of ``name`` is still pending (its daemon did not answer)."""
    return store is not None and any(p.name == name for p in store.pending_closes())


def complete_close(store: ArrangementStore | None, name: str, ref: RestorationRef | None) -> None:
    """The close of ``name`` done: forgotten by the store, and what its
    daemon kept of it on disk gone (its child is gone: nobody writes it)."""
    from restore import StoreError, forget_kept

    forget_kept(ref)
    if store is None:
        return
    try:
        store.complete_close(name, ref)
    except StoreError as exc:
        warn(f"could not complete the close of {name}: {exc}")


def close_exited(store: ArrangementStore | None, client: SyncClient, child: ChildInfo) -> None:
    """A session whose program exited: stage its close, collect the child,
    complete the close. A close the store cannot take leaves the exited
    child with its daemon, uncollected: the next restore finds it ended and
    closes it then, instead of starting the session again."""
    from restore import StoreError

    try:
        staged = stage_close(store, client.socket_path, client.instance_id, child)
    except StoreError as exc:
        warn(f"could not save the close of {child.name}: {exc}; its daemon keeps it, ended")
        return
    with contextlib.suppress(MultiserverError):
        client.collect(child.id)
    if staged is not None:
        complete_close(store, staged.name, staged.ref)


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


def finish_pending_closes(store: ArrangementStore | None) -> None:
    """Finish closes a crash left pending: end and collect the child if it
    still exists (matched by daemon instance + child id), then complete.
    Each is bounded by PENDING_TIMEOUT; one whose daemon does not answer is
    left for the next run."""
    if store is None:
        return
    for p in store.pending_closes():
        if p.ref is not None:
            try:
                _end_child(p.ref, time.monotonic() + PENDING_TIMEOUT)
            except MultiserverError as exc:
                warn(f"pending close of {p.name}: {exc}; will retry")
                continue
        complete_close(store, p.name, p.ref)


def _end_child(ref: RestorationRef, deadline: float) -> None:
    try:
        client = dial_blocking(Path(ref.socket), children=False, deadline=deadline)
    except TimedOut:
        raise
    except MultiserverError:
        return  # the daemon is gone, and its children with it
    with client:
        if client.instance_id != ref.instance_id:
            return
        try:
            child = client.peek(ref.child_id, 0).child
        except RequestFailed:
            return  # gone already
        if child.state == "running":
            end_child(client, child.id)
        with contextlib.suppress(RequestFailed):
            client.collect(child.id)


def end_child(
    client: SyncClient, child_id: int, signum: int = signal.SIGHUP, *, escalate: bool = True
) -> int | None:
    """Signal the child and wait for its exit notice; SIGKILL after KILL_WAIT
    if ``escalate``. Returns its exit code, or None if it still runs."""

    def wait_exit(until: float) -> int | None:
        while True:
            notice = client.wait_notice(until)
            if notice is None:
                return None
            if is_a(notice, ChildExited) and notice.id == child_id:
                return notice.exit_code

    with contextlib.suppress(RequestFailed):
        client.signal(child_id, signum)
    code = wait_exit(time.monotonic() + KILL_WAIT)
    if code is None and escalate:
        with contextlib.suppress(RequestFailed):
            client.signal(child_id, signal.SIGKILL)
        code = wait_exit(time.monotonic() + KILL_WAIT)
    if code is not None:
        return code
    try:
        return client.peek(child_id, 0).child.exit_code
    except RequestFailed:
        return None
