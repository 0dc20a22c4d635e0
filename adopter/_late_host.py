"""A host that answered restore after its own timeout (pure: no ssh, no store).

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

import attrs

from adopter._policy import host_orphan
from restore import (
    Arrangement,
    Decision,
    HostAnswer,
    HostChild,
    Options,
    SessionLeaf,
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
