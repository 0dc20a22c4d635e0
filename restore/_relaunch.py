"""The relaunch daemon: one connection to the daemon that relaunched
sessions start on, the intents written before they are asked for, and
the launches, in flight together.

A restore after a reboot relaunches every session at once, so what one
relaunch costs is paid hundreds of times. The store's document is read
and written once for the whole batch of intents (``write_intents``), not
once a session, and the launches go out together, at most
``IN_FLIGHT`` at a time on the one connection (the daemon answers them as
fast as it spawns). Recording the new children is the caller's, in one
transaction too (``ArrangementStore.update_sessions``).

The intents keep the promise a relaunch makes: every launch is asked for
only once its intent is in the store, so a crash (or a deadline) between
the daemon starting the child and the store recording it leaves the
intent, which the next restore settles (``_intents``) instead of starting
the session twice.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Collection, Mapping, MutableMapping, Sequence

import attrs
import trio

from multiserver import (
    ChildInfo,
    Client,
    DaemonPaths,
    MultiserverError,
    RequestFailed,
    dial,
)
from restore._plan import RestoreDeadline
from restore.store._errors import StoreError
from restore.store._model import Arrangement, PendingLaunch, RestorationRef, SessionLeaf
from restore.store._store import ArrangementStore

# Launches asked for at once on the relaunch connection; the rest wait
# their turn, in plan order, and one the deadline leaves waiting was never
# asked for. High on purpose: the daemon spawns one at a time, and with a
# few dozen in flight every reply had to reach this process before the
# next request went out, so on a busy machine each waited for the other to
# be scheduled (1,000 relaunches: 3-5 s with 64 in flight, 1.5-2 s with
# all of them, beside 2.2-3.5 s for the daemon's own launch figure).
IN_FLIGHT = 1024


class NotDone(Exception):
    """A relaunch the restore's deadline left no time for: nothing was
    asked of the relaunch daemon. The message is the whole reason."""


class CutOff(NotDone):
    """A launch the restore's deadline cut off after it was asked for: the
    daemon may have started the child."""


class Closed(Exception):
    """The session was closed (``multiserver kill``) since the restore read
    the arrangement: it is not started again."""


@attrs.frozen
class Relaunched:
    leaf: SessionLeaf  # with its new ref, its intent cleared
    client: Client
    master: int | None
    found: ChildInfo | None = None  # the daemon had it: an earlier relaunch


# What became of one relaunch, and when (trio's clock) that was known.
Attempt = tuple[Relaunched | NotDone | Closed | MultiserverError, float]


class Relauncher:
    """One connection to the daemon that relaunched sessions start on,
    started on first use; a failure to reach it is remembered, so it is
    waited for once, not once per session. Starting it and every launch
    wait until the restore's deadline, which they share.

    Before the launches, their intents are written to the store
    (``SessionLeaf.pending_launch``, one transaction for the batch), and
    the record of the new children clears them. A store that cannot take
    the intents costs no session: the launches go ahead, and a child that
    a later restore finds under the session's name on this daemon is taken
    as the session's anyway (``launch``)."""

    def __init__(
        self,
        paths: DaemonPaths,
        nursery: trio.Nursery,
        deadline: RestoreDeadline,
        env: Mapping[str, str] | None = None,
        store: ArrangementStore | None = None,
    ) -> None:
        self.paths = paths
        self._env = env
        self._nursery = nursery
        self._deadline = deadline
        self._client: Client | None = None
        self._error: Exception | None = None
        self._used = False
        self._store = store
        # The intent written for the batch, if the store took it.
        self.intent: PendingLaunch | None = None

    def _check_time(self) -> None:
        if trio.current_time() >= self._deadline.end:
            raise NotDone(
                f"relaunch not done: the restore deadline ({self._deadline.seconds:g} s) passed"
            )

    async def _get(self) -> Client:
        if self._error is not None:
            raise self._error
        self._check_time()
        if self._client is None:
            try:
                with trio.fail_at(self._deadline.end):
                    self._client = await dial(self.paths, start=True)
            except trio.TooSlowError:
                # A daemon it started keeps running (dial's cancellation).
                self._error = NotDone(
                    f"relaunch not done: daemon {self.paths.socket} did not start"
                    f" by the restore deadline ({self._deadline.seconds:g} s)"
                )
                raise self._error from None
            except MultiserverError as exc:
                self._error = exc
                raise
            self._client.start(self._nursery)
        return self._client

    async def launch_all(
        self,
        leaves: Sequence[SessionLeaf],
        *,
        hold: bool,
        taken: Collection[tuple[str, str, int]],
        into: MutableMapping[str, Attempt],
    ) -> None:
        """Relaunch every leaf: the daemon started if need be, every intent
        written, then the launches, asked for in order, ``IN_FLIGHT`` at a
        time, each waiting until the deadline. What became of each goes into ``into`` (by
        name) as soon as it is known: ``Relaunched``, or why not (``NotDone``,
        ``CutOff``, ``Closed``, ``MultiserverError``).

        Cancellation: ``into`` holds what was known; the launches in flight
        are abandoned (a child one of them started runs on, unrecorded but
        for its intent, which the next restore settles)."""
        try:
            client = await self._get()
        except (NotDone, MultiserverError) as exc:
            for leaf in leaves:
                into[leaf.name] = (exc, trio.current_time())
            return
        closed = await self._write_intents(client, [leaf.name for leaf in leaves])
        limit = trio.Semaphore(IN_FLIGHT)

        async def one(leaf: SessionLeaf, task_status: trio.TaskStatus[None]) -> None:
            try:
                # Nothing between here and its request's turn to be sent
                # waits (the client's send lock queues in order), so the
                # launches are asked for in the order they are started.
                task_status.started()
                try:
                    result: Relaunched | NotDone | MultiserverError = await self._launch(
                        client, leaf, hold, taken
                    )
                except (NotDone, MultiserverError) as exc:
                    result = exc
            finally:
                limit.release()
            into[leaf.name] = (result, trio.current_time())

        async with trio.open_nursery() as nursery:
            for leaf in leaves:
                if leaf.name in closed:
                    into[leaf.name] = (Closed(leaf.name), trio.current_time())
                    continue
                await limit.acquire()  # a slot frees by the deadline at the latest
                await nursery.start(one, leaf)

    async def _write_intents(self, client: Client, names: Sequence[str]) -> set[str]:
        """The intent of relaunching each of ``names`` on ``client``'s
        daemon, saved in one transaction (unless the store cannot take it).
        Returns the names no longer saved (closed meanwhile)."""
        if self._store is None or not names:
            return set()
        intent = PendingLaunch(str(client.socket_path), client.instance_id, time.time())
        wanted = set(names)
        gone: set[str] = set()

        def change(arr: Arrangement) -> Arrangement:
            gone.clear()  # run again if the store mends itself
            gone.update(wanted - {leaf.name for leaf in arr.leaves()})
            if len(gone) == len(wanted):
                return arr
            return arr.map_leaves(
                lambda leaf: (
                    attrs.evolve(leaf, pending_launch=intent) if leaf.name in wanted else leaf
                )
            )

        try:
            await trio.to_thread.run_sync(self._store.modify, change)
        except StoreError:
            return set()
        self.intent = intent
        return gone

    async def _launch(
        self,
        client: Client,
        leaf: SessionLeaf,
        hold: bool,
        taken: Collection[tuple[str, str, int]],
    ) -> Relaunched:
        self._check_time()  # a busy store, or the launches before it, may have taken it all
        cwd = leaf.cwd if os.path.isdir(leaf.cwd) else os.path.expanduser("~")
        try:
            with trio.fail_at(self._deadline.end):
                launched = await client.launch(
                    leaf.argv,
                    env=dict(os.environ if self._env is None else self._env),
                    cwd=cwd,
                    rows=leaf.rows,
                    cols=leaf.cols,
                    name=leaf.name,
                    hold=hold,
                )
        except trio.TooSlowError:
            # Its answer, if it comes, is dropped (the fd closed) by the
            # client; nothing here knows the child's id to save it.
            raise CutOff(
                f"relaunch cut off by the restore deadline ({self._deadline.seconds:g} s):"
                f" the daemon may have started it as {leaf.name!r}, unsaved (the next restore"
                " finds it)"
            ) from None
        except RequestFailed as exc:
            if exc.errno == errno.EEXIST:
                return await self._found(client, leaf, hold, taken, exc.message)
            raise MultiserverError(exc.message) from None
        self._used = True  # a session holds the client now: the caller closes it
        child = launched.child
        ref = RestorationRef(str(client.socket_path), client.instance_id, child.id, child.pid)
        new = attrs.evolve(leaf, ref=ref, cwd=cwd, pending_launch=None)
        return Relaunched(new, client, launched.master)

    async def _found(
        self,
        client: Client,
        leaf: SessionLeaf,
        hold: bool,
        taken: Collection[tuple[str, str, int]],
        refused: str,
    ) -> Relaunched:
        """The daemon has a child of the session's name: if no session refers
        to it, it is this session's own, relaunched by an earlier restore that
        could not record it (crash, store). Else the refusal stands."""
        with trio.move_on_at(self._deadline.end):
            children = await client.list()
            child = next((c for c in children if c.name == leaf.name), None)
            if child is None or (str(client.socket_path), client.instance_id, child.id) in taken:
                raise MultiserverError(refused)
            master = None
            if hold and child.state == "running":
                (claimed,) = await client.claim([child.id])
                if claimed.error is not None:
                    raise MultiserverError(f"{refused}, and {claimed.error.message}")
                master = claimed.master
            return self._taken_back(client, leaf, child, master)
        # Nothing of it was recorded; the next restore finds it again.
        raise NotDone(
            f"{refused}; not looked at by the restore deadline ({self._deadline.seconds:g} s)"
        )

    def _taken_back(
        self, client: Client, leaf: SessionLeaf, child: ChildInfo, master: int | None
    ) -> Relaunched:
        self._used = True
        ref = RestorationRef(str(client.socket_path), client.instance_id, child.id, child.pid)
        return Relaunched(attrs.evolve(leaf, ref=ref, pending_launch=None), client, master, child)

    @property
    def client(self) -> Client | None:
        return self._client

    def close_if_unused(self) -> None:
        if self._client is not None and not self._used:
            self._client.close()
