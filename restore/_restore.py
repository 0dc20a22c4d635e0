"""The library's restore: plan -> partial attach phase -> build sessions.

    async with trio.open_nursery() as nursery:
        result = await restore_arrangement(arrangement, nursery=nursery, timeout=10)
        for s in result.sessions:
            ...  # s.outcome, s.master (yours), s.replay, s.client
        # late arrivals go to on_late while the nursery lives

See docs/restore.md for the sequence diagram and what each outcome means.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping

import attrs
import trio

from multiserver import Client, MultiserverError
from restore._build import RestoredSession, build_sessions
from restore._intents import Settlement, settle_launches
from restore._kept import with_kept_state
from restore._partial import DaemonAttachment, PartialAttachPhase, PhaseResult
from restore._plan import Options, RestoreDeadline, Settled, plan_restore
from restore.remote._restore import HostAttachment, restore_hosts
from restore.store._model import Arrangement
from restore.store._store import ArrangementStore

DEFAULT_TIMEOUT = 10.0
DEFAULT_OPTIONS = Options()


@attrs.frozen
class RestoreResult:
    sessions: list[RestoredSession]
    phase: PhaseResult
    elapsed: float  # the whole restore, seconds
    # The relaunches an earlier restore asked for and did not record, settled
    # before anything else (see _intents).
    settlement: Settlement | None = None

    @property
    def ok(self) -> bool:
        """True when no session failed."""
        return all(s.outcome != "failed" for s in self.sessions)

    @property
    def saved(self) -> bool:
        """True when the store took everything done (see RestoredSession.saved)."""
        return all(s.saved for s in self.sessions) and (
            self.settlement is None or self.settlement.not_saved is None
        )


LateArrival = DaemonAttachment | HostAttachment


def close_late(att: LateArrival) -> None:
    """The default for late arrivals when nobody adopts them: give the
    children back to their daemon (the next sweep finds them); a host's
    late answer holds nothing."""
    att.close()


async def restore_arrangement(
    arrangement: Arrangement,
    *,
    nursery: trio.Nursery,
    timeout: float | None = None,
    deadline: float | None = None,
    options: Options = DEFAULT_OPTIONS,
    store: ArrangementStore | None = None,
    hold: bool = True,
    keep_output: bool = False,
    env: Mapping[str, str] | None = None,
    on_late: Callable[[LateArrival], None] = close_late,
    progress: Callable[[RestoredSession], None] | None = None,
    on_arrival: Callable[[DaemonAttachment], None] | None = None,
    on_settled: Callable[[Settled], None] | None = None,
) -> RestoreResult:
    """Restore every session of ``arrangement``: partial attaches to the
    daemons (never starting one), then one outcome per session, carried out.

    One deadline bounds it all: ``timeout`` seconds from now (default
    ``DEFAULT_TIMEOUT``), or ``deadline``, an absolute time on trio's clock
    (give one or neither). The phase waits for the daemons until
    ``ATTACH_SHARE`` of it; collects, starting the relaunch daemon and the
    relaunches get what is left, together. It returns by the deadline (store
    writes aside, which are never cut short); each session the deadline
    left undone says so in its detail (see ``build_sessions``).

    ``nursery`` must outlive the returned sessions' use: connections that hold
    claimed children read there, and partial attaches still running after the
    deadline finish there and go to ``on_late`` (cancel it to abandon them).

    ``env``: the environment relaunched sessions get (default: this
    process's, as ``Client.launch`` sends it; ``multiserver restore`` passes
    ``launch_env(os.environ, ...)``, without credentials).

    Before anything else, relaunches that an earlier restore asked for and
    could not record (``SessionLeaf.pending_launch``) are looked for on their
    daemon, until ``SETTLE_SHARE`` of the deadline: one that runs is the
    session's, recorded in ``store`` and restored like any other (never
    started twice); ``on_settled`` is told of each.

    Sessions on other hosts (``leaf.host``) are restored meanwhile, over
    ssh (``restore.remote``): each host is asked under its own timeout
    within the deadline, and its answer after that timeout (before the
    deadline) goes to ``on_late`` as a HostAttachment. The sessions come
    back this machine's first, then the hosts', each in the arrangement's
    order; with hosts, this returns once every host has answered, at the
    deadline at most.

    ``on_arrival`` is called as each daemon's partial attach arrives in
    time (answered, or failed to connect), while the phase still waits for
    the others: progress for a person. ``progress`` is called for each
    session once it is built. Neither may keep what it is shown.

    The caller owns every returned ``master`` and ``client`` (sessions of one
    daemon share its client); connections no session uses are closed before
    this returns. ``release_claims`` gives everything back.

    Cancellation: relaunched sessions stay running (and saved); every fd and
    connection it got is closed (nothing was returned), so the children go
    back to their daemons. Partial attaches still running are ``nursery``'s.
    The deadline is not a cancellation: past it, every session still gets
    its outcome. A relaunch it cut off may have started its child, which
    keeps running in the relaunch daemon, unrecorded but for its intent,
    until the next restore takes it back as the session; that session is
    ``failed``, says so, and its saved leaf is unchanged but for the intent.
    """
    t0 = trio.current_time()
    if deadline is not None and timeout is not None:
        raise ValueError("give restore_arrangement a timeout or a deadline, not both")
    if deadline is not None:
        bound = RestoreDeadline.from_end(t0, deadline)
    else:
        bound = RestoreDeadline.from_timeout(t0, DEFAULT_TIMEOUT if timeout is None else timeout)
    elsewhere = [leaf for leaf in arrangement.leaves() if leaf.host is not None]
    remote: list[RestoredSession] = []

    async def hosts() -> None:
        remote.extend(
            await restore_hosts(
                elsewhere,
                deadline=bound,
                options=options,
                store=store,
                on_late=on_late,
                progress=progress,
            )
        )

    async with trio.open_nursery() as both:
        if elsewhere:
            both.start_soon(hosts)
        local = await _restore_here(
            arrangement,
            bound,
            nursery=nursery,
            options=options,
            store=store,
            hold=hold,
            keep_output=keep_output,
            env=env,
            on_late=on_late,
            progress=progress,
            on_arrival=on_arrival,
            on_settled=on_settled,
        )
    return attrs.evolve(local, sessions=local.sessions + remote, elapsed=trio.current_time() - t0)


async def _restore_here(
    arrangement: Arrangement,
    bound: RestoreDeadline,
    *,
    nursery: trio.Nursery,
    options: Options,
    store: ArrangementStore | None,
    hold: bool,
    keep_output: bool,
    env: Mapping[str, str] | None,
    on_late: Callable[[LateArrival], None],
    progress: Callable[[RestoredSession], None] | None,
    on_arrival: Callable[[DaemonAttachment], None] | None,
    on_settled: Callable[[Settled], None] | None,
) -> RestoreResult:
    """The sessions of this machine's daemons: settle, plan, the partial
    attach phase, build (``restore_arrangement`` says how)."""
    t0 = trio.current_time()
    # Relaunches an earlier run asked for and never recorded: found (and
    # recorded) before anything is decided, so none is started twice.
    settlement = await settle_launches(arrangement, store=store, until=bound.settle_by)
    if on_settled is not None:
        for settled in settlement.settled:
            on_settled(settled)
    # What the daemons kept on disk of their sessions (exit codes, where
    # each was): newer than the saved arrangement when a daemon is gone.
    plan = plan_restore(settlement.arrangement.map_leaves(with_kept_state))
    phase = PartialAttachPhase(
        plan, on_late=on_late, keep_output=keep_output, on_arrival=on_arrival
    )
    result = await phase.run(nursery, bound.attach_by)
    try:
        sessions = await build_sessions(
            plan,
            result,
            deadline=bound,
            options=options,
            nursery=nursery,
            store=store,
            hold=hold,
            env=env,
            progress=progress,
            unsettled=settlement.unsettled,
        )
    except BaseException:
        for att in result.attachments.values():
            att.close()
        raise
    # A connection no session holds a child on (its children were gone, ended
    # or refused) has no owner among the results: close it here.
    used = {id(s.client) for s in sessions if s.client is not None}
    for att in result.attachments.values():
        if att.client is not None and id(att.client) not in used:
            att.close()
    return RestoreResult(sessions, result, trio.current_time() - t0, settlement)


async def release_claims(result: RestoreResult) -> None:
    """Give every claimed child back to its daemon and close the connections
    and fds (what `multiserver restore` does before it exits).

    Cancellation: connections are closed anyway, which releases the rest.
    """

    async def release(client: Client, ids: list[int]) -> None:
        with contextlib.suppress(MultiserverError):
            await client.release(ids)

    try:
        # All daemons at once: one round trip in all, not one per daemon.
        async with trio.open_nursery() as nursery:
            for att in result.phase.attachments.values():
                if att.client is None:
                    continue
                ids = [
                    r.child.id
                    for r in att.claimed.values()
                    if r.child is not None and r.child.state == "running"
                ]
                if ids:
                    nursery.start_soon(release, att.client, ids)
    finally:
        for s in result.sessions:
            if s.master is not None:
                os.close(s.master)
                s.master = None
        for att in result.phase.attachments.values():
            att.close()
        clients = {id(s.client): s.client for s in result.sessions if s.client is not None}
        for client in clients.values():
            client.close()
