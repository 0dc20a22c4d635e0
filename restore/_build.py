"""Building sessions, only after the partial attach phase has resolved: each
leaf gets exactly one outcome (see ``_plan``), decided synchronously from what
the phase delivered; then the side effects run: collect ended children,
relaunch on a live daemon (never the wedged one), and keep the saved
arrangement current in one transaction per change.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import attrs
import trio

from multiserver import Client, DaemonPaths, MultiserverError, RequestFailed, dial
from multiserver._paths import default_daemon_number
from restore._model import RestorationRef, SessionLeaf
from restore._partial import DaemonAttachment, PhaseResult
from restore._plan import (
    ClaimAnswer,
    Decision,
    Options,
    Outcome,
    Plan,
    decide_claimed,
    decide_gone,
    decide_timed_out,
    relaunch_notice,
)
from restore._store import ArrangementStore


@attrs.define
class RestoredSession:
    """One leaf's outcome. With ``master`` set, the caller owns that fd and
    ``client`` is the connection that holds the child (keep it open while you
    use the fd). ``replay`` is what to show before the live output."""

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


def decide_all(plan: Plan, phase: PhaseResult, timeout: float, options: Options) -> list[_Pending]:
    """Every leaf of the plan, with its decision (pure)."""
    out: list[_Pending] = [
        _Pending(leaf, decide_gone("never started", options), "") for leaf in plan.unreferenced
    ]
    for target in phase.timed_out:
        out += [
            _Pending(leaf, decide_timed_out(timeout, options), target.socket)
            for leaf in target.leaves
        ]
    for socket, att in phase.attachments.items():
        for gone in att.gone:
            out.append(_Pending(gone.leaf, decide_gone(gone.reason, options), socket, att))
        by_name = {leaf.name: leaf for leaf in att.target.leaves}
        for name, result in att.claimed.items():
            answer = ClaimAnswer(
                result.child,
                result.error.errno if result.error else 0,
                result.error.message if result.error else "",
            )
            out.append(_Pending(by_name[name], decide_claimed(answer, options), socket, att))
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
    timeout: float,
    options: Options,
    nursery: trio.Nursery,
    store: ArrangementStore | None,
    hold: bool,
    progress: Callable[[RestoredSession], None] | None = None,
    started: float = 0.0,
) -> list[RestoredSession]:
    """Give every leaf its outcome and carry it out.

    ``hold``: relaunched sessions come back with their master fd (an app that
    shows them); else they are launched detached. Claimed fds of attached
    sessions are handed over either way (close them if unused).

    Cancellation: sessions already relaunched stay running (and saved);
    fds not yet handed over are closed by their attachments' owners.
    """
    pending = decide_all(plan, phase, timeout, options)
    avoid = {t.socket for t in phase.timed_out}
    relauncher = _Relauncher(relaunch_daemon(avoid), nursery, timeout)
    results: list[RestoredSession] = []
    try:
        for p in pending:
            session = await _carry_out(p, relauncher, store, hold, started)
            results.append(session)
            if progress is not None:
                progress(session)
    finally:
        relauncher.close_if_unused()
    return results


async def _carry_out(
    p: _Pending, relauncher: _Relauncher, store: ArrangementStore | None, hold: bool, started: float
) -> RestoredSession:
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
        with contextlib.suppress(MultiserverError):
            await att.client.collect(result.child.id)
    if d.close and store is not None:
        await trio.to_thread.run_sync(_durable_close, store, leaf.name)
    if d.relaunch:
        try:
            launched_leaf, master, client = await relauncher.launch(leaf, hold=hold)
        except MultiserverError as exc:
            session.outcome = "failed"
            session.detail = f"{d.detail}; relaunch failed: {exc}"
        else:
            notice = relaunch_notice(leaf, d.detail)
            session.leaf = attrs.evolve(launched_leaf, notice=notice)
            session.master, session.client, session.replay = master, client, notice
            session.daemon = str(relauncher.paths.socket)
            if store is not None:
                await trio.to_thread.run_sync(store.update_session, session.leaf)
    session.elapsed = trio.current_time() - started
    return session


def _durable_close(store: ArrangementStore, name: str) -> None:
    store.stage_close(name)
    store.complete_close(name)


class _Relauncher:
    """One connection to the daemon that relaunched sessions start on,
    started on first use; a failure to reach it is remembered."""

    def __init__(self, paths: DaemonPaths, nursery: trio.Nursery, timeout: float) -> None:
        self.paths = paths
        self._nursery = nursery
        self._timeout = timeout
        self._client: Client | None = None
        self._error: MultiserverError | None = None
        self._used = False

    async def _get(self) -> Client:
        if self._error is not None:
            raise self._error
        if self._client is None:
            try:
                with trio.fail_after(self._timeout):
                    self._client = await dial(self.paths, start=True)
            except trio.TooSlowError:
                self._error = MultiserverError(
                    f"daemon {self.paths.socket} did not start within {self._timeout:g} s"
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
        self._used = True
        cwd = leaf.cwd if os.path.isdir(leaf.cwd) else os.path.expanduser("~")
        try:
            with trio.fail_after(self._timeout):
                launched = await client.launch(
                    leaf.argv,
                    env=dict(os.environ),
                    cwd=cwd,
                    rows=leaf.rows,
                    cols=leaf.cols,
                    name=leaf.name,
                    hold=hold,
                )
        except trio.TooSlowError:
            raise MultiserverError(f"launch did not answer within {self._timeout:g} s") from None
        except RequestFailed as exc:
            raise MultiserverError(exc.message) from None
        child = launched.child
        ref = RestorationRef(str(client.socket_path), client.instance_id, child.id, child.pid)
        return attrs.evolve(leaf, ref=ref, cwd=cwd), launched.master, client

    @property
    def client(self) -> Client | None:
        return self._client

    def close_if_unused(self) -> None:
        if self._client is not None and not self._used:
            self._client.close()
