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

from multiserver._lazy import lazy_exports

__version__ = "0.1.0"

# The public names, by the module that defines them. Each is imported on
# first use: the daemon (``python -m multiserver``) runs this file too, and
# must not load the client library it never uses (memory, for a process
# that lives for days); a command that needs only the paths loads only
# them. Type checkers read __init__.pyi, generated from this table.
EXPORTS = {
    "multiserver.terminal._buffer": ("OutputBuffer", "safe_start"),
    "multiserver.client._client": ("Client", "dial", "handshake", "open_client"),
    "multiserver.protocol._frames": ("close_fds",),
    "multiserver.settings._config": ("DaemonConfig", "config_from_env"),
    "multiserver.daemon._daemon_main": ("run_foreground",),
    "multiserver.settings._env": ("DEFAULT_STRIP_ENV", "launch_env", "strip_env"),
    "multiserver._durable": (
        "KEPT_OUTPUT",
        "DurableOutput",
        "bounded_argv",
        "instance_dir",
        "output_path",
        "read_output",
        "read_state",
    ),
    "multiserver.terminal._ecma48": ("unfinished_at",),
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
    "multiserver._lazy": ("lazy_exports",),
    "multiserver.protocol._codec": ("twin_structurers",),
    "multiserver.protocol._messages": ("ChildExited", "ChildInfo", "ChildTaken", "Welcome"),
    "multiserver.daemon._origin": ("DaemonOrigin", "read_origin"),
    "multiserver.system._osstr": ("escaped", "printable"),
    "multiserver.system._paths": (
        "SOCKET_RE",
        "DaemonPaths",
        "LockBusy",
        "fallback_dir",
        "find_sockets",
        "lock_is_held",
        "runtime_dir",
        "socket_dirs",
        "state_dir",
        "try_lock",
        "unsafe_socket_dirs",
        "user_dir",
        "write_whole",
    ),
    "multiserver.system._platform": ("foreground", "open_fd_count", "set_winsize"),
    "multiserver.settings._setting_kinds": ("AbsolutePath", "Kind", "Seconds", "Setting"),
    "multiserver.settings._settings": (
        "ENVIRONMENT",
        "MAX_BUFFER_LIMIT",
        "check_environment",
        "default_daemon_number",
        "from_environment",
    ),
    "multiserver.protocol._record": ("Twin", "mutable_record", "record", "replaced"),
    "multiserver.terminal._screen": ("ScreenModes", "screen_reset"),
    "multiserver.protocol._proto": (
        "MIN_PROTOCOL_VERSION",
        "NAME_RE",
        "PROTOCOL_VERSION",
        "SERVER_NAME",
        "UPGRADE_VERSION",
        "describe_exit",
        "exit_status",
    ),
    "multiserver.system._peer": ("verify_peer",),
    "multiserver.terminal._replay": ("ReplayEnd", "for_terminal", "strip_for_terminal"),
    "multiserver.client._results": ("ClaimResult", "LaunchResult", "PeekResult"),
    "multiserver.client._spawn": ("TimedOut", "spawn_detached"),
    "multiserver.system._stale": ("SocketFound", "remove_stale_socket", "unlink_if_same"),
    "multiserver.system._trust": (
        "check_path_chain",
        "check_private_dir",
        "check_socket",
        "ensure_private_dir",
    ),
    "multiserver.client._start": ("connect", "connect_or_start"),
    "multiserver.client._sync": ("SyncClient", "dial_blocking"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS, globals())
