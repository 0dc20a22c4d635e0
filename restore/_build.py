"""Building sessions, only after the partial attach phase has resolved: each
leaf gets exactly one outcome (see ``_plan``), decided synchronously from what
the phase delivered; then the side effects run: collect ended children,
relaunch on a live daemon (never the wedged one), and keep the saved
arrangement current in one transaction per change.

Everything that waits for a daemon here (a collect, starting the relaunch
daemon, each launch) waits until the restore's one deadline, never for a
timeout of its own: what the deadline leaves undone is said in the
session's detail. Store writes are not bounded by it (see ``_save``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Mapping

import attrs
import trio

from multiserver import (
    ChildInfo,
    Client,
    DaemonPaths,
    MultiserverError,
    default_daemon_number,
    describe_exit,
)
from restore._kept import forget_kept, kept_scrollback
from restore._partial import DaemonAttachment, PhaseResult
from restore._plan import (
    ClaimAnswer,
    Decision,
    Options,
    Outcome,
    Plan,
    RestoreDeadline,
    decide_claimed,
    decide_gone,
    decide_held,
    decide_saved_end,
    decide_timed_out,
    decide_unsettled,
    relaunch_notice,
)
from restore._relaunch import (
    Attempt,
    Closed,
    CutOff,
    NotDone,
    Relaunched,
    Relauncher,
)
from restore.store._errors import StoreError
from restore.store._held import Hold, Key, live_holds
from restore.store._model import (
    Arrangement,
    PendingLaunch,
    RestorationRef,
    SavedOutput,
    SessionLeaf,
)
from restore.store._store import ArrangementStore


@attrs.define
class RestoredSession:
    """One leaf's outcome. With ``master`` set, the caller owns that fd and
    ``client`` is the connection that holds the child (keep it open while you
    use the fd). ``replay`` is what to show before the live output.

    ``elapsed`` is this session's own time, in seconds: how long its daemon
    took to answer, counted from the restore's start (the whole phase if it
    did not answer, nothing without a daemon), plus carrying out its outcome.
    A slow daemon delays only its own sessions' figure."""

    leaf: SessionLeaf
    outcome: Outcome
    detail: str
    daemon: str
    elapsed: float
    master: int | None = None
    replay: bytes = b""
    client: Client | None = None
    exit_code: int | None = None
    # False when the store could not take what was done (the detail says
    # why): a relaunch not recorded, a close not saved. The next restore
    # settles it (see _intents, and the durable close).
    saved: bool = True


@attrs.frozen
class _Pending:
    leaf: SessionLeaf
    decision: Decision
    daemon: str
    attachment: DaemonAttachment | None = None
    waited: float = 0.0  # until its daemon answered (or the phase resolved)


def decide_all(
    plan: Plan,
    phase: PhaseResult,
    attach_seconds: float,
    options: Options,
    unsettled: Mapping[str, str] | None = None,
) -> list[_Pending]:
    """Every leaf of the plan, with its decision (pure). ``attach_seconds``:
    how long the phase waited for the daemons that did not answer.
    ``unsettled``: sessions whose earlier relaunch could not be looked for
    (name -> that daemon's socket): never relaunched now."""
    out: list[_Pending] = [
        _Pending(leaf, decide_lost(leaf, "never started", options), "")
        for leaf in plan.unreferenced
    ]
    for target in phase.timed_out:
        silent = f"its daemon did not answer within {attach_seconds:g} s"
        out += [
            _Pending(
                leaf,
                decide_saved_end(leaf, silent, options)
                or decide_timed_out(attach_seconds, options),
                target.socket,
                None,
                phase.elapsed,
            )
            for leaf in target.leaves
        ]
    for socket, att in phase.attachments.items():
        for gone in att.gone:
            decision = decide_lost(gone.leaf, gone.reason, options)
            out.append(_Pending(gone.leaf, decision, socket, att, att.elapsed))
        by_name = {leaf.name: leaf for leaf in att.target.leaves}
        for name, result in att.claimed.items():
            answer = ClaimAnswer(
                result.child,
                result.error.errno if result.error else 0,
                result.error.message if result.error else "",
            )
            decision = decide_claimed(answer, options)
            out.append(_Pending(by_name[name], decision, socket, att, att.elapsed))
    order = {leaf.name: i for i, leaf in enumerate(plan_leaves(plan))}
    out.sort(key=lambda p: order[p.leaf.name])
    held_back = unsettled or {}
    return [
        attrs.evolve(p, decision=decide_unsettled(held_back[p.leaf.name]))
        if p.decision.relaunch and p.leaf.name in held_back
        else p
        for p in out
    ]


