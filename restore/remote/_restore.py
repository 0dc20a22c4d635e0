"""The restore's part for sessions on other hosts, on trio, under the
restore's one deadline.

A session made with ``new --host H`` is saved as ``H:NAME`` (its ``host``,
and a ``ref`` to the remote daemon's child). Every host that has saved
sessions is asked at once (its ``ls --json`` over ssh, in batch mode),
while the local daemons are: one host that is down or silent never holds
up the others, nor the local sessions. What each session becomes is
``decide_remote``'s rule: running there (attached), deferred (the host
needs a credential: not asked at login, where nobody types a
passphrase), gone (started again there in its saved cwd, with the marker
at its first attach), failed, timed out.

Each host has its own bound: its ``timeout`` from the restore's start, the
deadline at most. A host that has not answered by then has its sessions
reported timed out, but its question is not abandoned: it runs on until
the deadline, and an answer by then is handed to
``on_late`` as a HostAttachment, as a local daemon's late partial attach
is (the adopter takes both, ``adopter.adopt_late``)::

    start ──ask every host (nursery)──▶ answered by its bound? ── yes ─▶ decide, carry out
                                            │ no
                                            ▼
                              timed out now; asked on until the deadline
                                            │ answered
                                            ▼
                                  on_late(HostAttachment)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs
import trio

from multiserver.internal import replaced
from restore._build import RestoredSession
from restore._plan import (
    Decision,
    HostAnswer,
    Options,
    Outcome,
    RestoreDeadline,
    decide_remote,
)
from restore.remote._answers import (
    LS,
    failed_answer,
    host_answer,
    leaf_there,
    start_request,
    started_again,
)
from restore.remote._errors import HostFailure, HostsFileError
from restore.remote._hosts import Host, load_hosts, save_hosts
from restore.remote._ssh import remote_json_async, run_remote_async, succeeded
from restore.store._errors import StoreError
from restore.store._model import RestorationRef, SessionLeaf
from restore.store._store import ArrangementStore


class SessionSaver(Protocol):
    """Where a session's new state is saved (an ArrangementStore, an
    adopter's sink)."""

    def update_session(self, leaf: SessionLeaf) -> None:
        """Replace the saved session of ``leaf``'s name; KeyError if none."""
        ...


@attrs.frozen
class HostAttachment:
    """A host's answer that came after its own bound, before the
    restore's deadline: what the adopter needs to take it on (the
    answer, when it came, and the restore's options and deadline)."""

    host: Host
    answer: HostAnswer
    elapsed: float  # seconds from the restore's start
    options: Options
    until: float  # the restore's deadline, on trio's clock

    def close(self) -> None:
        """Nothing to give back: a host's answer holds no child here."""


async def ask_host_async(host: Host) -> HostAnswer:
    """``host``'s sessions, or why not (a deferred host is not asked).

    Cancellation: ssh is killed; nothing is left behind."""
    if host.needs_credential:
        return HostAnswer("credential", host.name)
    try:
        return host_answer(host.name, await remote_json_async(host, LS))
    except HostFailure as exc:
        return failed_answer(exc)


async def start_there_async(host: Host, leaf: SessionLeaf, why: str) -> SessionLeaf:
    """``leaf`` (a session of ``host`` that is gone there) started again
    there in its saved cwd (``start_request``: with what the host saved of
    its screen, then the marker and ``why``): its new ref there.
    HostFailure if it could not be.

    Cancellation: a session may have been started there, not saved here;
    the next restore finds it there under its name and takes it as the
    session (``decide_remote``)."""
    name = leaf.name.rpartition(":")[2]
    succeeded(
        host, await run_remote_async(host, start_request(host, name, leaf.argv, leaf.cwd, why))
    )
    return leaf_there(host, name, await remote_json_async(host, LS))


def _saved(store: SessionSaver | None, leaf: SessionLeaf, detail: str) -> str:
    """``leaf`` saved; ``detail``, with what could not be."""
    if store is None:
        return detail
    try:
        store.update_session(leaf)
    except (StoreError, KeyError) as exc:
        return f"{detail}; not saved: {exc}"
    return detail


def followed(leaf: SessionLeaf, answer: HostAnswer) -> SessionLeaf:
    """``leaf`` pointed at its host's session of its name, if that is not
    the saved child (``decide_remote`` took it as the session)."""
    name = leaf.name.rpartition(":")[2]
    for found in answer.children:
        if found.via is None and found.child.name == name:
            ref = RestorationRef(found.socket, found.instance_id, found.child.id, found.child.pid)
            return leaf if leaf.ref == ref else attrs.evolve(leaf, ref=ref)
    return leaf


@attrs.frozen
class Carried:
    """A session's decision carried out: the leaf as it is now, its outcome
    (``failed`` where a relaunch could not be done) and the detail."""

    leaf: SessionLeaf
    outcome: Outcome
    detail: str


