"""Login: the one call a terminal app makes at its launch (and
``multiserver restore`` at login) to bring back the saved sessions.

    async with open_login(timeout=5) as events:
        async for event in events:
            ...  # WaitingForLock, Restoring, Arrived, SessionRestored, ..., Done

Its steps: take the restore lock (waiting within the timeout for another
restore, whose report it then gives as its own); open the store; restore
the saved arrangement under the deadline (``restore_arrangement``); hand
late arrivals to the adopter once every session is built (until then a
leaf may still refer to the late child, and adopting it would be refused);
then, the partial attach phase over, sweep what nobody claimed while every
claim is given back, shielded; leave the report for a restore that waits.
Each step is an event (``_login_events``).

It lives in ``adopter`` because it uses both the restore and the adopter:
``adopter`` imports ``restore``, which never imports ``adopter``, and
neither imports the command line, which only shows the events.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import trio

from adopter._adopt import StoreSink
from adopter._late import adopt_late
from adopter._login_events import (
    Arrived,
    ClaimsReleased,
    Done,
    LateAdopted,
    LockTaken,
    LockTimedOut,
    LoginEvent,
    LoginReport,
    ReportNotKept,
    Restoring,
    SessionRestored,
    SessionRow,
    StoreUnavailable,
    StoreWarning,
    Swept,
    WaitingForLock,
    Warned,
)
from adopter._sweep import SWEEP_BOUND, SweepRow, sweep
from multiserver import MultiserverError
from multiserver.internal import LockBusy, ensure_private_dir, state_dir
from restore import (
    Arrangement,
    ArrangementStore,
    LateArrival,
    Options,
    RestoreResult,
    StoreError,
    keep_restore_report,
    read_restore_report,
    release_claims,
    restore_arrangement,
    restore_lock_holder,
    restore_report_identity,
    take_restore_lock,
)

# How often a login that waits for another restore tries the lock.
LOCK_POLL = 0.05
# A login that waited for another restore, which then left no report (it
# crashed), restores with what is left of its timeout, and at least this
# share of it.
AFTER_WAIT_SHARE = 0.1

Emit = Callable[[LoginEvent], None]
BeforeRestore = Callable[[ArrangementStore], Sequence[str]]


@contextlib.asynccontextmanager
async def open_login(
    *,
    timeout: float,
    options: Options | None = None,
    env: Mapping[str, str] | None = None,
    before_restore: BeforeRestore | None = None,
) -> AsyncIterator[trio.MemoryReceiveChannel[LoginEvent]]:
    """Bring back the saved sessions, as a terminal app does at its launch.
    The block reads what happens, an event per step (``_login_events``),
    until the last one (``LockTimedOut``, ``StoreUnavailable`` or ``Done``),
    after which the events end.

    ``timeout``, in seconds, is the whole login's deadline, the wait for
    another restore included: the caller owns it (``multiserver restore``
    gives its ``--timeout``); the sweep after the restore has
    ``SWEEP_BOUND`` of its own. ``options`` and ``env`` are
    ``restore_arrangement``'s. ``before_restore(store)`` runs once the
    store is open, under the lock, before the restore; it may block, and
    the lines it returns are said in their place (``Warned``):
    ``multiserver restore`` finishes there the closes a crash left pending.

    When it is done the sessions are their daemons' again: it claims with
    ``keep_output`` and gives every claim back, and relaunched sessions run
    detached. An app attaches to the sessions it shows afterwards.

    The restore lock is held until the block is left: what the block does
    after the last event (open the app's windows) is still this restore's,
    and a restore that waits meanwhile reports this one's outcomes.

    Cancellation: leaving the block before the last event (by an error,
    cancelled, or on purpose) cancels the login where it is, and the lock
    is let go. Every claim is given back (shielded) and every connection
    closed; the sessions relaunched so far keep running and stay saved,
    and the adoptions recorded so far stay; no report is left, so a restore
    that waited restores itself. A relaunch cut short may have started its
    child, which the next restore takes back (see ``restore_arrangement``).
    """
    send, receive = trio.open_memory_channel[LoginEvent](math.inf)
    try:
        async with trio.open_nursery() as nursery, receive:
            nursery.start_soon(_login, send, timeout, options or Options(), env, before_restore)
            yield receive
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The nursery is this function's own: its one error (the block's,
        # or the login's) goes out as it came, not in a group.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def _login(
    send: trio.MemorySendChannel[LoginEvent],
    timeout: float,
    options: Options,
    env: Mapping[str, str] | None,
    before_restore: BeforeRestore | None,
) -> None:
    """The login ``open_login`` describes, told to ``send`` (closed after
    the last event); the lock, once taken, is held until this is cancelled."""
    emit = _emitter(send)
    state = ensure_private_dir(state_dir())
    report_before = restore_report_identity(state)
    started = trio.current_time()
    with send:
        lock_fd, waited = await _wait_restore_lock(state, timeout, emit)
        if lock_fd is None:
            return
        try:
            theirs = _their_report(state, report_before) if waited else None
            if theirs is not None:
                emit(Done(theirs, ran_here=False))
            else:
                if waited:  # what is left of the timeout, and at least a share of it
                    left = timeout - (trio.current_time() - started)
                    timeout = max(left, AFTER_WAIT_SHARE * timeout)
                emit(await _restore_here(state, emit, timeout, options, env, before_restore))
            send.close()
            await trio.sleep_forever()  # the lock is held until the block is left
        finally:
            os.close(lock_fd)


def _emitter(send: trio.MemorySendChannel[LoginEvent]) -> Emit:
    """Send without waiting (the buffer is unbounded: the login never waits
    for its reader), from trio's thread or a worker thread (the store tells
    of damage it finds from the thread it writes in). A reader that went
    away is no error: the login goes on."""

    def emit(event: LoginEvent) -> None:
        if not trio.lowlevel.in_trio_run():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(emit, event)
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            send.send_nowait(event)

    return emit


async def _wait_restore_lock(state: Path, timeout: float, emit: Emit) -> tuple[int | None, bool]:
    """The restore lock's fd, taken within ``timeout`` (None: another
    restore still held it), and whether another held it first."""
    waited = False
    with trio.move_on_after(timeout):
        while True:
            try:
                fd = take_restore_lock(state)
            except LockBusy:
                if not waited:
                    emit(WaitingForLock(restore_lock_holder(state)))
                waited = True
                await trio.sleep(LOCK_POLL)
            else:
                emit(LockTaken(waited))
                return fd, waited
    emit(LockTimedOut(restore_lock_holder(state), timeout))
    return None, waited


def _their_report(state: Path, before: tuple[int, int, int] | None) -> LoginReport | None:
    """The report of the restore that ran while this one waited, if it left
    one (a new report since the wait began)."""
    if restore_report_identity(state) == before:
        return None
    data = read_restore_report(state)
    return None if data is None else LoginReport.from_json(data)


async def _restore_here(
    state: Path,
    emit: Emit,
    timeout: float,
    options: Options,
    env: Mapping[str, str] | None,
    before_restore: BeforeRestore | None,
) -> Done | StoreUnavailable:
    """The store opened, the restore and the sweep; the report left for a
    restore that waits."""
    try:
        store, warning = ArrangementStore.open_or_quarantine(
            on_warning=lambda line: emit(StoreWarning(line))
        )
    except (StoreError, MultiserverError, OSError) as exc:
        return StoreUnavailable(exc)
    with store:
        if warning:
            emit(StoreWarning(warning))
        if before_restore is not None:
            for line in before_restore(store):
                emit(Warned(line))
        arrangement = store.load()
        emit(Restoring.of(arrangement, timeout))
        result, rows = await _restore_and_sweep(arrangement, store, emit, timeout, options, env)
    report = LoginReport.of(result, rows)
    try:
        keep_restore_report(state, report.as_json())
    except OSError as exc:
        emit(ReportNotKept(exc))
    return Done(report, ran_here=True)


async def _restore_and_sweep(
    arrangement: Arrangement,
    store: ArrangementStore,
    emit: Emit,
    timeout: float,
    options: Options,
    env: Mapping[str, str] | None,
) -> tuple[RestoreResult, list[SweepRow]]:
    """``arrangement`` restored within ``timeout``; late arrivals adopted
    once every session is built; then the sweep while the claims go back.
    The restore's result, and the rows of the late arrivals and the sweep."""
    sink = StoreSink(store)
    late_rows: list[SweepRow] = []
    late: list[LateArrival] = []  # until every session is built
    built = False
    async with trio.open_nursery() as nursery:

        async def adopt(att: LateArrival) -> None:
            rows = await adopt_late(att, sink)
            late_rows.extend(rows)
            emit(LateAdopted(tuple(rows)))

        def on_late(att: LateArrival) -> None:
            if built:
                nursery.start_soon(adopt, att)
            else:
                late.append(att)

        try:
            result = await restore_arrangement(
                arrangement,
                nursery=nursery,
                timeout=timeout,
                options=options,
                store=store,
                hold=False,
                keep_output=True,
                env=env,
                progress=lambda s: emit(SessionRestored(SessionRow.of(s))),
                on_arrival=lambda att: emit(Arrived.of(att)),
                on_late=on_late,
            )
        except BaseException:
            _close_all(late)
            raise
        built = True
        swept = await _adopt_and_sweep(result, late, adopt, sink, emit)
        # Partial attaches still running (wedged daemons) are abandoned here.
        nursery.cancel_scope.cancel()
    return result, [*late_rows, *swept]


