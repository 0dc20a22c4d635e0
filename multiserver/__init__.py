"""multiserver: terminal sessions that outlive their clients.

A per-user daemon owns child processes on PTYs and hands their master fds to
clients over a Unix socket (SCM_RIGHTS). This package is the daemon, the wire
protocol and the client library; ``restore`` and ``adopter`` build on it.

Public API: what a terminal app needs to connect, launch, claim, peek,
capture and list (restoring and adopting are the ``restore`` and ``adopter`` packages;
the simulated daemons, ``multiserver.testing``). Everything else is
private and may change; what this project's own packages share is
``multiserver.internal``, which promises nothing::

    async with open_client(DaemonPaths.for_number(1), start=True) as client:
        launched = await client.launch(["bash"])
        ...

    # Or blocking, without trio (one request at a time; a deadline for all):
    with dial_blocking(DaemonPaths.for_number(1), deadline=time.monotonic() + 5) as client:
        print(client.list())
"""

from multiserver._lazy import lazy_exports

__version__ = "0.1.0"

# The public names, by the module that defines them: the one list of the
# face (tests/test_house.py holds it apart from multiserver.internal's,
# and the stub to it). Each is imported on
# first use: the daemon (``python -m multiserver``) runs this file too, and
# must not load the client library it never uses (memory, for a process
# that lives for days); a command that needs only the paths loads only
# them. Type checkers read __init__.pyi, generated from this table.
EXPORTS = {
    "multiserver._errors": (
        "ChildFailed",
        "ConnectionClosed",
        "DaemonNotRunning",
        "DaemonTooOld",
        "MultiserverError",
        "PeerProtocolError",
        "RequestFailed",
        "SettingError",
        "UnsafeDirectory",
        "UntrustedPeer",
        "VersionRefused",
    ),
    "multiserver.client._capture": ("capture", "held_output"),
    "multiserver.client._client": ("Client", "dial", "open_client"),
    "multiserver.client._results": ("ClaimResult", "LaunchResult", "PeekResult"),
    "multiserver.client._spawn": ("TimedOut",),
    "multiserver.client._start": ("connect", "connect_or_start"),
    "multiserver.client._sync": ("SyncClient", "dial_blocking"),
    "multiserver.protocol._messages": (
        "ChildExited",
        "ChildInfo",
        "ChildTaken",
        "EventsMissed",
        "GiveBack",
        "SessionEvent",
        "Shared",
        "Skipped",
        "Welcome",
    ),
    "multiserver.protocol._proto": ("PROTOCOL_VERSION", "describe_exit", "exit_status"),
    "multiserver.settings._config": ("DaemonConfig",),
    "multiserver.settings._env": ("launch_env",),
    "multiserver.settings._settings": ("default_daemon_number",),
    "multiserver.system._paths": ("DaemonPaths",),
    "multiserver.terminal._capture": ("Capture",),
    "multiserver.terminal._replay": ("ReplayEnd", "for_terminal"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS, globals())
