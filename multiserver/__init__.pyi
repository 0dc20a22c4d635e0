# The face of multiserver for type checkers, generated from EXPORTS in
# __init__.py by `make faces` (tests/test_faces.py fails when it is stale).

from multiserver._errors import (
    ChildFailed as ChildFailed,
    ConnectionClosed as ConnectionClosed,
    DaemonNotRunning as DaemonNotRunning,
    DaemonTooOld as DaemonTooOld,
    MultiserverError as MultiserverError,
    PeerProtocolError as PeerProtocolError,
    RequestFailed as RequestFailed,
    SettingError as SettingError,
    UnsafeDirectory as UnsafeDirectory,
    UntrustedPeer as UntrustedPeer,
    VersionRefused as VersionRefused,
)
from multiserver.client._capture import (
    capture as capture,
    held_output as held_output,
)
from multiserver.client._client import (
    Client as Client,
    dial as dial,
    open_client as open_client,
)
from multiserver.client._results import (
    ClaimResult as ClaimResult,
    LaunchResult as LaunchResult,
    PeekResult as PeekResult,
)
from multiserver.client._spawn import (
    TimedOut as TimedOut,
)
from multiserver.client._start import (
    connect as connect,
    connect_or_start as connect_or_start,
)
from multiserver.client._sync import (
    SyncClient as SyncClient,
    dial_blocking as dial_blocking,
)
from multiserver.protocol._messages import (
    ChildExited as ChildExited,
    ChildInfo as ChildInfo,
    ChildTaken as ChildTaken,
    EventsMissed as EventsMissed,
    GiveBack as GiveBack,
    SessionEvent as SessionEvent,
    Shared as Shared,
    Skipped as Skipped,
    Welcome as Welcome,
)
from multiserver.protocol._proto import (
    PROTOCOL_VERSION as PROTOCOL_VERSION,
    describe_exit as describe_exit,
    exit_status as exit_status,
)
from multiserver.settings._config import (
    DaemonConfig as DaemonConfig,
)
from multiserver.settings._env import (
    launch_env as launch_env,
)
from multiserver.settings._settings import (
    default_daemon_number as default_daemon_number,
)
from multiserver.system._paths import (
    DaemonPaths as DaemonPaths,
)
from multiserver.terminal._capture import (
    Capture as Capture,
)
from multiserver.terminal._replay import (
    ReplayEnd as ReplayEnd,
    for_terminal as for_terminal,
)

__version__: str
