"""Keeping the saved arrangement current from the command line.

A failure to write the arrangement never costs the user a session: the
session runs either way, and the failure is one warning line. A durable close
(``kill``, a program exiting while attached) is staged first, then the child
is ended and collected, then the close completes; a close left pending by a
crash is finished by the next command that opens the store.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import trio

from multiserver import ChildExited, ChildInfo, Client, MultiserverError, RequestFailed, dial
from restore import ArrangementStore, RestorationRef, SessionLeaf, StoreError

# How long finishing one pending close may take.
PENDING_TIMEOUT = 3.0


def warn(line: str) -> None:
    print(f"multiserver: {line}", file=sys.stderr)


@contextlib.contextmanager
def open_store() -> Iterator[ArrangementStore | None]:
    """The arrangement store, or None (with a warning) if it cannot be used.
    A corrupt store is moved aside, never deleted."""
    try:
        store, warning = ArrangementStore.open_or_quarantine()
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


def leaf_for(child: ChildInfo, socket: Path, instance_id: str) -> SessionLeaf:
    return SessionLeaf(
        name=child.name,
        argv=list(child.argv),
        cwd=child.cwd,
        rows=child.rows,
        cols=child.cols,
        ref=RestorationRef(str(socket), instance_id, child.id, child.pid),
        created_at=child.started_at,
    )


def record_new(child: ChildInfo, socket: Path, instance_id: str, window: str) -> None:
    """Add the new session to the arrangement (replacing a stale leaf of the
    same name, whose child is gone since the daemon accepted the name)."""
    leaf = leaf_for(child, socket, instance_id)
    with open_store() as store:
        if store is None:
            return
        try:
            if store.load().find(leaf.name) is not None:
                store.update_session(leaf)
            else:
                store.add_session(leaf, window=window)
        except (StoreError, ValueError, KeyError) as exc:
            warn(f"could not save session {leaf.name}: {exc}")


def stage_close(socket: Path, instance_id: str, child: ChildInfo) -> SessionLeaf | None:
    """Stage the durable close of the saved session whose child this is
    (found by daemon socket, instance and child id, so an adopted session
    saved under another name is found too). None if no leaf has it."""
    with open_store() as store:
        if store is None:
            return None
        try:
            for leaf in store.load().leaves():
                ref = leaf.ref
                if ref is not None and (ref.socket, ref.instance_id, ref.child_id) == (
                    str(socket),
                    instance_id,
                    child.id,
                ):
                    return store.stage_close(leaf.name)
            return None
        except KeyError:
            return None
        except StoreError as exc:
            warn(f"could not save the close of {child.name}: {exc}")
            return None


def stage_close_named(name: str) -> SessionLeaf | None:
    """Stage the durable close of the saved session ``name`` (one with no
    live child: ``kill NAME`` forgets it). None if there is none."""
    with open_store() as store:
        if store is None:
            return None
        try:
            return store.stage_close(name)
        except KeyError:
            return None
        except StoreError as exc:
            warn(f"could not save the close of {name}: {exc}")
            return None


def close_pending(name: str) -> bool:
    """Whether a close of ``name`` is still pending (its daemon did not answer)."""
    with open_store() as store:
        return store is not None and any(p.name == name for p in store.pending_closes())


async def close_exited(client: Client, child: ChildInfo) -> None:
    """A session whose program exited: stage its close, collect the child,
    complete the close."""
    staged = stage_close(client.socket_path, client.instance_id, child)
    with contextlib.suppress(MultiserverError):
        await client.collect(child.id)
    if staged is not None:
        complete_close(staged.name, staged.ref)


def complete_close(name: str, ref: RestorationRef | None) -> None:
    with open_store() as store:
        if store is None:
            return
        try:
            store.complete_close(name, ref)
        except StoreError as exc:
            warn(f"could not complete the close of {name}: {exc}")


def take_notice(name: str) -> bytes:
    """The notice waiting for the first attach of ``name`` (e.g. saved
    scrollback of a relaunched session); cleared once taken."""
    with open_store() as store:
        if store is None:
            return b""
        try:
            leaf = store.load().find(name)
            if leaf is None or not leaf.notice:
                return b""
            store.update_session(attrs.evolve(leaf, notice=None))
            return leaf.notice
        except (StoreError, KeyError) as exc:
            warn(f"could not read the saved notice of {name}: {exc}")
            return b""


async def finish_pending_closes() -> None:
    """Finish closes a crash left pending: end and collect the child if it
    still exists (matched by daemon instance + child id), then complete."""
    with open_store() as store:
        if store is None:
            return
        pending = store.pending_closes()
    for p in pending:
        if p.ref is not None:
            with trio.move_on_after(PENDING_TIMEOUT) as scope:
                await _end_child(p.ref)
            if scope.cancelled_caught:
                warn(f"pending close of {p.name}: its daemon did not answer; will retry")
                continue
        complete_close(p.name, p.ref)


async def _end_child(ref: RestorationRef) -> None:
    try:
        client = await dial(Path(ref.socket))
    except MultiserverError:
        return  # the daemon is gone, and its children with it
    async with client:
        if client.instance_id != ref.instance_id:
            return
        children = {c.id: c for c in await client.list()}
        child = children.get(ref.child_id)
        if child is None:
            return
        if child.state == "running":
            await end_child(client, child.id)
        with contextlib.suppress(RequestFailed):
            await client.collect(child.id)


# After the signal `kill` sends, how long before SIGKILL.
KILL_WAIT = 3.0


async def end_child(
    client: Client, child_id: int, signum: int = signal.SIGHUP, *, escalate: bool = True
) -> int | None:
    """Signal the child and wait for its exit notice; SIGKILL after KILL_WAIT
    if ``escalate``. Returns its exit code, or None if it still runs."""
    exited: list[int] = []
    done = trio.Event()

    async def wait_exit() -> None:
        async for notice in client.notices:
            if isinstance(notice, ChildExited) and notice.id == child_id:
                exited.append(notice.exit_code)
                done.set()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_exit)
        with contextlib.suppress(RequestFailed):
            await client.signal(child_id, signum)
        with trio.move_on_after(KILL_WAIT):
            await done.wait()
        if not exited and escalate:
            with contextlib.suppress(RequestFailed):
                await client.signal(child_id, signal.SIGKILL)
            with trio.move_on_after(KILL_WAIT):
                await done.wait()
        nursery.cancel_scope.cancel()
    if exited:
        return exited[0]
    children = {c.id: c for c in await client.list()}
    c = children.get(child_id)
    return c.exit_code if c is not None else None
