"""The partial attach phase: before any session is built, contact every daemon
the arrangement names, concurrently, and claim its matched children in one
request each, under one deadline for the whole phase (an absolute time: the
part of the restore's deadline the phase may use).

    phase.run(nursery, attach_by)
      |-- partial_attach(daemon A) --> delivered before the deadline -> result
      |-- partial_attach(daemon B) --> delivered before the deadline -> result
      '-- partial_attach(daemon C, wedged) ....... (deadline) -> timed out
                                   ... later --> on_late(attachment)  (adopter)

Each attachment is delivered exactly once: to the phase's result if it
arrives before the phase resolves, else to ``on_late``. Resolution is one
synchronous step, so an answer that lands at the very deadline still goes to
exactly one place. A slow daemon delays only its own sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from multiserver import ClaimResult, Client, DaemonNotRunning, MultiserverError, dial
from multiserver.internal import close_fds
from restore._plan import DaemonTarget, Gone, Plan, match_children


@attrs.define
class DaemonAttachment:
    """What one daemon's partial attach got. Owns its client (which holds
    the claimed children) and the claimed master fds until they are handed on
    (``take_master``) or it is closed."""

    target: DaemonTarget
    client: Client | None = None
    instance_id: str | None = None
    error: str | None = None  # the daemon could not be reached or misbehaved
    claimed: dict[str, ClaimResult] = attrs.Factory(dict)  # by leaf name
    gone: list[Gone] = attrs.Factory(list)
    elapsed: float = 0.0  # seconds from the phase's start

    def take_master(self, name: str) -> int | None:
        """Hand the claimed master fd of session ``name`` to the caller."""
        result = self.claimed.get(name)
        if result is None or result.master is None:
            return None
        self.claimed[name] = result.without_master()
        return result.master

    def close(self) -> None:
        """Close every fd still owned and the connection (which makes the
        daemon take its children back)."""
        close_fds([r.master for r in self.claimed.values() if r.master is not None])
        self.claimed = {n: r.without_master() for n, r in self.claimed.items()}
        if self.client is not None:
            self.client.close()


async def partial_attach(
    target: DaemonTarget,
    nursery: trio.Nursery,
    *,
    keep_output: bool = False,
    started: float | None = None,
) -> DaemonAttachment:
    """Connect to ``target``'s daemon (never start one), say hello, check its
    instance, claim every matched child in one request.

    The client's reader runs in ``nursery``, so the connection (and the
    claims) outlive this call.

    Cancellation: nothing is left open; children claimed so far go back to
    the daemon when the connection closes.
    """
    t0 = trio.current_time() if started is None else started
    att = DaemonAttachment(target)
    try:
        try:
            # No listing of the daemon's children: the claim answers for
            # each child asked for, and a long list costs both sides.
            client = await dial(Path(target.socket), children=False)
        except MultiserverError as exc:
            att.error = str(exc)
            # The table names the socket already; the common case says so shortly.
            why = (
                "its daemon is not running"
                if isinstance(exc, DaemonNotRunning)
                else f"daemon unreachable: {exc}"
            )
            att.gone = [Gone(leaf, why) for leaf in target.leaves]
            return att
        att.client = client
        att.instance_id = client.instance_id
        client.start(nursery)
        to_claim, att.gone = match_children(target, client.instance_id)
        if to_claim:
            ids = [leaf.ref.child_id for leaf in to_claim if leaf.ref is not None]
            try:
                results = await client.claim(ids, keep_output=keep_output)
            except MultiserverError as exc:
                att.error = str(exc)
                att.gone += [Gone(leaf, f"daemon failed during claim: {exc}") for leaf in to_claim]
                return att
            att.claimed = {leaf.name: r for leaf, r in zip(to_claim, results, strict=True)}
        return att
    except BaseException:
        att.close()
        raise
    finally:
        att.elapsed = trio.current_time() - t0


@attrs.frozen
class PhaseResult:
    attachments: dict[str, DaemonAttachment]  # by socket, arrived in time
    timed_out: tuple[DaemonTarget, ...]
    elapsed: float


class PartialAttachPhase:
    """Runs the partial attaches of a plan; see the module docstring."""

    def __init__(
        self,
        plan: Plan,
        *,
        on_late: Callable[[DaemonAttachment], None],
        keep_output: bool = False,
        on_arrival: Callable[[DaemonAttachment], None] | None = None,
    ) -> None:
        self._plan = plan
        self._on_late = on_late
        self._on_arrival = on_arrival
        self._keep_output = keep_output
        self._arrived: dict[str, DaemonAttachment] = {}
        self._resolved = False
        self._all_done = trio.Event()
        self._t0 = 0.0

    @property
    def resolved(self) -> bool:
        return self._resolved

    async def run(self, nursery: trio.Nursery, deadline: float) -> PhaseResult:
        """Start every partial attach in ``nursery`` and return once all have
        arrived or trio's clock reaches ``deadline`` (an absolute time),
        whichever is first. Attaches still running go on in ``nursery``;
        each is handed to ``on_late`` when it completes (cancel the nursery
        to abandon them).

        Cancellation: attachments that arrived are closed; running attaches
        are left to ``nursery``'s cancellation.
        """
        self._t0 = trio.current_time()
        for target in self._plan.targets:
            nursery.start_soon(self._attach_one, target, nursery)
        if not self._plan.targets:
            self._all_done.set()
        try:
            with trio.move_on_at(deadline):
                await self._all_done.wait()
        except BaseException:
            self._resolved = True
            for att in self._arrived.values():
                att.close()
            raise
        self._resolved = True  # from here on, every arrival is late
        timed_out = tuple(t for t in self._plan.targets if t.socket not in self._arrived)
        return PhaseResult(dict(self._arrived), timed_out, trio.current_time() - self._t0)

    async def _attach_one(self, target: DaemonTarget, nursery: trio.Nursery) -> None:
        att = await partial_attach(target, nursery, keep_output=self._keep_output, started=self._t0)
        self._deliver(att)

    def _deliver(self, att: DaemonAttachment) -> None:
        if self._resolved:
            self._on_late(att)
            return
        self._arrived[att.target.socket] = att
        if self._on_arrival is not None:
            self._on_arrival(att)  # it is the phase's: a look, not a hand-over
        if len(self._arrived) == len(self._plan.targets):
            self._all_done.set()