def decide_lost(leaf: SessionLeaf, reason: str, options: Options) -> Decision:
    """A leaf whose child is gone (``reason``): reported as ended if its
    saved leaf says the program had ended, else relaunched or expired."""
    return decide_saved_end(leaf, reason, options) or decide_gone(reason, options)


def plan_leaves(plan: Plan) -> list[SessionLeaf]:
    return [*plan.unreferenced, *(leaf for t in plan.targets for leaf in t.leaves)]


def relaunch_daemon(avoid: set[str]) -> DaemonPaths:
    """The daemon to relaunch on: the default one, or the next number whose
    socket is not one that just failed to answer."""
    number = default_daemon_number()
    while str(DaemonPaths.for_number(number).socket) in avoid:
        number += 1
    return DaemonPaths.for_number(number)


async def build_sessions(
    plan: Plan,
    phase: PhaseResult,
    *,
    deadline: RestoreDeadline,
    options: Options,
    nursery: trio.Nursery,
    store: ArrangementStore | None,
    hold: bool,
    env: Mapping[str, str] | None = None,
    progress: Callable[[RestoredSession], None] | None = None,
    unsettled: Mapping[str, str] | None = None,
) -> list[RestoredSession]:
    """Give every leaf its outcome and carry it out.

    ``hold``: relaunched sessions come back with their master fd (an app that
    shows them); else they are launched detached. ``env``: their
    environment (default: this process's). Claimed fds of attached
    sessions are handed over either way (close them if unused).

    ``deadline``: collects, starting the relaunch daemon and the launches
    wait until ``deadline.end`` and no longer. Past it, every session not yet
    built still gets its outcome, at once: a relaunch not done is ``failed``
    ("relaunch not done: the restore deadline (T s) passed"), an ended
    child not collected stays ``ended`` (the daemon keeps it until a sweep
    collects it).

    Sessions come back in the plan's order. Every outcome but a relaunch
    is carried out first, session by session; then the relaunches, as one
    batch (``_relaunch_all``): their intents written in one transaction,
    the launches in flight together, the new children recorded in one
    more. ``progress`` is told of each session once it is built, in the
    plan's order (so of the relaunched ones once they are recorded).

    Cancellation: sessions already relaunched stay running, and saved
    (their record is written, shielded, before the cancel goes on); the
    fds of the sessions built so far are closed (they were never
    returned) and the relaunch connection too, which gives those children
    back to their daemon; fds not yet handed over are closed by their
    attachments' owners. A launch in flight at the cancel may have started
    its child: its intent is saved, and the next restore settles it.

    The deadline is no cancellation of the build, only of the answer it
    waits for. A launch it cut off may have started its child: that child
    is the daemon's and keeps running, unrecorded (held by the relaunch
    connection until that closes, then detached; the daemon knows it by the
    session's name, which keeps a sweep from adopting it). That session is
    ``failed``, says so, names the relaunch daemon, and its saved leaf is
    left as it was (its earlier ref) but for its intent, which the next
    restore settles: the child is then the session's. A relaunch the
    deadline left unasked loses its intent again.

    Each relaunch's intent is written before its launch (see
    ``_relaunch.Relauncher``); a store that cannot take a change costs no
    session (``RestoredSession.saved`` says so). ``unsettled``: sessions
    whose earlier relaunch could not be looked for (``_intents``): not
    relaunched.
    """
    pending = spare_held(
        decide_all(plan, phase, deadline.attach_seconds, options, unsettled), live_holds()
    )
    avoid = {t.socket for t in phase.timed_out}
    relauncher = Relauncher(relaunch_daemon(avoid), nursery, deadline, env, store)
    results: list[RestoredSession] = []
    batch: list[_Relaunch] = []
    first = 0  # the first session to relaunch: progress waits there for the batch
    taken_refs = {
        (leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id)
        for leaf in plan_leaves(plan)
        if leaf.ref is not None
    }
    try:
        for p in pending:
            t0 = trio.current_time()
            session = await _carry_out(p, store, deadline)
            results.append(session)
            if p.decision.relaunch:
                first = len(results) - 1 if not batch else first
                batch.append(_Relaunch(session, p, t0))
            elif not batch and progress is not None:
                progress(session)  # nothing before it waits for the batch
        await _relaunch_all(batch, relauncher, store, hold, deadline, taken_refs)
        if batch and progress is not None:
            for session in results[first:]:
                progress(session)
    except BaseException:
        for s in results:
            if s.master is not None:
                os.close(s.master)
                s.master = None
        if relauncher.client is not None:
            relauncher.client.close()
        raise
    finally:
        relauncher.close_if_unused()
    return results


