"""The daemon that runs on a socket, as the commands tell a person of it:
how it was started (``describe_daemon``, from what it wrote in its lock
file), and, for ``service``, whether the service started it and how many
sessions it runs (``running``). Blocking calls only: no trio."""

from __future__ import annotations

from multiserver import DaemonPaths, MultiserverError
from multiserver.internal import read_origin, record
from multiserver_cli._dial import dial
from multiserver_cli._sessions import deadline

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver import SyncClient


@record
class Running:
    """The daemon that answers on a socket now."""

    pid: int
    service: bool  # started by the service (its lock file says so)
    sessions: int
    line: str  # describe_daemon's


def describe_daemon(client: SyncClient) -> str:
    """ "daemon 1 (pid 42) at PATH, started by the service (stays up)": what
    the daemon wrote in its lock file, if this daemon wrote it (``_origin``)."""
    paths = DaemonPaths.for_socket(client.socket_path)
    origin = read_origin(paths.lock)
    head = f"daemon {paths.number} (pid {client.daemon_pid}) at {client.socket_path}"
    if origin is None or origin.instance_id != client.instance_id:
        return f"{head}; how it was started is not known (its lock file does not say)"
    return f"{head}, {origin.lifetime()}"


def running(paths: DaemonPaths) -> Running | None:
    """The daemon on ``paths`` (never started here), or None."""
    try:
        with dial(paths.socket, children=False, deadline=deadline()) as client:
            origin = read_origin(paths.lock)
            service = (
                origin is not None
                and origin.instance_id == client.instance_id
                and origin.started == "service"
            )
            return Running(client.daemon_pid, service, len(client.list()), describe_daemon(client))
    except MultiserverError:
        return None
