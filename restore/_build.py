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
from collections.abc import Callable, Mapping

import attrs
import trio

from multiserver import Client, DaemonPaths, MultiserverError, RequestFailed, dial
from multiserver._paths import default_daemon_number
from restore._held import Hold, Key, live_holds
from restore._model import RestorationRef, SessionLeaf
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
    decide_timed_out,
    relaunch_notice,
)
from restore._store import ArrangementStore, StoreError


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


@attrs.frozen
class _Pending:
    leaf: SessionLeaf
    decision: Decision
    daemon: str
    attachment: DaemonAttachment | None = None
    waited: float = 0.0  # until its daemon answered (or the phase resolved)


def decide_all(
    plan: Plan, phase: PhaseResult, attach_seconds: float, options: Options
) -> list[_Pending]:
    """Every leaf of the plan, with its decision (pure). ``attach_seconds``:
    how long the phase waited for the daemons that did not answer."""
    out: list[_Pending] = [
        _Pending(leaf, decide_gone("never started", options), "") for leaf in plan.unreferenced
    ]
    for target in phase.timed_out:
        out += [
            _Pending(
                leaf, decide_timed_out(attach_seconds, options), target.socket, None, phase.elapsed
            )
            for leaf in target.leaves
        ]
    for socket, att in phase.attachments.items():
        for gone in att.gone:
            decision = decide_gone(gone.reason, options)
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
    return out


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

    Cancellation: sessions already relaunched stay running (and saved);
    the fds of the sessions built so far are closed (they were never
    returned) and the relaunch connection too, which gives those children
    back to their daemon; fds not yet handed over are closed by their
    attachments' owners.

    The deadline is no cancellation of the build, only of the answer it
    waits for. A launch it cut off may have started its child: that child
    is the daemon's and keeps running, unsaved (held by the relaunch
    connection until that closes, then detached, until a sweep adopts it as
    an orphan; the daemon knows it by the session's name). That session is
    ``failed``, says so, names the relaunch daemon, and its saved leaf is
    left as it was (its earlier ref), never half-written.
    """
    pending = spare_held(decide_all(plan, phase, deadline.attach_seconds, options), live_holds())
    avoid = {t.socket for t in phase.timed_out}
    relauncher = _Relauncher(relaunch_daemon(avoid), nursery, deadline, env)
    results: list[RestoredSession] = []
    try:
        for p in pending:
            session = await _carry_out(p, relauncher, store, hold, deadline)
            results.append(session)
            if progress is not None:
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
    p: _Pending,
    relauncher: _Relauncher,
    store: ArrangementStore | None,
    hold: bool,
    deadline: RestoreDeadline,
) -> RestoredSession:
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
    if d.collect and att is not None and att.client is not None:
        result = att.claimed[leaf.name]
        assert result.child is not None
        session.exit_code = result.child.exit_code
        with trio.move_on_at(deadline.end) as scope, contextlib.suppress(MultiserverError):
            await att.client.collect(result.child.id)
        if scope.cancelled_caught:
            session.detail += (
                f"; not collected by the restore deadline ({deadline.seconds:g} s):"
                " the daemon keeps it until a sweep collects it"
            )
    if d.close and store is not None:
        await _save(session, _durable_close, store, leaf.name)
    if d.relaunch:
        try:
            launched_leaf, master, client = await relauncher.launch(leaf, hold=hold)
        except _CutOff as exc:
            # Its child may run on the relaunch daemon: that is where to look.
            session.outcome, session.daemon = "failed", str(relauncher.paths.socket)
            session.detail = f"{d.detail}; {exc}"
        except _NotDone as exc:
            session.outcome = "failed"
            session.detail = f"{d.detail}; {exc}"
        except MultiserverError as exc:
            session.outcome = "failed"
            session.detail = f"{d.detail}; relaunch failed: {exc}"
        else:
            notice = relaunch_notice(leaf, d.reason or d.detail)
            session.leaf = attrs.evolve(launched_leaf, notice=notice)
            session.master, session.client, session.replay = master, client, notice
            session.daemon = str(relauncher.paths.socket)
            if store is not None:
                await _save(session, store.update_session, session.leaf)
    session.elapsed = p.waited + (trio.current_time() - t0)
    return session


async def _save(session: RestoredSession, change: Callable[..., None], *args: object) -> None:
    """One change to the store, in a thread. A store that cannot take it (a
    newer schema is read-only, busy past its timeout, the leaf removed
    meanwhile) costs the session nothing: the detail says it was not saved."""
    try:
        await trio.to_thread.run_sync(change, *args)
    except KeyError:
        session.detail += "; not saved: the session is no longer in the saved arrangement"
    except StoreError as exc:
        session.detail += f"; not saved: {exc}"


def _durable_close(store: ArrangementStore, name: str) -> None:
    store.stage_close(name)
    store.complete_close(name)


class _NotDone(Exception):
    """A relaunch the restore's deadline left no time for: nothing was
    asked of the relaunch daemon. The message is the whole reason."""


class _CutOff(_NotDone):
    """A launch the restore's deadline cut off after it was asked for: the
    daemon may have started the child."""


class _Relauncher:
    """One connection to the daemon that relaunched sessions start on,
    started on first use; a failure to reach it is remembered, so it is
    waited for once, not once per session. Starting it and every launch
    wait until the restore's deadline, which they share."""

    def __init__(
        self,
        paths: DaemonPaths,
        nursery: trio.Nursery,
        deadline: RestoreDeadline,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.paths = paths
        self._env = env
        self._nursery = nursery
        self._deadline = deadline
        self._client: Client | None = None
        self._error: Exception | None = None
        self._used = False

    def _check_time(self) -> None:
        if trio.current_time() >= self._deadline.end:
            raise _NotDone(
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
                self._error = _NotDone(
                    f"relaunch not done: daemon {self.paths.socket} did not start"
                    f" by the restore deadline ({self._deadline.seconds:g} s)"
                )
                raise self._error from None
            except MultiserverError as exc:
                self._error = exc
                raise
            self._client.start(self._nursery)
        return self._client

    async def launch(
        self, leaf: SessionLeaf, *, hold: bool
    ) -> tuple[SessionLeaf, int | None, Client]:
        client = await self._get()
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
            raise _CutOff(
                f"relaunch cut off by the restore deadline ({self._deadline.seconds:g} s):"
                f" the daemon may have started it as {leaf.name!r}, unsaved (a sweep adopts it)"
            ) from None
        except RequestFailed as exc:
            raise MultiserverError(exc.message) from None
        self._used = True  # a session holds the client now: the caller closes it
        child = launched.child
        ref = RestorationRef(str(client.socket_path), client.instance_id, child.id, child.pid)
        return attrs.evolve(leaf, ref=ref, cwd=cwd), launched.master, client

    @property
    def client(self) -> Client | None:
        return self._client

    def close_if_unused(self) -> None:
        if self._client is not None and not self._used:
            self._client.close()