# --- sessions still held by a client whose daemon died (``_held``) -----------------

# The outcomes of a leaf whose child its daemon cannot give back.
_CHILD_GONE = frozenset({"relaunched", "expired", "timed-out"})


def spare_held(pending: list[_Pending], holds: Mapping[Key, Hold]) -> list[_Pending]:
    """Leaves to be relaunched (or reported expired) whose child a client
    still holds, its daemon dead: ``held`` instead, nothing started."""
    out = []
    for p in pending:
        ref = p.leaf.ref
        hold = holds.get((ref.instance_id, ref.child_id)) if ref is not None else None
        if hold is not None and p.decision.outcome in _CHILD_GONE:
            p = attrs.evolve(p, decision=decide_held(hold.client_pid))
        out.append(p)
    return out


async def _carry_out(
    p: _Pending, store: ArrangementStore | None, deadline: RestoreDeadline
) -> RestoredSession:
    """Everything of ``p``'s outcome but its relaunch (``_relaunch_all``)."""
    t0 = trio.current_time()
    d, leaf, att = p.decision, p.leaf, p.attachment
    session = RestoredSession(leaf, d.outcome, d.detail, p.daemon, 0.0)
    if d.outcome == "attached" and att is not None:
        result = att.claimed[leaf.name]
        session.master = att.take_master(leaf.name)
        session.replay = result.output
        session.client = att.client
        if result.dropped:
            session.replay = (
                f"[multiserver: {result.dropped} earlier bytes were not kept]\r\n".encode()
                + session.replay
            )
    if d.outcome == "ended" and att is not None and leaf.name in att.claimed:
        await _keep_ended(session, att, store)
    elif d.outcome == "ended":  # its daemon is gone: the saved leaf says how it ended
        session.exit_code = leaf.exit_code
    if d.collect and att is not None and att.client is not None:
        child = att.claimed[leaf.name].child
        assert child is not None
        await _collect(session, att.client, child, store if d.close else None, deadline)
    elif d.close and store is not None:
        await _save(session, _durable_close, store, leaf.name)
    session.elapsed = p.waited + (trio.current_time() - t0)
    return session


async def _collect(
    session: RestoredSession,
    client: Client,
    child: ChildInfo,
    store: ArrangementStore | None,
    deadline: RestoreDeadline,
) -> None:
    """Collect an exited child; with ``store``, as a durable close: staged
    first, so a crash or a store that cannot take it leaves the child for
    the next restore to close, never a saved session to start again."""
    session.exit_code = child.exit_code
    name = session.leaf.name
    if store is not None:
        staged = await _save(session, store.stage_close, name)
        if not staged and not session.saved:
            session.detail += "; kept by its daemon until a restore can save the close"
            return
    with trio.move_on_at(deadline.end) as scope, contextlib.suppress(MultiserverError):
        await client.collect(child.id)
    if scope.cancelled_caught:
        session.detail += (
            f"; not collected by the restore deadline ({deadline.seconds:g} s):"
            " the daemon keeps it until a sweep collects it"
        )
    if store is not None and session.saved:
        # The close is saved (staged): if completing it fails, the next run completes it.
        with contextlib.suppress(StoreError):
            await trio.to_thread.run_sync(store.complete_close, name, session.leaf.ref)


