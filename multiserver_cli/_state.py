"""Keeping the saved arrangement current from the command line.

A command opens the store once (``open_store``) and hands it to what it
calls; None stands for a store that cannot be used (its warning was said
once), and every function here then does nothing. The everyday commands
look sessions up through ``_saved.Saved`` instead, which opens the store
only when the command changes it. A command about one session reads and
writes that session's rows only (the store is kept by session), never the
whole arrangement.

A failure to write the arrangement never costs the user a session: the
session runs either way, and the failure is one warning line. A durable close
(``kill``, a program exiting while attached) is staged first, then the child
is ended and collected, then the close completes; a close left pending by a
crash is finished by the next command that opens the store.

Blocking calls only (the command line's fast path imports no trio).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from multiserver import (
    ChildExited,
    MultiserverError,
    RequestFailed,
    TimedOut,
)
from multiserver_cli._dial import dial

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from multiserver import ChildInfo, SyncClient
    from restore import ArrangementStore, RestorationRef, SessionLeaf

# How long finishing one pending close may take.
PENDING_TIMEOUT = 3.0
# After the signal `kill` sends, how long before SIGKILL.
KILL_WAIT = 3.0


def warn(line: str) -> None:
    """One line on stderr, printable (it may quote a name or a path)."""
    from multiserver.internal import printable

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


def complete_close(
    store: ArrangementStore | None,
    name: str,
    ref: RestorationRef | None,
    *,
    say: Callable[[str], None] = warn,
) -> None:
    """The close of ``name`` done: forgotten by the store, and what its
    daemon kept of it on disk gone (its child is gone: nobody writes it).
    A close the store cannot complete is said (``say``)."""
    from restore import StoreError, forget_kept

    forget_kept(ref)
    if store is None:
        return
    try:
        store.complete_close(name, ref)
    except StoreError as exc:
        say(f"could not complete the close of {name}: {exc}")


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


def finish_pending_closes(
    store: ArrangementStore | None, *, say: Callable[[str], None] = warn
) -> None:
    """Finish closes a crash left pending: end and collect the child if it
    still exists (matched by daemon instance + child id), then complete.
    Each is bounded by PENDING_TIMEOUT; one whose daemon does not answer is
    left for the next run. What could not be done is said (``say``: a
    line each; restore says them among its login's events)."""
    if store is None:
        return
    for p in store.pending_closes():
        if p.ref is not None:
            try:
                _end_child(p.ref, time.monotonic() + PENDING_TIMEOUT)
            except MultiserverError as exc:
                say(f"pending close of {p.name}: {exc}; will retry")
                continue
        complete_close(store, p.name, p.ref, say=say)


def _end_child(ref: RestorationRef, deadline: float) -> None:
    try:
        client = dial(Path(ref.socket), children=False, deadline=deadline)
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
    client: SyncClient, child_id: int, signum: int | None = None, *, escalate: bool = True
) -> int | None:
    """Signal the child (``signum``, SIGHUP if None) and wait for its exit
    notice; SIGKILL after KILL_WAIT if ``escalate``. Returns its exit code,
    or None if it still runs."""
    import signal  # here, not at the top: ls and peek need not load it

    def wait_exit(until: float) -> int | None:
        while True:
            notice = client.wait_notice(until)
            if notice is None:
                return None
            if isinstance(notice, ChildExited) and notice.id == child_id:
                return notice.exit_code

    with contextlib.suppress(RequestFailed):
        client.signal(child_id, signal.SIGHUP if signum is None else signum)
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
