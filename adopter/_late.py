"""A restore's late arrivals, whatever they are: a local daemon's partial
attach that came after the phase (its children claimed already), or a
host's answer that came after its own timeout. The restore hands both to
``on_late``; ``adopt_late`` takes either on."""

from __future__ import annotations

from adopter._adopt import OrphanSink
from adopter._late_host import adopt_late_host
from adopter._sweep import SweepRow, adopt_late_daemon
from restore import HostAttachment, LateArrival


async def adopt_late(att: LateArrival, sink: OrphanSink, *, keep: bool = False) -> list[SweepRow]:
    """Adopt ``att`` into ``sink`` (``adopt_late_daemon``, or
    ``adopt_late_host`` for a host's answer; ``keep`` is the daemon's: an
    app that shows its children keeps the connection and the fds).

    Cancellation: as the one it calls says.
    """
    if isinstance(att, HostAttachment):
        return await adopt_late_host(att, sink)
    return await adopt_late_daemon(att, sink, keep=keep)
