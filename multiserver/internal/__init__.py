"""What this project's own packages share: ``restore``, ``adopter`` and
the command line (``multiserver_cli``) import it here, never from
``multiserver``'s private modules (``tests/test_house.py``). It is no
library's API: a name may change or go with any release. A terminal app
uses ``multiserver`` (connect, launch, claim, peek, list), ``restore``,
``adopter`` and ``multiserver.testing``.

Each name is imported from its module on first use, as ``multiserver``'s
are (``_lazy``); type checkers read ``__init__.pyi``, generated from this
table (``make faces``).
"""

from multiserver._lazy import lazy_exports

EXPORTS = {
    "multiserver._durable": (
        "KEPT_OUTPUT",
        "DurableOutput",
        "bounded_argv",
        "instance_dir",
        "output_path",
        "read_output",
        "read_state",
    ),
    "multiserver._lazy": ("lazy_exports",),
    "multiserver.client._client": ("handshake",),
    "multiserver.client._spawn": ("spawn_detached",),
    "multiserver.daemon._daemon_main": ("run_foreground",),
    "multiserver.daemon._origin": ("DaemonOrigin", "read_origin"),
    "multiserver.protocol._codec": ("twin_structurers",),
    "multiserver.protocol._frames": ("close_fds",),
    "multiserver.protocol._proto": (
        "MIN_PROTOCOL_VERSION",
        "NAME_RE",
        "SERVER_NAME",
        "UPGRADE_VERSION",
    ),
    "multiserver.protocol._record": ("Twin", "mutable_record", "record", "replaced"),
    "multiserver.settings._config": ("config_from_env",),
    "multiserver.settings._env": ("DEFAULT_STRIP_ENV", "strip_env"),
    "multiserver.settings._setting_kinds": ("AbsolutePath", "Kind", "Seconds", "Setting"),
    "multiserver.settings._settings": (
        "ENVIRONMENT",
        "MAX_BUFFER_LIMIT",
        "check_environment",
        "from_environment",
    ),
    "multiserver.system._osstr": ("escaped", "printable"),
    "multiserver.system._paths": (
        "SOCKET_RE",
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
    "multiserver.system._peer": ("verify_peer",),
    "multiserver.system._platform": ("foreground", "open_fd_count", "set_winsize"),
    "multiserver.system._stale": ("SocketFound", "remove_stale_socket", "unlink_if_same"),
    "multiserver.system._trust": (
        "check_path_chain",
        "check_private_dir",
        "check_socket",
        "ensure_private_dir",
    ),
    "multiserver.terminal._buffer": ("OutputBuffer", "safe_start"),
    "multiserver.terminal._ecma48": ("unfinished_at",),
    "multiserver.terminal._replay": ("strip_for_terminal",),
    "multiserver.terminal._screen": ("ScreenModes", "screen_reset"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS, globals())
