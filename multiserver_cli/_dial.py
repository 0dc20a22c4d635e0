"""How a command dials its daemon: ``dial_blocking``, with each daemon
met told to ``_older`` (a daemon older than this command is said once,
after the command is done). ``daemon`` and ``upgrade`` say versions
themselves and dial without it. Light: the attach path dials before raw
mode."""

from __future__ import annotations

from multiserver import dial_blocking
from multiserver_cli._older import notice

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from multiserver import DaemonConfig, DaemonPaths, SyncClient


def dial(
    paths: DaemonPaths | Path,
    *,
    start: bool = False,
    config: DaemonConfig | None = None,
    children: bool = True,
    deadline: float | None = None,
) -> SyncClient:
    """``dial_blocking``, noticing an older daemon (``_older.notice``)."""
    return dial_blocking(
        paths, start=start, config=config, children=children, deadline=deadline, on_welcome=notice
    )