async def carry_out(
    host: Host,
    leaf: SessionLeaf,
    d: Decision,
    answer: HostAnswer,
    store: SessionSaver | None,
    *,
    step: float,
    until: float,
) -> Carried:
    """``d`` done: a session gone there started again (each ssh call
    within ``step`` seconds, and by ``until`` on trio's clock), one found
    there under its name saved as its child there (the detail says what
    could not be saved).

    Cancellation: as ``start_there_async``."""
    if not d.relaunch:
        moved = followed(leaf, answer)
        detail = d.detail if moved is leaf else _saved(store, moved, d.detail)
        return Carried(moved, d.outcome, detail)
    if trio.current_time() >= until:
        return Carried(leaf, "failed", f"{d.detail}; not started: the restore's deadline")
    try:
        with trio.fail_at(min(trio.current_time() + step, until)):
            made = await start_there_async(host, leaf, d.reason or d.detail)
    except trio.TooSlowError:
        why = f"{host.name}: no answer within {step:.3g} s"
        return Carried(leaf, "failed", f"{d.detail}; relaunch failed: {why}")
    except HostFailure as exc:
        return Carried(leaf, "failed", f"{d.detail}; relaunch failed: {exc}")
    new = started_again(leaf, made)
    return Carried(new, d.outcome, _saved(store, new, d.detail))


def remember_credential(asked: Host) -> None:
    """Host ``asked`` needs a credential: remembered, so that the next
    login defers it at once (a hosts file that cannot be written costs
    only that). The flag belongs to the destination that asked for one:
    a host given a new destination meanwhile (``host add --replace``)
    is left as it is now, else every later login would defer it."""
    with contextlib.suppress(HostsFileError):
        hosts = load_hosts()
        now = hosts.get(asked.name)
        if now is not None and now.dest == asked.dest and not now.needs_credential:
            hosts[asked.name] = replaced(now, needs_credential=True)
            save_hosts(hosts)


@attrs.define
class _Question:
    """One host's question, asked until the deadline. ``restore_hosts``
    waits for its answer until ``bound``; from then on (``late``) the
    answer goes to ``on_late``."""

    host: Host
    leaves: list[SessionLeaf]
    bound: float
    answer: HostAnswer | None = None
    elapsed: float = 0.0
    answered: trio.Event = attrs.Factory(trio.Event)
    late: bool = False


async def restore_hosts(
    leaves: Sequence[SessionLeaf],
    *,
    deadline: RestoreDeadline,
    options: Options,
    store: ArrangementStore | None,
    on_late: Callable[[HostAttachment], None],
    progress: Callable[[RestoredSession], None] | None = None,
) -> list[RestoredSession]:
    """Every saved session on another host (``leaf.host``), host by host
    at once: an outcome each, in ``leaves``' order. Returns once every
    host has answered, or at the deadline (store writes aside); a host's
    answer after its own bound goes to ``on_late`` meanwhile. See the
    module's docstring.

    Cancellation: every ssh is killed; a relaunch cut short is as
    ``start_there_async`` says.
    """
    try:
        hosts = load_hosts()
    except HostsFileError as exc:
        return [_row(leaf, "failed", str(exc), 0.0) for leaf in leaves]
    by_host: dict[str, list[SessionLeaf]] = {}
    for leaf in leaves:
        assert leaf.host is not None
        by_host.setdefault(leaf.host, []).append(leaf)
    rows: dict[str, RestoredSession] = {}

    def done(row: RestoredSession) -> None:
        rows[row.leaf.name] = row
        if progress is not None:
            progress(row)

    async with trio.open_nursery() as nursery:
        for name, its in by_host.items():
            host = hosts.get(name)
            if host is None:
                for leaf in its:
                    done(_row(leaf, "failed", f"no host named {name} any more", 0.0))
                continue
            q = _Question(host, its, min(deadline.start + host.timeout, deadline.end))
            nursery.start_soon(_ask, q, deadline, options, on_late)
            nursery.start_soon(_settle, q, deadline, options, store, done)
    return [rows[leaf.name] for leaf in leaves]


async def _ask(
    q: _Question,
    deadline: RestoreDeadline,
    options: Options,
    on_late: Callable[[HostAttachment], None],
) -> None:
    """Ask ``q``'s host until the deadline; the answer to ``_settle``, or,
    once ``q`` is late, to ``on_late``."""
    with trio.move_on_at(deadline.end):
        answer = await ask_host_async(q.host)
        if answer.kind == "credential" and not q.host.needs_credential:
            remember_credential(q.host)
        q.answer, q.elapsed = answer, trio.current_time() - deadline.start
        if q.late:
            on_late(HostAttachment(q.host, answer, q.elapsed, options, deadline.end))
        else:
            q.answered.set()


async def _settle(
    q: _Question,
    deadline: RestoreDeadline,
    options: Options,
    store: ArrangementStore | None,
    done: Callable[[RestoredSession], None],
) -> None:
    """The outcome of each of ``q``'s sessions: from its host's answer by
    ``q.bound``, carried out; else timed out (the question runs on)."""
    with trio.move_on_at(q.bound):
        await q.answered.wait()
    if q.answer is None:
        q.late = True
        waited = trio.current_time() - deadline.start
        within = f"{q.host.name}: no answer within {q.bound - deadline.start:.3g} s"
        silent = HostAnswer("silent", q.host.name, why=within)
        for leaf in q.leaves:
            d = decide_remote(leaf, silent, options)
            done(
                _row(leaf, d.outcome, f"{d.detail}; asked on until the restore's deadline", waited)
            )
        return
    for leaf in q.leaves:
        t0 = trio.current_time()
        d = decide_remote(leaf, q.answer, options)
        c = await carry_out(
            q.host, leaf, d, q.answer, store, step=q.host.timeout, until=deadline.end
        )
        done(_row(c.leaf, c.outcome, c.detail, q.elapsed + trio.current_time() - t0))


def _row(leaf: SessionLeaf, outcome: Outcome, detail: str, seconds: float) -> RestoredSession:
    return RestoredSession(leaf, outcome, detail, leaf.host or "", seconds)
