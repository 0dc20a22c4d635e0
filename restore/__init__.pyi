# The face of restore for type checkers, generated from EXPORTS in
# __init__.py by `make faces` (tests/test_faces.py fails when it is stale).

from restore._build import (
    RestoredSession as RestoredSession,
)
from restore._errors import (
    StoreCorrupt as StoreCorrupt,
    StoreError as StoreError,
    StoreTooNew as StoreTooNew,
)
from restore._held import (
    Hold as Hold,
    HoldRecord as HoldRecord,
    live_holds as live_holds,
    pid_alive as pid_alive,
)
from restore._kitty import (
    Kitty as Kitty,
)
from restore._layout import (
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
from restore._model import (
    SCROLLBACK_LIMIT as SCROLLBACK_LIMIT,
    Arrangement as Arrangement,
    PendingLaunch as PendingLaunch,
    RestorationRef as RestorationRef,
    SavedOutput as SavedOutput,
    SessionLeaf as SessionLeaf,
    Split as Split,
    Tab as Tab,
    Window as Window,
    bounded_scrollback as bounded_scrollback,
    ref_key as ref_key,
)
from restore._partial import (
    DaemonAttachment as DaemonAttachment,
    PhaseResult as PhaseResult,
)
from restore._plan import (
    ATTACH_SHARE as ATTACH_SHARE,
    OUTCOMES as OUTCOMES,
    Decision as Decision,
    HostAnswer as HostAnswer,
    HostChild as HostChild,
    Options as Options,
    Outcome as Outcome,
    decide_remote as decide_remote,
    relaunch_notice as relaunch_notice,
)
from restore._restore import (
    RestoreResult as RestoreResult,
    close_late as close_late,
    release_claims as release_claims,
    restore_arrangement as restore_arrangement,
)
from restore._schema import (
    PendingClose as PendingClose,
)
from restore._store import (
    ArrangementStore as ArrangementStore,
)
from restore._terminals import (
    ReadPane as ReadPane,
    ReadTab as ReadTab,
    TerminalError as TerminalError,
)
from restore._tmux import (
    Tmux as Tmux,
)