@attrs.frozen
class _Relaunch:
    """A session to relaunch, built but for that; when it started."""

    session: RestoredSession
    pending: _Pending
    t0: float


async def _relaunch_all(
    batch: list[_Relaunch],
    relauncher: Relauncher,
    store: ArrangementStore | None,
    hold: bool,
    deadline: RestoreDeadline,
    taken: Collection[tuple[str, str, int]],
) -> None:
    """Relaunch the batch (``Relauncher.launch_all``), then record it: the
    new children in one transaction, and the intents of the relaunches the
    deadline left unasked cleared in another. A cancel still records
    what was launched by then, shielded."""
    if not batch:
        return
    attempts: dict[str, Attempt] = {}
    try:
        await relauncher.launch_all(
            [r.session.leaf for r in batch], hold=hold, taken=taken, into=attempts
        )
    except BaseException:
        with trio.CancelScope(shield=True):
            done = [r for r in batch if r.session.leaf.name in attempts]
            await _record(done, attempts, relauncher, store)
        raise
    found = await _record(batch, attempts, relauncher, store)
    for session, client, child in found:
        await _collect(session, client, child, store, deadline)


async def _record(
    batch: list[_Relaunch],
    attempts: Mapping[str, Attempt],
    relauncher: Relauncher,
    store: ArrangementStore | None,
) -> list[tuple[RestoredSession, Client, ChildInfo]]:
    """Each attempt applied to its session, and what it changed saved.
    Returns the exited children found where a relaunch was asked (an
    earlier restore's, never recorded), for the caller to collect."""
    launched: list[RestoredSession] = []
    unasked: list[str] = []
    found: list[tuple[RestoredSession, Client, ChildInfo]] = []
    # The children whose kept output went into a relaunch's notice.
    consumed: dict[str, RestorationRef | None] = {}
    for r in batch:
        outcome, at = attempts[r.session.leaf.name]
        old_ref = r.session.leaf.ref
        _apply(r, outcome, relauncher)
        if isinstance(outcome, Relaunched) and outcome.found is None:
            consumed[r.session.leaf.name] = old_ref
        r.session.elapsed = r.pending.waited + (at - r.t0)
        if isinstance(outcome, Relaunched):
            launched.append(r.session)
            if outcome.found is not None and outcome.found.state == "exited":
                found.append((r.session, outcome.client, outcome.found))
        elif isinstance(outcome, NotDone) and not isinstance(outcome, CutOff):
            unasked.append(r.session.leaf.name)
    if store is None:
        return found
    if launched:
        await _save_all(launched, store.update_sessions, [s.leaf for s in launched])
        for session in launched:  # the notice is saved: what it came from goes
            if session.saved and session.leaf.name in consumed:
                forget_kept(consumed[session.leaf.name])
    if unasked and relauncher.intent is not None:
        with contextlib.suppress(StoreError):  # the next restore settles them
            await trio.to_thread.run_sync(store.modify, _drop_intents(unasked, relauncher.intent))
    return found


def _apply(
    r: _Relaunch, outcome: Relaunched | NotDone | Closed | MultiserverError, relauncher: Relauncher
) -> None:
    """What one relaunch attempt makes of its session."""
    session, d = r.session, r.pending.decision
    leaf = session.leaf
    if isinstance(outcome, Closed):
        session.outcome = "ended"
        session.detail = "closed meanwhile (multiserver kill): not started again"
        return
    if isinstance(outcome, CutOff):
        # Its child may run on the relaunch daemon: that is where to look.
        session.outcome, session.daemon = "failed", str(relauncher.paths.socket)
        session.detail = f"{d.detail}; {outcome}"
        return
    if isinstance(outcome, NotDone):
        session.outcome = "failed"
        session.detail = f"{d.detail}; {outcome}"
        return
    if isinstance(outcome, MultiserverError):
        session.outcome = "failed"
        session.detail = f"{d.detail}; relaunch failed: {outcome}"
        return
    session.daemon = str(relauncher.paths.socket)
    session.master, session.client = outcome.master, outcome.client
    found = outcome.found
    if found is None:
        notice = relaunch_notice(_shown_last(leaf, r.pending.attachment), d.reason or d.detail)
        # The scrollback is in the notice now; what the new program shows
        # is saved as its own.
        session.leaf = attrs.evolve(outcome.leaf, notice=notice, scrollback=None, exit_code=None)
        session.replay = notice
        return
    # The daemon had it already: the relaunch of an earlier restore, never
    # recorded (a crash, a store that could not be written). It is the session.
    session.leaf = outcome.leaf
    session.outcome = "attached"
    session.detail = (
        f"pid {found.pid}: found running on its daemon as {leaf.name!r}, started by an"
        " earlier restore that could not record it"
    )
    if found.state == "exited":
        session.outcome = "ended"
        ended = "ended" if found.exit_code is None else describe_exit(found.exit_code)
        session.detail = f"session ended ({ended}); it was started by an earlier restore"


