# The face of multiserver.internal for type checkers, generated from EXPORTS in
# __init__.py by `make faces` (tests/test_faces.py fails when it is stale).

from multiserver._durable import (
    KEPT_OUTPUT as KEPT_OUTPUT,
    DurableOutput as DurableOutput,
    bounded_argv as bounded_argv,
    instance_dir as instance_dir,
    output_path as output_path,
    read_output as read_output,
    read_state as read_state,
)
from multiserver._lazy import (
    lazy_exports as lazy_exports,
)
from multiserver.client._client import (
    handshake as handshake,
)
from multiserver.client._spawn import (
    spawn_detached as spawn_detached,
)
from multiserver.daemon._daemon_main import (
    run_foreground as run_foreground,
)
from multiserver.daemon._origin import (
    DaemonOrigin as DaemonOrigin,
    read_origin as read_origin,
)
from multiserver.protocol._codec import (
    twin_structurers as twin_structurers,
)
from multiserver.protocol._frames import (
    close_fds as close_fds,
)
from multiserver.protocol._proto import (
    MIN_PROTOCOL_VERSION as MIN_PROTOCOL_VERSION,
    NAME_RE as NAME_RE,
    SERVER_NAME as SERVER_NAME,
    UPGRADE_VERSION as UPGRADE_VERSION,
)
from multiserver.protocol._record import (
    Twin as Twin,
    mutable_record as mutable_record,
    record as record,
    replaced as replaced,
)
from multiserver.settings._config import (
    config_from_env as config_from_env,
)
from multiserver.settings._env import (
    DEFAULT_STRIP_ENV as DEFAULT_STRIP_ENV,
    strip_env as strip_env,
)
from multiserver.settings._setting_kinds import (
    AbsolutePath as AbsolutePath,
    Kind as Kind,
    Seconds as Seconds,
    Setting as Setting,
)
from multiserver.settings._settings import (
    ENVIRONMENT as ENVIRONMENT,
    MAX_BUFFER_LIMIT as MAX_BUFFER_LIMIT,
    check_environment as check_environment,
    from_environment as from_environment,
)
from multiserver.system._osstr import (
    escaped as escaped,
    printable as printable,
)
from multiserver.system._paths import (
    SOCKET_RE as SOCKET_RE,
    LockBusy as LockBusy,
    fallback_dir as fallback_dir,
    find_sockets as find_sockets,
    lock_is_held as lock_is_held,
    runtime_dir as runtime_dir,
    socket_dirs as socket_dirs,
    state_dir as state_dir,
    try_lock as try_lock,
    unsafe_socket_dirs as unsafe_socket_dirs,
    user_dir as user_dir,
    write_whole as write_whole,
)
from multiserver.system._peer import (
    verify_peer as verify_peer,
)
from multiserver.system._platform import (
    foreground as foreground,
    open_fd_count as open_fd_count,
    set_winsize as set_winsize,
)
from multiserver.system._stale import (
    SocketFound as SocketFound,
    remove_stale_socket as remove_stale_socket,
    unlink_if_same as unlink_if_same,
)
from multiserver.system._trust import (
    check_path_chain as check_path_chain,
    check_private_dir as check_private_dir,
    check_socket as check_socket,
    ensure_private_dir as ensure_private_dir,
)
from multiserver.terminal._buffer import (
    OutputBuffer as OutputBuffer,
    safe_start as safe_start,
)
from multiserver.terminal._ecma48 import (
    unfinished_at as unfinished_at,
)
from multiserver.terminal._replay import (
    strip_for_terminal as strip_for_terminal,
)
from multiserver.terminal._screen import (
    ScreenModes as ScreenModes,
    screen_reset as screen_reset,
)
