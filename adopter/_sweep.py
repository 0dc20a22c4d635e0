"""The sweep: one idempotent pass over every daemon socket in the runtime dir
and the short-path fallback dir, all concurrently, each under its own bound.
It never starts a daemon and never connects to a socket that fails the
ownership checks.

    scan (find_sockets) -> per socket: check -> connect/hello -> policy -> act

Acting: stale sockets are unlinked with their lock while holding the lock;
live daemons have their orphans claimed in one request and adopted (see
``_adopt``); exited orphans are reported with their exit code and collected.
A restore's late partial attaches are adopted the same way
(``adopt_late_daemon``; ``_late`` takes every late arrival).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Mapping, Set as AbstractSet
from pathlib import Path

import attrs
import trio

from adopter._adopt import OrphanSink
from adopter._policy import RowState, by_name, classify, command_line, orphans, referenced
from multiserver import (
    ChildInfo,
    ClaimResult,
    Client,
    DaemonNotRunning,
    MultiserverError,
    UnsafeDirectory,
    describe_exit,
    dial,
)
from multiserver.internal import (
    LockBusy,
    check_socket,
    find_sockets,
    lock_is_held,
    remove_stale_socket,
    try_lock,
    unlink_if_same,
    unsafe_socket_dirs,
)
from restore import DaemonAttachment, SessionLeaf

# How long one daemon may take to answer before the sweep calls it unresponsive.
SWEEP_BOUND = 2.0


@attrs.frozen
class SweepRow:
    """What the sweep found or did, one line for a person."""

    socket: str
    state: RowState
    action: str  # adopted / ended / removed / skipped / would-adopt / ...
    name: str = ""  # the adopted session, if any
    detail: str = ""
    exit_code: int | None = None


@attrs.frozen
class SweepReport:
    rows: list[SweepRow]

    def by_action(self, action: str) -> list[SweepRow]:
        return [r for r in self.rows if r.action == action]


def _lock_path(sock: Path) -> Path:
    return sock.with_name(sock.name + ".lock")


def _remove_stale(sock: Path) -> str:
    """Unlink a stale socket and its lock while holding the lock: "removed",
    "busy" (a daemon took the lock meanwhile) or "live" (a daemon answers
    there now: its lock file was deleted); left alone unless "removed"."""
    lock = _lock_path(sock)
    try:
        fd = try_lock(lock)
    except LockBusy:
        return "busy"
    except OSError as exc:
        return f"cannot lock: {exc.strerror}"
    try:
        if remove_stale_socket(sock) == "live":
            return "live"
        unlink_if_same(lock, os.fstat(fd))
    except MultiserverError as exc:
        return f"not removed: {exc}"
    finally:
        os.close(fd)
    return "removed"


def _ended(child: ChildInfo) -> str:
    return "ended" if child.exit_code is None else describe_exit(child.exit_code)


def _ended_row(sock: str, state: RowState, child: ChildInfo, collected: bool) -> SweepRow:
    then = "collected" if collected else "not collected (its daemon did not answer)"
    return SweepRow(
        sock,
        state,
        "ended",
        detail=f"orphan {child.name} had ended ({_ended(child)}); {then}",
        exit_code=child.exit_code,
    )


async def _record(
    client: Client, sock: str, state: RowState, child: ChildInfo, sink: OrphanSink
) -> SweepRow:
    """Record a claimed, running child as an orphan session (one transaction).
    A store that fails (busy past its timeout, I/O) costs this child only: it
    stays an orphan for the next sweep."""
    try:
        leaf = await trio.to_thread.run_sync(sink.record, child, sock, client.instance_id)
    except MultiserverError as exc:
        return SweepRow(
            sock,
            state,
            "retry",
            detail=f"child {child.id} not recorded: {exc}; next sweep tries again",
        )
    if leaf is None:
        return SweepRow(
            sock, state, "skipped", detail=f"child {child.id} is a saved session already"
        )
    return SweepRow(
        sock,
        state,
        "adopted",
        name=leaf.name,
        detail=f"pid {child.pid}: {command_line(child.argv)}",
    )


async def _sweep_socket(
    sock: Path,
    sink: OrphanSink,
    refs: AbstractSet[tuple[str, str, int]],
    saved: Mapping[str, SessionLeaf],
    adopt: bool,
    bound: float,
    rows: list[SweepRow],
) -> None:
    """One socket. ``bound`` limits the talk with its daemon (connect, hello,
    claim, collect); once the daemon has handed a child over, recording it is
    not cut short, so what was adopted is always what the report says."""
    s = str(sock)
    deadline = trio.current_time() + bound
    unresponsive = _unresponsive(s, bound)
    client = await _connect(sock, adopt, deadline, unresponsive, rows)
    if client is None:
        return
    # Leaving this block hangs up: the daemon takes back every child we
    # claimed and did not collect (adopted ones included: they are saved now).
    async with client:
        found = orphans(client.welcome.children, s, client.instance_id, refs, saved)
        if not found:
            detail = f"{len(client.welcome.children)} children, no orphans"
            rows.append(SweepRow(s, "live", "none", detail=detail))
        elif not adopt:
            rows += [_would(s, c) for c in found]
        else:
            rows += await _adopt_found(client, s, found, deadline, unresponsive, sink)


def _unresponsive(sock: str, bound: float) -> SweepRow:
    return SweepRow(
        sock,
        "unresponsive",
        "retry",
        detail=f"did not answer within {bound:g} s; next sweep tries again",
    )


async def _connect(
    sock: Path, adopt: bool, deadline: float, unresponsive: SweepRow, rows: list[SweepRow]
) -> Client | None:
    """A connection to the daemon on ``sock`` by ``deadline``, or None with
    a row that says why not (a stale socket removed, with ``adopt``)."""
    s = str(sock)
    try:
        check_socket(sock)
    except UnsafeDirectory as exc:
        if os.path.lexists(sock):  # else gone since the scan
            rows.append(SweepRow(s, "refused", "skipped", detail=f"not connected to: {exc}"))
        return None
    with trio.CancelScope(deadline=deadline):
        try:
            return await dial(sock)
        except DaemonNotRunning:
            lock_held = lock_is_held(_lock_path(sock))
            state = classify(connected=False, answered=False, lock_held=lock_held)
            if state == "stale":
                action = _remove_stale(sock) if adopt else "would-remove"
                detail = "its daemon is gone"
                if action == "live":
                    detail = "a daemon answers there now; the next sweep adopts its orphans"
                rows.append(SweepRow(s, "stale", action, detail=detail))
            else:
                detail = "refuses connections but its lock is held (starting or exiting)"
                rows.append(SweepRow(s, state, "retry", detail=detail))
            return None
        except MultiserverError as exc:
            rows.append(SweepRow(s, "unresponsive", "retry", detail=str(exc)))
            return None
    rows.append(unresponsive)
    return None


def _would(sock: str, c: ChildInfo) -> SweepRow:
    """What adopting orphan ``c`` would do (``adopt=False``)."""
    running = c.state == "running"
    return SweepRow(
        sock,
        "live",
        "would-adopt" if running else "would-collect",
        name=c.name,
        detail=command_line(c.argv) if running else f"{_ended(c)}: {command_line(c.argv)}",
        exit_code=c.exit_code,
    )


async def _adopt_found(
    client: Client,
    s: str,
    found: list[ChildInfo],
    deadline: float,
    unresponsive: SweepRow,
    sink: OrphanSink,
) -> list[SweepRow]:
    """Claim the orphans ``found`` in one request (by ``deadline``); the
    running ones are recorded as sessions, the ended ones collected."""
    results: list[ClaimResult] = []
    with trio.CancelScope(deadline=deadline):
        try:
            results = await client.claim([c.id for c in found], keep_output=True)
        except MultiserverError as exc:  # it broke the protocol or hung up
            return [SweepRow(s, "unresponsive", "retry", detail=str(exc))]
    if not results:
        return [unresponsive]
    rows: list[SweepRow] = []
    running: list[ChildInfo] = []
    for result in results:
        if result.master is not None:
            os.close(result.master)  # the fd is the app's to take, on attach
        if result.error is not None or result.child is None:
            held = result.error is not None and result.error.errno == errno.EBUSY
            why = result.error.message if result.error else "no child"
            detail = "already held by another client" if held else why
            rows.append(SweepRow(s, "live", "skipped", detail=detail))
        elif result.child.state == "exited":
            collected = False
            with trio.CancelScope(deadline=deadline), contextlib.suppress(MultiserverError):
                await client.collect(result.child.id)
                collected = True
            rows.append(_ended_row(s, "live", result.child, collected))
        else:
            running.append(result.child)
    for child in running:
        rows.append(await _record(client, s, "live", child, sink))
    return rows


async def sweep(
    sink: OrphanSink,
    *,
    adopt: bool = True,
    bound: float = SWEEP_BOUND,
    skip: frozenset[str] = frozenset(),
) -> SweepReport:
    """One pass over every daemon socket. With ``adopt=False`` it only says
    what it would do. The talk with each daemon is bounded by ``bound``, so
    the whole pass takes about ``bound`` at most whatever the daemons do
    (plus recording what was claimed: one local transaction per adoption).
    Sockets in ``skip`` (those that just failed to answer a restore) are
    reported for the next sweep without being contacted.

    Cancellation: what was done is done (adoptions are recorded one
    transaction each); nothing is left open.
    """
    rows = [
        SweepRow(str(d), "refused", "skipped", detail=f"dir not swept: {exc}")
        for d, exc in unsafe_socket_dirs().items()
    ]
    unsafe_dirs = {r.socket for r in rows}
    sockets = [p for p in find_sockets() if str(p.parent) not in unsafe_dirs]
    # One read of the arrangement for the whole pass: which children look
    # orphaned. Recording an adoption re-checks in its own transaction, so a
    # snapshot that is stale by then cannot make a child adopted twice.
    arrangement = sink.arrangement()
    refs, saved = referenced(arrangement), by_name(arrangement)
    async with trio.open_nursery() as nursery:
        for sock in sockets:
            if str(sock) in skip:
                detail = "did not answer the restore in time; the next sweep tries again"
                rows.append(SweepRow(str(sock), "unresponsive", "retry", detail=detail))
                continue
            nursery.start_soon(_sweep_socket, sock, sink, refs, saved, adopt, bound, rows)
    order = {str(p): i for i, p in enumerate(sockets)}
    rows.sort(key=lambda r: order.get(r.socket, -1))
    return SweepReport(rows)


async def adopt_late_daemon(
    att: DaemonAttachment, sink: OrphanSink, *, keep: bool = False
) -> list[SweepRow]:
    """Adopt a partial attach that arrived after restore's deadline: its
    children are claimed already; record each as an orphan session and
    collect the exited ones, then close the attachment, which gives the
    children back to their daemon (unless ``keep``: an app that shows them
    keeps the connection and the fds).

    Cancellation: the attachment is closed; its children go back to the
    daemon. Adoptions recorded so far stay recorded.
    """
    rows: list[SweepRow] = []
    client = att.client
    sock = att.target.socket
    try:
        if client is None:
            return [SweepRow(sock, "late", "skipped", detail=att.error or "no connection")]
        for name, result in att.claimed.items():
            if result.error is not None or result.child is None:
                detail = result.error.message if result.error else "no child"
                rows.append(SweepRow(sock, "late", "skipped", detail=f"{name}: {detail}"))
            elif result.child.state == "exited":
                collected = False
                with contextlib.suppress(MultiserverError):
                    await client.collect(result.child.id)
                    collected = True
                rows.append(_ended_row(sock, "late", result.child, collected))
            else:
                rows.append(await _record(client, sock, "late", result.child, sink))
    finally:
        if not keep:
            att.close()
    return rows
