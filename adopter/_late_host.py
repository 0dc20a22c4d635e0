"""A host that answered restore after its own timeout: what it makes of
its sessions (``late_host``, pure), and that carried out
(``adopt_late_host``).

Restore asks each host for its sessions under the host's timeout; at that
timeout its sessions are reported timed out, but the question runs on until
the restore's deadline. An answer that comes in between is a late arrival,
like a local daemon's late partial attach (``adopt_late``), and what it
makes of each thing is stated here:

    a saved session of the host, that the answer shows running with the
    leaf's child (same daemon instance and child id) ──> found: kept as it is
    a saved session of the host, gone there ──────────> what an answer in time
                                                          makes it (decide_remote):
                                                          started again there, with
                                                          its marker
    a running session there that no leaf references ──> adopted as HOST:NAME into
    (``host_orphan``)                                     the orphans window

A host that failed or needs a credential after its timeout gives each of
its saved sessions that outcome; one that never answered gives nothing
(its sessions were reported timed out already).
"""

from __future__ import annotations

import math

import attrs

from adopter._adopt import OrphanSink
from adopter._policy import host_orphan
from adopter._sweep import SweepRow
from restore import (
    Arrangement,
    Decision,
    HostAnswer,
    HostAttachment,
    HostChild,
    Options,
    SessionLeaf,
    StoreError,
    carry_out,
    decide_remote,
)


@attrs.frozen
class LateHost:
    """What a late answer of a host makes of its saved sessions (each with
    the decision an answer in time would have had) and of its sessions that
    nobody saved (``adopt``)."""

    saved: list[tuple[SessionLeaf, Decision]]
    adopt: list[HostChild]


def late_host(
    arrangement: Arrangement, host: str, answer: HostAnswer, options: Options
) -> LateHost:
    """What ``host``'s late ``answer`` makes of the saved ``arrangement``'s
    sessions there and of its own."""
    if answer.kind == "silent":
        return LateHost([], [])
    saved = [
        (leaf, decide_remote(leaf, answer, options))
        for leaf in arrangement.leaves()
        if leaf.host == host
    ]
    adopt = [c for c in answer.children if host_orphan(c, host, arrangement) is None]
    return LateHost(saved, adopt)


async def adopt_late_host(att: HostAttachment, sink: OrphanSink) -> list[SweepRow]:
    """A host's answer that came after its timeout (``att``), taken on: its
    saved sessions running there are found (kept as they are), those gone
    there started again there by the restore's deadline, and its running
    sessions that no leaf references adopted as ``HOST:NAME`` into the
    orphans window, each in one transaction that refuses a child some leaf
    references by then. A row each, state ``late``.

    Cancellation: a relaunch cut short may have started its session there,
    unsaved here (the next restore takes it as the session); adoptions
    recorded so far stay recorded.
    """
    host = att.host

    def row(socket: str, action: str, name: str, detail: str) -> SweepRow:
        detail = f"answered after {att.elapsed:.1f} s; {detail}"
        return SweepRow(f"{host.name}:{socket}", "late", action, name=name, detail=detail)

    rows: list[SweepRow] = []
    try:
        plan = late_host(sink.arrangement(), host.name, att.answer, att.options)
        for leaf, d in plan.saved:
            # No step bound but the deadline's: the host has shown it takes
            # longer than its timeout.
            done = await carry_out(host, leaf, d, att.answer, sink, step=math.inf, until=att.until)
            sock = done.leaf.ref.socket if done.leaf.ref is not None else ""
            if d.outcome == "attached":
                rows.append(row(sock, "found", leaf.name, f"{done.detail}: kept as it is"))
            else:
                rows.append(row(sock, done.outcome, leaf.name, done.detail))
        for found in plan.adopt:
            c = found.child
            try:
                made = sink.record_host(host.name, found)
            except StoreError as exc:
                rows.append(row(found.socket, "retry", c.name, f"not recorded: {exc}"))
                continue
            if made is None:
                rows.append(row(found.socket, "skipped", c.name, f"{c.name} is saved by now"))
            else:
                rows.append(
                    row(found.socket, "adopted", made.name, f"pid {c.pid}: {' '.join(c.argv)}")
                )
    except StoreError as exc:
        rows.append(row("", "retry", "", f"the saved arrangement cannot be used: {exc}"))
    return rows
