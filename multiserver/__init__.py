"""multiserver: terminal sessions that outlive their clients.

A per-user daemon owns child processes on PTYs and hands their master fds to
clients over a Unix socket (SCM_RIGHTS). This package is the daemon, the wire
protocol and the client library; ``restore`` and ``adopter`` build on it.

Public API (everything else is private and may change)::

    async with open_client(DaemonPaths.for_number(1), start=True) as client:
        launched = await client.launch(["bash"])
        ...

    # Or blocking, without trio (one request at a time; a deadline for all):
    with dial_blocking(DaemonPaths.for_number(1), deadline=time.monotonic() + 5) as client:
        print(client.list())
"""

from typing import TYPE_CHECKING

from multiserver._lazy import lazy_exports

if TYPE_CHECKING:
    from multiserver._client import Client, dial, handshake, open_client
    from multiserver._config import DaemonConfig
    from multiserver._env import DEFAULT_STRIP_ENV, launch_env, strip_env
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
    from multiserver._messages import (
        PROTOCOL_VERSION,
        ChildExited,
        ChildInfo,
        ChildTaken,
        describe_exit,
        exit_status,
    )
    from multiserver._origin import DaemonOrigin, read_origin
    from multiserver._osstr import escaped
    from multiserver._paths import DaemonPaths, fallback_dir, runtime_dir, state_dir
    from multiserver._platform import set_winsize
    from multiserver._results import ClaimResult, LaunchResult, PeekResult
    from multiserver._spawn import TimedOut
    from multiserver._stale import SocketFound, remove_stale_socket, unlink_if_same
    from multiserver._start import connect, connect_or_start
    from multiserver._sync import SyncClient, dial_blocking

# Each public name is imported from its module on first use: the daemon
# (``python -m multiserver``) runs this file too, and must not load the
# client library it never uses (memory, for a process that lives for days);
# a command that needs only the paths loads only them.
_HOMES: dict[str, str] = {
    "ChildExited": "multiserver._messages",
    "ChildFailed": "multiserver._errors",
    "ChildInfo": "multiserver._messages",
    "ChildTaken": "multiserver._messages",
    "ClaimResult": "multiserver._results",
    "Client": "multiserver._client",
    "ConnectionClosed": "multiserver._errors",
    "DEFAULT_STRIP_ENV": "multiserver._env",
    "DaemonConfig": "multiserver._config",
    "DaemonNotRunning": "multiserver._errors",
    "DaemonOrigin": "multiserver._origin",
    "DaemonTooOld": "multiserver._errors",
    "DaemonPaths": "multiserver._paths",
    "LaunchResult": "multiserver._results",
    "MultiserverError": "multiserver._errors",
    "PROTOCOL_VERSION": "multiserver._messages",
    "PeekResult": "multiserver._results",
    "PeerProtocolError": "multiserver._errors",
    "RequestFailed": "multiserver._errors",
    "SocketFound": "multiserver._stale",
    "SyncClient": "multiserver._sync",
    "TimedOut": "multiserver._spawn",
    "UnsafeDirectory": "multiserver._errors",
    "VersionRefused": "multiserver._errors",
    "connect": "multiserver._start",
    "connect_or_start": "multiserver._start",
    "describe_exit": "multiserver._messages",
    "dial": "multiserver._client",
    "dial_blocking": "multiserver._sync",
    "exit_status": "multiserver._messages",
    "escaped": "multiserver._osstr",
    "fallback_dir": "multiserver._paths",
    "handshake": "multiserver._client",
    "launch_env": "multiserver._env",
    "open_client": "multiserver._client",
    "read_origin": "multiserver._origin",
    "remove_stale_socket": "multiserver._stale",
    "runtime_dir": "multiserver._paths",
    "set_winsize": "multiserver._platform",
    "state_dir": "multiserver._paths",
    "strip_env": "multiserver._env",
    "unlink_if_same": "multiserver._stale",
}


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_STRIP_ENV",
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
    "DaemonOrigin",
    "DaemonPaths",
    "DaemonTooOld",
    "LaunchResult",
    "MultiserverError",
    "PeekResult",
    "PeerProtocolError",
    "RequestFailed",
    "SocketFound",
    "SyncClient",
    "TimedOut",
    "UnsafeDirectory",
    "VersionRefused",
    "connect",
    "connect_or_start",
    "describe_exit",
    "dial",
    "dial_blocking",
    "escaped",
    "exit_status",
    "fallback_dir",
    "handshake",
    "launch_env",
    "open_client",
    "read_origin",
    "remove_stale_socket",
    "runtime_dir",
    "set_winsize",
    "state_dir",
    "strip_env",
    "unlink_if_same",
]
