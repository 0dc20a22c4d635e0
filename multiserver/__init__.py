"""multiserver: terminal sessions that outlive their clients.

A per-user daemon owns child processes on PTYs and hands their master fds to
clients over a Unix socket (SCM_RIGHTS). This package is the daemon, the wire
protocol and the client library; ``restore`` and ``adopter`` build on it.

Public API (everything else is private and may change)::

    async with open_client(DaemonPaths.for_number(1), start=True) as client:
        launched = await client.launch(["bash"])
        ...
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        DaemonTooOld,
        MultiserverError,
        PeerProtocolError,
        RequestFailed,
        UnsafeDirectory,
        VersionRefused,
    )
    from multiserver._messages import PROTOCOL_VERSION, ChildExited, ChildInfo, ChildTaken
    from multiserver._osstr import escaped
    from multiserver._paths import DaemonPaths, fallback_dir, runtime_dir, state_dir
    from multiserver._stale import SocketFound, remove_stale_socket, unlink_if_same
    from multiserver._start import connect, connect_or_start

# Each public name is imported from its module on first use: the daemon
# (``python -m multiserver``) runs this file too, and must not load the
# client library it never uses (memory, for a process that lives for days);
# a command that needs only the paths loads only them.
_HOMES: dict[str, str] = {
    "ChildExited": "multiserver._messages",
    "ChildFailed": "multiserver._errors",
    "ChildInfo": "multiserver._messages",
    "ChildTaken": "multiserver._messages",
    "ClaimResult": "multiserver._client",
    "Client": "multiserver._client",
    "ConnectionClosed": "multiserver._errors",
    "DaemonConfig": "multiserver._config",
    "DaemonNotRunning": "multiserver._errors",
    "DaemonTooOld": "multiserver._errors",
    "DaemonPaths": "multiserver._paths",
    "LaunchResult": "multiserver._client",
    "MultiserverError": "multiserver._errors",
    "PROTOCOL_VERSION": "multiserver._messages",
    "PeekResult": "multiserver._client",
    "PeerProtocolError": "multiserver._errors",
    "RequestFailed": "multiserver._errors",
    "SocketFound": "multiserver._stale",
    "UnsafeDirectory": "multiserver._errors",
    "VersionRefused": "multiserver._errors",
    "connect": "multiserver._start",
    "connect_or_start": "multiserver._start",
    "dial": "multiserver._client",
    "escaped": "multiserver._osstr",
    "fallback_dir": "multiserver._paths",
    "handshake": "multiserver._client",
    "open_client": "multiserver._client",
    "remove_stale_socket": "multiserver._stale",
    "runtime_dir": "multiserver._paths",
    "state_dir": "multiserver._paths",
    "unlink_if_same": "multiserver._stale",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'multiserver' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


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
    "DaemonTooOld",
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
    "escaped",
    "fallback_dir",
    "handshake",
    "open_client",
    "remove_stale_socket",
    "runtime_dir",
    "state_dir",
    "unlink_if_same",
]
