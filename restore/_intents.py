"""Relaunches written down before they are asked for, and settled after.

A relaunch is a decision that must survive a crash or a store that cannot
be written: between the daemon starting the child and the store recording
its new ``ref`` there is always a moment. So the restore writes the intent
first (``SessionLeaf.pending_launch``: which daemon, which run of it; the
daemon knows the child by the session's name), then asks for the launch,
then records the child and clears the intent in one transaction.

An intent still there at the next restore is settled before anything else
(``settle_launches``): the daemon is asked for its children, and the rule
(``_plan.settle_launch``) says whether the launch happened. If it did, the
child is the session's (its ``ref``), and the restore goes back to it like
to any other; it is never started a second time. Its daemon not answering
in time (a wedged daemon) leaves the intent for the next run, and that
session is not started this time (``_plan.decide_unsettled``); a daemon
that is not running, or not one to speak to, started nothing that lives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from multiserver import MultiserverError, dial
from restore._plan import LaunchAnswer, Settled, settle_launch
from restore.store._errors import StoreError
from restore.store._model import Arrangement, SessionLeaf
from restore.store._store import ArrangementStore


@attrs.frozen
class Settlement:
    """The arrangement with every answered intent settled; what became of
    each; the sessions whose daemon did not answer (name -> its socket)."""

    arrangement: Arrangement
    settled: tuple[Settled, ...] = ()
    unsettled: dict[str, str] = attrs.Factory(dict)
    not_saved: str | None = None  # why the store did not take the settlement


async def settle_launches(
    arrangement: Arrangement, *, store: ArrangementStore | None, until: float
) -> Settlement:
    """Settle every pending launch of ``arrangement``: its daemons are asked,
    all at once, until ``until`` (trio's clock); the answers are applied to
    the arrangement and, in one transaction, to ``store``.

    Cancellation: nothing is left open; what was not yet saved stays pending
    for the next run.
    """
    pending = [leaf for leaf in arrangement.leaves() if leaf.pending_launch is not None]
    if not pending:
        return Settlement(arrangement)
    sockets = {leaf.pending_launch.socket for leaf in pending if leaf.pending_launch}
    answers: dict[str, LaunchAnswer] = {}

    async def ask(socket: str) -> None:
        try:
            client = await dial(Path(socket), children=True)
        except MultiserverError:
            # Not running, or not one to speak to (another uid's, a dir
            # that is not private): whatever it started cannot be ours.
            answers[socket] = LaunchAnswer(None)
            return
        async with client:
            answers[socket] = LaunchAnswer(client.instance_id, tuple(client.welcome.children))

    with trio.move_on_at(until):
        async with trio.open_nursery() as nursery:
            for socket in sorted(sockets):
                nursery.start_soon(ask, socket)
    taken = {
        (leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id)
        for leaf in arrangement.leaves()
        if leaf.ref is not None
    }
    settled: list[Settled] = []
    unsettled: dict[str, str] = {}
    for leaf in pending:
        assert leaf.pending_launch is not None
        answer = answers.get(leaf.pending_launch.socket)
        if answer is None:
            unsettled[leaf.name] = leaf.pending_launch.socket
        else:
            settled.append(settle_launch(leaf, answer, taken))
    by_name = {s.leaf.name: s.leaf for s in settled}
    result = arrangement.map_leaves(lambda leaf: by_name.get(leaf.name, leaf))
    not_saved = None
    if store is not None and settled:
        try:
            await trio.to_thread.run_sync(store.modify, _apply(pending, by_name))
        except StoreError as exc:
            not_saved = str(exc)
    return Settlement(result, tuple(settled), unsettled, not_saved)


def _apply(
    was: list[SessionLeaf], now: dict[str, SessionLeaf]
) -> Callable[[Arrangement], Arrangement]:
    """The change to the saved arrangement: each settled leaf gets its new
    ``ref`` and loses its intent, if the store still holds the same intent
    (another restore may have settled it meanwhile)."""
    intents = {leaf.name: leaf.pending_launch for leaf in was}

    def change(arr: Arrangement) -> Arrangement:
        def one(leaf: SessionLeaf) -> SessionLeaf:
            settled = now.get(leaf.name)
            if settled is None or leaf.pending_launch != intents.get(leaf.name):
                return leaf
            return attrs.evolve(leaf, ref=settled.ref, pending_launch=None)

        return arr.map_leaves(one)

    return change
