"""What a host's answers mean (pure: no ssh, no store).

A host is asked with its own ``multiserver ls --json``, whose one schema
is ``_listing``'s (``listing_of``: a listing, or the HostFailure that says
what is wrong with it, in one line); its rows become ChildInfo
(``listed_child``), the command line's rows (``remote_sessions``) or the
restore's HostAnswer (``host_answer``), and a failure to ask becomes the
HostAnswer of its kind (``failed_answer``). A session is made there with
``new --relaunch`` (``start_request``: its answer is its exit status
alone) and saved here from the row its host lists for it
(``leaf_there``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from multiserver import ChildInfo
from restore._plan import HostAnswer, HostChild
from restore.remote._errors import HostFailure
from restore.remote._hosts import Host
from restore.remote._listing import ListedSession, ListingError, ListingTooNew, listing_from
from restore.store._model import RestorationRef, SessionLeaf

LS = ("ls", "--json")


@attrs.frozen
class RemoteSession:
    """A running session of a host, as its ``ls --json`` gave it (``row``)."""

    host: str
    child: ChildInfo
    waiting: tuple[int, int] | None
    row: ListedSession


def listing_of(host: str, got: object) -> list[ListedSession]:
    """``host``'s answer to ``ls --json`` (its JSON, decoded) as a listing;
    HostFailure if it is none: ``garbage`` (what is wrong, and where), or
    ``error`` for a host newer than this side reads."""
    try:
        return listing_from(got)
    except ListingTooNew as exc:
        raise HostFailure(host, "error", f"{host}: {exc}") from None
    except ListingError as exc:
        raise HostFailure(host, "garbage", f"{host}: answered garbage ({exc})") from None


def listed_child(row: ListedSession, name: str) -> ChildInfo:
    """A running session of a host's listing (``row.id`` set: the reader
    saw to its live fields) as a ChildInfo called ``name`` (``HOST:NAME``
    for ``ls`` here, its own name for the adopter)."""
    assert row.id is not None and row.pid is not None and row.started_at is not None
    return ChildInfo(
        id=row.id,
        pid=row.pid,
        name=name,
        argv=list(row.argv),
        cwd=row.cwd,
        tty=row.tty or "",
        rows=0,
        cols=0,
        state="exited" if row.state == "exited" else "running",
        exit_code=row.exit_code,
        held=row.held,
        holders=row.holders,
        watchers=row.watchers,
        buffered_bytes=row.buffered_bytes,
        dropped_bytes=row.dropped_bytes,
        started_at=row.started_at,
        exited_at=row.exited_at,
        linger=row.linger,
    )


def remote_sessions(host: str, rows: Sequence[ListedSession]) -> list[RemoteSession]:
    """The running sessions of ``host``'s listing, for ``ls`` here, each
    as ``HOST:NAME``. A row saved there with no live child is left out:
    nothing of it runs to reach."""
    return [
        RemoteSession(
            host,
            listed_child(row, f"{host}:{row.name}"),
            None if row.held else (row.waiting_bytes, row.waiting_dropped_bytes),
            row,
        )
        for row in rows
        if row.id is not None
    ]


def host_answer(host: str, got: object) -> HostAnswer:
    """A host's ``ls --json`` answer, for the restore: its own sessions by
    name, and every running one as a whole (for the adopter). Sessions saved
    there with no live child are passed over; an answer that is no listing
    is ``failed``, whatever it holds (a row passed over would be a session
    started again beside its own)."""
    try:
        rows = listing_of(host, got)
    except HostFailure as exc:
        return failed_answer(exc)
    sessions: dict[str, tuple[str, int, int, str, int | None]] = {}
    children: list[HostChild] = []
    for row in rows:
        if row.id is None:
            continue
        assert row.pid is not None and row.socket is not None
        assert row.daemon_instance is not None
        if row.host is None:  # its own sessions, not its hosts'
            sessions[row.name] = (row.daemon_instance, row.id, row.pid, row.state, row.exit_code)
        child = listed_child(row, row.name)
        children.append(HostChild(row.socket, row.daemon_instance, child, via=row.host))
    return HostAnswer("listed", host, sessions, children=tuple(children))


def failed_answer(failure: HostFailure) -> HostAnswer:
    """A host that could not be asked, as the restore takes it: one that
    needs a credential is deferred, a silent one timed out, the rest
    failed."""
    if failure.kind == "credential":
        return HostAnswer("credential", failure.host, why=str(failure))
    if failure.kind == "silent":
        return HostAnswer("silent", failure.host, why=str(failure))
    return HostAnswer("failed", failure.host, why=str(failure))


def start_request(host: Host, name: str, argv: Sequence[str], cwd: str, why: str) -> list[str]:
    """Session ``name``, gone from ``host``, started again there in ``cwd``
    with its grace window as linger (``new --relaunch WHY``, which is ``-A
    -d``): a session of that name running there is taken as it; one the
    host saved, not running (the host rebooted: its store still names it)
    starts again keeping what the host saved of its screen; either way its
    first attach there shows that screen, then the marker and ``why``."""
    remote = ["new", "--relaunch", why, "-d", "-n", name, "--cwd", cwd]
    if host.grace is not None:
        remote += ["--linger", f"{host.grace:g}"]
    if argv:
        remote += ["--", *argv]
    return remote


def leaf_there(host: Host, name: str, got: object) -> SessionLeaf:
    """The saved session ``HOST:NAME`` of a session just made on ``host``,
    from its ``ls --json`` (``got``): its command and cwd as the host has
    them, and a ref to its child there. HostFailure if the host does not
    list it running, or answers no listing."""
    for row in listing_of(host.name, got):
        if row.name == name and row.host is None and row.id is not None:
            assert row.socket is not None and row.daemon_instance is not None
            assert row.pid is not None
            return SessionLeaf(
                f"{host.name}:{name}",
                list(row.argv),
                row.cwd or "/",
                ref=RestorationRef(row.socket, row.daemon_instance, row.id, row.pid),
                host=host.name,
                created_at=time.time(),
            )
    raise HostFailure(host.name, "error", f"{host.name}: no session {name} there after starting it")


def started_again(leaf: SessionLeaf, made: SessionLeaf) -> SessionLeaf:
    """``leaf`` as it is saved once started again on its host: the child
    there that ``made`` (``leaf_there``) names, nothing of the old run's
    scrollback or exit. Its notice is the host's to show (``start_request``:
    the host saved the screen, and the attach there replays it before the
    marker); one here that nobody saw yet stays, shown first."""
    return attrs.evolve(leaf, ref=made.ref, scrollback=None, exit_code=None)
