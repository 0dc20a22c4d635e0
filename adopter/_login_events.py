"""What the login procedure (``_login``) tells its reader: one frozen
event per step, in the order the steps come, and the report it ends with.
Pure: no I/O, no trio.

The steps, and the event each gives::

    the restore lock    WaitingForLock (once, when another restore holds
                        it), then LockTaken, or LockTimedOut (the last event)
    the store           StoreWarning (a damaged file moved aside),
                        StoreUnavailable (the last event), Warned (the lines
                        of the caller's ``before_restore``)
    the restore         Restoring, Arrived (a daemon each, as it answers),
                        SessionRestored (a session each, as it is built)
    after it            LateAdopted (a late arrival each); ClaimsReleased
                        (every claim given back) and Swept, in either
                        order; ReportNotKept
    the end             Done (the last event)

A restore that waited for another one, which ran meanwhile and left its
report, gives WaitingForLock, LockTaken and Done with that report
(``ran_here=False``), and restores nothing.

An event holds values, never what the procedure owns (a connection, an
fd): the reader may look at it after the step is over.
"""

from __future__ import annotations

from typing import Any

import attrs
import cattrs

from adopter._sweep import SweepRow
from multiserver import MultiserverError
from restore import (
    Arrangement,
    DaemonAttachment,
    Outcome,
    RestoredSession,
    RestoreResult,
    StoreError,
)

# --- the report -----------------------------------------------------------------------------


@attrs.frozen
class SessionRow:
    """A restored session as the report keeps it (``--json`` prints it so)."""

    name: str
    outcome: Outcome
    daemon: str
    detail: str
    exit_code: int | None
    seconds: float  # its own time (``RestoredSession.elapsed``)

    @classmethod
    def of(cls, s: RestoredSession) -> SessionRow:
        return cls(s.leaf.name, s.outcome, s.daemon, s.detail, s.exit_code, round(s.elapsed, 4))


@attrs.frozen
class LoginReport:
    """What a login did: a row for each saved session, the rows of the late
    arrivals and of the sweep that did something, how long it took; ``ok``
    when no session failed, ``saved`` when the store took every change.
    Its JSON (``as_json``) is what ``multiserver restore --json`` prints
    and what a restore that waited reads back."""

    sessions: tuple[SessionRow, ...]
    sweep: tuple[SweepRow, ...]
    seconds: float
    ok: bool
    saved: bool = True

    @classmethod
    def of(cls, result: RestoreResult, rows: list[SweepRow]) -> LoginReport:
        return cls(
            sessions=tuple(SessionRow.of(s) for s in result.sessions),
            sweep=tuple(r for r in rows if r.action != "none"),
            seconds=round(result.elapsed, 4),
            ok=result.ok,
            saved=result.saved,
        )

    def as_json(self) -> dict[str, Any]:
        return _converter.unstructure(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: object) -> LoginReport | None:
        """The report in ``data`` (as ``as_json`` gives it, unknown keys
        ignored), or None if it is none."""
        try:
            return _converter.structure(data, cls)
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError):
            return None


# The report's own: unknown keys tolerated (a newer multiserver may add some).
_converter = cattrs.Converter(forbid_extra_keys=False)


# --- the events, step by step ------------------------------------------------------------


@attrs.frozen
class WaitingForLock:
    """Another restore holds the restore lock; this one waits for it
    (within its timeout). Said once."""

    holder: int | None  # its pid, if it could be read


@attrs.frozen
class LockTaken:
    waited: bool  # another restore held it first


@attrs.frozen
class LockTimedOut:
    """The other restore still held the lock at the timeout: nothing was
    restored (the other one brings the sessions back). The last event."""

    holder: int | None
    timeout: float


@attrs.frozen
class StoreWarning:
    """A line for a person from the store: a damaged file moved aside,
    and what was kept of it."""

    text: str


@attrs.frozen
class StoreUnavailable:
    """The saved arrangement cannot be used: nothing was restored. The
    last event."""

    error: StoreError | MultiserverError | OSError


@attrs.frozen
class Warned:
    """A line for a person from the caller's ``before_restore``."""

    text: str


@attrs.frozen
class Restoring:
    """What is about to be restored, and within how long: ``sessions`` of
    this machine's on ``daemons`` daemons, and ``remote`` sessions of
    ``hosts`` other hosts."""

    sessions: int
    daemons: int
    remote: int
    hosts: int
    timeout: float

    @classmethod
    def of(cls, arrangement: Arrangement, timeout: float) -> Restoring:
        local = [leaf for leaf in arrangement.leaves() if leaf.host is None]
        remote = [leaf for leaf in arrangement.leaves() if leaf.host is not None]
        daemons = {leaf.ref.socket for leaf in local if leaf.ref is not None}
        hosts = {leaf.host for leaf in remote}
        return cls(len(local), len(daemons), len(remote), len(hosts), timeout)


@attrs.frozen
class Arrived:
    """A daemon's partial attach arrived in time, while the restore still
    waits for the others: answered in ``elapsed`` seconds (``error``: then
    failed), or not reached (``error`` says why)."""

    socket: str
    sessions: int
    elapsed: float
    reached: bool
    error: str | None

    @classmethod
    def of(cls, att: DaemonAttachment) -> Arrived:
        if att.client is None:  # every leaf has the same reason
            why = att.gone[0].reason if att.gone else (att.error or "not reached")
            return cls(att.target.socket, len(att.target.leaves), att.elapsed, False, why)
        return cls(att.target.socket, len(att.target.leaves), att.elapsed, True, att.error)


@attrs.frozen
class SessionRestored:
    """A session built: its outcome (one for each saved session)."""

    row: SessionRow


@attrs.frozen
class LateAdopted:
    """A late arrival (a daemon's partial attach or a host's answer after
    its time) taken on by the adopter once every session was built."""

    rows: tuple[SweepRow, ...]


@attrs.frozen
class ClaimsReleased:
    """Every claim given back: the sessions are their daemons' again, so
    ``multiserver attach NAME`` (or the app) takes them."""


@attrs.frozen
class Swept:
    """The sweep after the restore: every row, those that did nothing too."""

    rows: tuple[SweepRow, ...]


@attrs.frozen
class ReportNotKept:
    """The report could not be left for a restore that waits (which then
    restores again itself)."""

    error: OSError


@attrs.frozen
class Done:
    """The last event of a login that restored: ``report``, made here
    (``ran_here``) or by another restore that ran while this one waited."""

    report: LoginReport
    ran_here: bool


LoginEvent = (
    WaitingForLock
    | LockTaken
    | LockTimedOut
    | StoreWarning
    | StoreUnavailable
    | Warned
    | Restoring
    | Arrived
    | SessionRestored
    | LateAdopted
    | ClaimsReleased
    | Swept
    | ReportNotKept
    | Done
)
