# The face of restore for type checkers, generated from EXPORTS in
# __init__.py by `make faces` (tests/test_faces.py fails when it is stale).

from restore._build import (
    RestoredSession as RestoredSession,
)
from restore._kept import (
    forget_kept as forget_kept,
    kept_fields as kept_fields,
    kept_scrollback as kept_scrollback,
    with_kept_state as with_kept_state,
)
from restore._owner import (
    LATE_SUFFIX as LATE_SUFFIX,
    late_family as late_family,
    late_name as late_name,
    norm_socket as norm_socket,
    relaunch_of as relaunch_of,
)
from restore._partial import (
    DaemonAttachment as DaemonAttachment,
    PhaseResult as PhaseResult,
)
from restore._plan import (
    ATTACH_SHARE as ATTACH_SHARE,
    GONE_THERE as GONE_THERE,
    OUTCOMES as OUTCOMES,
    RELAUNCH_MARKER as RELAUNCH_MARKER,
    Decision as Decision,
    HostAnswer as HostAnswer,
    HostChild as HostChild,
    Options as Options,
    Outcome as Outcome,
    decide_remote as decide_remote,
    relaunch_notice as relaunch_notice,
)
from restore._restore import (
    LateArrival as LateArrival,
    RestoreResult as RestoreResult,
    close_late as close_late,
    release_claims as release_claims,
    restore_arrangement as restore_arrangement,
)
from restore._restore_lock import (
    RESTORE_LOCK as RESTORE_LOCK,
    RESTORE_REPORT as RESTORE_REPORT,
    keep_restore_report as keep_restore_report,
    read_restore_report as read_restore_report,
    restore_lock_holder as restore_lock_holder,
    restore_report_identity as restore_report_identity,
    take_restore_lock as take_restore_lock,
)
from restore.layout._capture import (
    Capture as Capture,
    Saved as Saved,
    SessionOf as SessionOf,
    save_layout as save_layout,
    seen_tabs as seen_tabs,
)
from restore.layout._kitty import (
    Kitty as Kitty,
)
from restore.layout._layout import (
    Op as Op,
    OpenTab as OpenTab,
    PaneCommand as PaneCommand,
    SeenTab as SeenTab,
    SplitPane as SplitPane,
    kitty_pairs as kitty_pairs,
    merge_layout as merge_layout,
    open_plan as open_plan,
    parse_tmux_layout as parse_tmux_layout,
    tab_size as tab_size,
    without_sessions as without_sessions,
)
from restore.layout._terminals import (
    ReadPane as ReadPane,
    ReadTab as ReadTab,
    TerminalError as TerminalError,
)
from restore.layout._tmux import (
    Tmux as Tmux,
)
from restore.layout._window_names import (
    window_name_for as window_name_for,
    window_name_problem as window_name_problem,
)
from restore.remote._answers import (
    RemoteSession as RemoteSession,
    failed_answer as failed_answer,
    host_answer as host_answer,
    leaf_there as leaf_there,
    listing_of as listing_of,
    remote_sessions as remote_sessions,
    start_request as start_request,
    started_again as started_again,
)
from restore.remote._errors import (
    FailureKind as FailureKind,
    HostFailure as HostFailure,
    HostSettingError as HostSettingError,
    HostsFileError as HostsFileError,
)
from restore.remote._hosts import (
    Host as Host,
    check_command as check_command,
    check_dest as check_dest,
    check_host_name as check_host_name,
    config_dir as config_dir,
    load_hosts as load_hosts,
    parse_grace as parse_grace,
    parse_timeout as parse_timeout,
    save_hosts as save_hosts,
)
from restore.remote._listing import (
    ListedSession as ListedSession,
    listing_json as listing_json,
)
from restore.remote._restore import (
    Carried as Carried,
    HostAttachment as HostAttachment,
    carry_out as carry_out,
    restore_hosts as restore_hosts,
)
from restore.remote._ssh import (
    SSH_FAILED as SSH_FAILED,
    exit_argv as exit_argv,
    remote_json as remote_json,
    run_remote as run_remote,
    ssh_argv as ssh_argv,
    succeeded as succeeded,
)
from restore.store._errors import (
    StoreCorrupt as StoreCorrupt,
    StoreError as StoreError,
    StoreTooNew as StoreTooNew,
)
from restore.store._held import (
    Hold as Hold,
    HoldRecord as HoldRecord,
    live_holds as live_holds,
    pid_alive as pid_alive,
)
from restore.store._light_model import (
    LightRestorationRef as LightRestorationRef,
    LightSessionLeaf as LightSessionLeaf,
)
from restore.store._model import (
    Arrangement as Arrangement,
    PendingLaunch as PendingLaunch,
    RestorationRef as RestorationRef,
    SavedOutput as SavedOutput,
    SessionLeaf as SessionLeaf,
    Split as Split,
    Tab as Tab,
    Window as Window,
    ref_key as ref_key,
)
from restore.store._outline import (
    add_saved as add_saved,
    read_about as read_about,
    read_saved as read_saved,
)
from restore.store._rules import (
    SCROLLBACK_LIMIT as SCROLLBACK_LIMIT,
    bounded_scrollback as bounded_scrollback,
)
from restore.store._schema import (
    PendingClose as PendingClose,
)
from restore.store._store import (
    ArrangementStore as ArrangementStore,
)