def _drop_intents(names: list[str], intent: PendingLaunch) -> Callable[[Arrangement], Arrangement]:
    """The change that clears ``intent`` from the leaves ``names``, where
    it is still theirs: relaunches never asked for, which started nothing."""
    wanted = set(names)

    def change(arr: Arrangement) -> Arrangement:
        return arr.map_leaves(
            lambda leaf: (
                attrs.evolve(leaf, pending_launch=None)
                if leaf.name in wanted and leaf.pending_launch == intent
                else leaf
            )
        )

    return change


async def _save_all(
    sessions: list[RestoredSession],
    change: Callable[..., list[str]],
    *args: object,
) -> None:
    """``_save`` for a batch: one change that returns the names it found
    no session for."""
    try:
        missing = set(await trio.to_thread.run_sync(change, *args))
    except StoreError as exc:
        for session in sessions:
            session.detail += f"; not saved: {exc}"
            session.saved = False
        return
    for session in sessions:
        if session.leaf.name in missing:
            session.detail += "; not saved: the session is no longer in the saved arrangement"


async def _save(session: RestoredSession, change: Callable[..., object], *args: object) -> bool:
    """One change to the store, in a thread. A store that cannot take it (a
    newer schema is read-only, busy past its timeout, full, read-only, the
    leaf removed meanwhile) costs the session nothing: the detail says it
    was not saved, and ``saved`` is False unless the leaf was simply gone.
    Returns whether it was saved."""
    try:
        await trio.to_thread.run_sync(change, *args)
    except KeyError:
        session.detail += "; not saved: the session is no longer in the saved arrangement"
        return False
    except StoreError as exc:
        session.detail += f"; not saved: {exc}"
        session.saved = False
        return False
    return True


async def _keep_ended(
    session: RestoredSession, att: DaemonAttachment, store: ArrangementStore | None
) -> None:
    """An ended child, left uncollected in its daemon for a person to see:
    its output is what to show (``replay``), and its saved leaf keeps that
    output and says it ended, for the case its daemon goes before anyone
    attaches."""
    result = att.claimed[session.leaf.name]
    assert result.child is not None and att.client is not None
    session.exit_code = result.child.exit_code
    session.replay = result.output
    if store is not None:
        client = att.client
        code = result.child.exit_code
        saved = SavedOutput(
            str(client.socket_path), client.instance_id, result.child.id, result.output, code
        )

        def write() -> None:
            if not store.save_outputs([saved]):
                raise KeyError(session.leaf.name)

        await _save(session, write)


def _shown_last(leaf: SessionLeaf, att: DaemonAttachment | None) -> SessionLeaf:
    """``leaf`` with the newest output it showed as its scrollback: that of
    its ended child, if it was claimed (newer than the saved one)."""
    result = None if att is None else att.claimed.get(leaf.name)
    if result is None or not result.output:
        # Its daemon gone: what it kept on disk (newer than the saved one).
        kept = kept_scrollback(leaf.ref)
        return leaf if kept is None else attrs.evolve(leaf, scrollback=kept)
    return attrs.evolve(leaf, scrollback=result.output)


def _durable_close(store: ArrangementStore, name: str) -> None:
    store.stage_close(name)
    store.complete_close(name)
