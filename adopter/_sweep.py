"""The sweep: one idempotent pass over every daemon socket in the runtime dir
and the short-path fallback dir, all concurrently, each under its own bound.
It never starts a daemon and never connects to a socket that fails the
ownership checks.

    scan (find_sockets) -> per socket: check -> connect/hello -> policy -> act

Acting: stale sockets are unlinked with their lock while holding the lock;
live daemons have their orphans claimed in one request and adopted (see
``_adopt``); exited orphans are reported with their exit code and collected.
Late arrivals of a restore are adopted the same way (``adopt_late``).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import attrs
import trio

from adopter._adopt import OrphanSink
from adopter._policy import RowState, classify, orphans
from multiserver import (
    ChildInfo,
    Client,
    DaemonNotRunning,
    MultiserverError,
    UnsafeDirectory,
    dial,
)
from multiserver._paths import (
    LockBusy,
    check_private_dir,
    check_socket,
    find_sockets,
    lock_is_held,
    socket_dirs,
    try_lock,
)
from restore._partial import DaemonAttachment

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
    """Unlink a stale socket and its lock while holding the lock."""
    lock = _lock_path(sock)
    try:
        fd = try_lock(lock)
    except LockBusy:
        return "busy"
    except OSError as exc:
        return f"cannot lock: {exc.strerror}"
    try:
        for path in (sock, lock):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    finally:
        os.close(fd)
    return "removed"


async def _adopt_children(
    client: Client, sock: str, candidates: list[ChildInfo], sink: OrphanSink, *, keep: bool
) -> list[SweepRow]:
    """Claim ``candidates`` in one request, adopt what we got, report the rest."""
    rows: list[SweepRow] = []
    results = await client.claim([c.id for c in candidates], keep_output=True)
    release: list[int] = []
    for result in results:
        if result.error is not None:
            held = result.error.errno == errno.EBUSY
            rows.append(
                SweepRow(
                    sock,
                    "live",
                    "skipped",
                    detail="already held by another client" if held else result.error.message,
                )
            )
            continue
        assert result.child is not None
        if result.master is not None and not keep:
            os.close(result.master)
        rows.append(await _adopt_one(client, sock, result.child, sink, release))
    if release and not keep:
        with contextlib.suppress(MultiserverError):
            await client.release(release)
    return rows


async def _adopt_one(
    client: Client, sock: str, child: ChildInfo, sink: OrphanSink, release: list[int]
) -> SweepRow:
    if child.state == "exited":
        with contextlib.suppress(MultiserverError):
            await client.collect(child.id)
        return SweepRow(
            sock,
            "live",
            "ended",
            detail=f"orphan {child.name} had exited; collected",
            exit_code=child.exit_code,
        )
    release.append(child.id)
    leaf = await trio.to_thread.run_sync(sink.record, child, sock, client.instance_id)
    if leaf is None:
        return SweepRow(
            sock, "live", "skipped", detail=f"child {child.id} is a saved session already"
        )
    return SweepRow(
        sock, "live", "adopted", name=leaf.name, detail=f"pid {child.pid}: {' '.join(child.argv)}"
    )


async def _sweep_socket(
    sock: Path, sink: OrphanSink, adopt: bool, bound: float, rows: list[SweepRow]
) -> None:
    s = str(sock)
    try:
        check_socket(sock)
    except UnsafeDirectory as exc:
        if not os.path.lexists(sock):
            return  # gone since the scan
        rows.append(SweepRow(s, "refused", "skipped", detail=f"not connected to: {exc}"))
        return
    with trio.move_on_after(bound) as scope:
        try:
            client = await dial(sock)
        except DaemonNotRunning:
            state = classify(
                connected=False, answered=False, lock_held=lock_is_held(_lock_path(sock))
            )
            if state == "stale":
                action = _remove_stale(sock) if adopt else "would-remove"
                rows.append(
                    SweepRow(
                        s,
                        "stale",
                        "removed" if action == "removed" else action,
                        detail="its daemon is gone",
                    )
                )
            else:
                rows.append(
                    SweepRow(
                        s,
                        state,
                        "retry",
                        detail="refuses connections but its lock is held (starting or exiting)",
                    )
                )
            return
        except MultiserverError as exc:
            rows.append(SweepRow(s, "unresponsive", "retry", detail=str(exc)))
            return
        async with client:
            found = orphans(client.welcome.children, s, client.instance_id, sink.arrangement())
            if not found:
                rows.append(
                    SweepRow(
                        s,
                        "live",
                        "none",
                        detail=f"{len(client.welcome.children)} children, no orphans",
                    )
                )
                return
            if not adopt:
                rows += [
                    SweepRow(
                        s,
                        "live",
                        "would-adopt" if c.state == "running" else "would-collect",
                        name=c.name,
                        detail=" ".join(c.argv),
                        exit_code=c.exit_code,
                    )
                    for c in found
                ]
                return
            rows += await _adopt_children(client, s, found, sink, keep=False)
    if scope.cancelled_caught:
        rows.append(
            SweepRow(
                s,
                "unresponsive",
                "retry",
                detail=f"did not answer within {bound:g} s; next sweep tries again",
            )
        )


async def sweep(sink: OrphanSink, *, adopt: bool = True, bound: float = SWEEP_BOUND) -> SweepReport:
    """One pass over every daemon socket. With ``adopt=False`` it only says
    what it would do. Each socket is bounded by ``bound``, so the whole pass
    takes about ``bound`` at most whatever the daemons do.

    Cancellation: what was done is done (adoptions are recorded one
    transaction each); nothing is left open.
    """
    rows: list[SweepRow] = []
    for d in socket_dirs():
        if os.path.lexists(d):
            try:
                check_private_dir(d)
            except UnsafeDirectory as exc:
                rows.append(SweepRow(str(d), "refused", "skipped", detail=f"dir not swept: {exc}"))
    unsafe_dirs = {r.socket for r in rows}
    sockets = [p for p in find_sockets() if str(p.parent) not in unsafe_dirs]
    async with trio.open_nursery() as nursery:
        for sock in sockets:
            nursery.start_soon(_sweep_socket, sock, sink, adopt, bound, rows)
    order = {str(p): i for i, p in enumerate(sockets)}
    rows.sort(key=lambda r: order.get(r.socket, -1))
    return SweepReport(rows)


async def adopt_late(
    att: DaemonAttachment, sink: OrphanSink, *, keep: bool = False
) -> list[SweepRow]:
    """Adopt a partial attach that arrived after restore's deadline: its
    children are claimed already; record each as an orphan session, then
    release them (unless ``keep``: an app that shows them keeps the fds).

    Cancellation: the attachment is closed; its children go back to the daemon.
    """
    rows: list[SweepRow] = []
    client = att.client
    sock = att.target.socket
    try:
        if client is None:
            return [SweepRow(sock, "late", "skipped", detail=att.error or "no connection")]
        release: list[int] = []
        for name, result in att.claimed.items():
            if result.error is not None or result.child is None:
                detail = result.error.message if result.error else "no child"
                rows.append(SweepRow(sock, "late", "skipped", detail=f"{name}: {detail}"))
                continue
            row = await _adopt_one(client, sock, result.child, sink, release)
            rows.append(attrs.evolve(row, state="late"))
        if release and not keep:
            with contextlib.suppress(MultiserverError):
                await client.release(release)
    finally:
        if not keep:
            att.close()
    return rows
