"""multiserver: terminal sessions that outlive their clients.

A per-user daemon owns child processes on PTYs and hands their master fds to
clients over a Unix socket (SCM_RIGHTS). This package is the daemon, the wire
protocol and the client library; ``restore`` and ``adopter`` build on it.

Public API (everything else is private and may change)::

    async with open_client(DaemonPaths.for_number(1), start=True) as client:
        launched = await client.launch(["bash"])
        ...
"""

from multiserver._client import (
    ClaimResult,
    Client,
    LaunchResult,
    PeekResult,
    dial,
    handshake,
    open_client,
)
from multiserver._config import DaemonConfig
from multiserver._errors import (
    ChildFailed,
    ConnectionClosed,
    DaemonNotRunning,
    MultiserverError,
    PeerProtocolError,
    RequestFailed,
    UnsafeDirectory,
    VersionRefused,
)
from multiserver._messages import PROTOCOL_VERSION, ChildExited, ChildInfo, ChildTaken
from multiserver._paths import DaemonPaths, fallback_dir, runtime_dir, state_dir
from multiserver._stale import SocketFound, remove_stale_socket, unlink_if_same
from multiserver._start import connect, connect_or_start

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "ChildExited",
    "ChildFailed",
    "ChildInfo",
    "ChildTaken",
    "ClaimResult",
    "Client",
    "ConnectionClosed",
    "DaemonConfig",
    "DaemonNotRunning",
    "DaemonPaths",
    "LaunchResult",
    "MultiserverError",
    "PeekResult",
    "PeerProtocolError",
    "RequestFailed",
    "SocketFound",
    "UnsafeDirectory",
    "VersionRefused",
    "connect",
    "connect_or_start",
    "dial",
    "fallback_dir",
    "handshake",
    "open_client",
    "remove_stale_socket",
    "runtime_dir",
    "state_dir",
    "unlink_if_same",
]
