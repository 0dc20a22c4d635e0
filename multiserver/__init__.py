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
    "multiserver._buffer": ("OutputBuffer", "safe_start"),
    "multiserver._client": ("Client", "dial", "handshake", "open_client"),
    "multiserver._frames": ("close_fds", "is_a", "replaced"),
    "multiserver._hooks": ("WELCOME_HOOKS",),
    "multiserver._config": ("DaemonConfig", "config_from_env"),
    "multiserver._daemon_main": ("run_foreground",),
    "multiserver._env": ("DEFAULT_STRIP_ENV", "launch_env", "strip_env"),
    "multiserver._durable": (
        "KEPT_OUTPUT",
        "DurableOutput",
        "bounded_argv",
        "instance_dir",
        "output_path",
        "read_output",
        "read_state",
    ),
    "multiserver._ecma48": ("unfinished_at",),
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
    "multiserver._light": ("twin_structurers",),
    # The notices a SyncClient gives, as it holds them (is_a tells either kind).
    "multiserver._light_messages": ("LightChildExited", "LightChildTaken"),
    "multiserver._messages": ("ChildExited", "ChildInfo", "ChildTaken"),
    "multiserver._origin": ("DaemonOrigin", "read_origin"),
    "multiserver._osstr": ("escaped", "printable"),
    "multiserver._paths": (
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
    "multiserver._platform": ("foreground", "open_fd_count", "set_winsize"),
    "multiserver._setting_kinds": ("AbsolutePath", "Kind", "Seconds", "Setting"),
    "multiserver._settings": (
        "ENVIRONMENT",
        "MAX_BUFFER_LIMIT",
        "check_environment",
        "default_daemon_number",
        "from_environment",
    ),
    "multiserver._record": ("Twin", "mutable_record", "record"),
    "multiserver._screen": ("ScreenModes", "screen_reset"),
    "multiserver._proto": (
        "MIN_PROTOCOL_VERSION",
        "NAME_RE",
        "PROTOCOL_VERSION",
        "SERVER_NAME",
        "UPGRADE_VERSION",
        "describe_exit",
        "exit_status",
    ),
    "multiserver._peer": ("verify_peer",),
    "multiserver._replay": ("ReplayEnd", "for_terminal", "strip_for_terminal"),
    "multiserver._results": ("ClaimResult", "LaunchResult", "PeekResult"),
    "multiserver._spawn": ("TimedOut", "spawn_detached"),
    "multiserver._stale": ("SocketFound", "remove_stale_socket", "unlink_if_same"),
    "multiserver._trust": (
        "check_path_chain",
        "check_private_dir",
        "check_socket",
        "ensure_private_dir",
    ),
    "multiserver._start": ("connect", "connect_or_start"),
    "multiserver._sync": ("SyncClient", "dial_blocking"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS, globals())