async def _adopt_and_sweep(
    result: RestoreResult,
    late: list[LateArrival],
    adopt: Callable[[LateArrival], Awaitable[None]],
    sink: StoreSink,
    emit: Emit,
) -> list[SweepRow]:
    """Every session built: the late arrivals so far adopted, one by one;
    then the sweep of what nobody claimed, while every claim goes back
    (so that ``multiserver attach NAME`` works afterwards; the output stays
    in the daemons: ``keep_output``). The sweep leaves the claimed children
    alone, as they are saved sessions, and the daemons that did not answer
    the restore in time. The sweep's rows.

    Cancellation: the claims go back all the same (shielded), and the late
    arrivals not adopted go back to their daemons.
    """
    given_back = False

    async def give_back() -> None:
        nonlocal given_back
        given_back = True  # before any checkpoint: a cancel finds it under way
        with trio.CancelScope(shield=True):
            await release_claims(result)
        emit(ClaimsReleased())

    try:
        while late:
            await adopt(late.pop(0))
        wedged = frozenset(t.socket for t in result.phase.timed_out)
        async with trio.open_nursery() as both:
            both.start_soon(give_back)
            swept = await sweep(sink, adopt=True, bound=SWEEP_BOUND, skip=wedged)
            emit(Swept(tuple(swept.rows)))
    finally:
        _close_all(late)
        if not given_back:
            await give_back()
    return swept.rows


def _close_all(late: list[LateArrival]) -> None:
    """Late arrivals never handed on: their children back to their daemons."""
    while late:
        late.pop().close()
