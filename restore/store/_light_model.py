"""GENERATED from restore/store/_model.py by tools/store_lightgen.py
(``make faces``); do not edit. ``tests/restore/store/test_outline.py`` fails
when it is stale.

A saved session and the records in it as plain classes, for the light
read of the store (``_outline``), which imports neither attrs nor cattrs.
To a type checker each is its attrs class.
"""

from __future__ import annotations

TYPE_CHECKING = False

if TYPE_CHECKING:
    from restore.store._model import (
        PendingLaunch as PendingLaunch,
        RestorationRef as RestorationRef,
        SessionLeaf as SessionLeaf,
    )
    from restore.store._model import RestorationRef as LightRestorationRef
    from restore.store._model import SessionLeaf as LightSessionLeaf
    __all__ = ['LightRestorationRef', 'LightSessionLeaf']
else:
    from multiserver.internal import Twin


    class RestorationRef(Twin):
        __slots__ = ('socket', 'instance_id', 'child_id', 'pid',)

        def __init__(self, socket, instance_id, child_id, pid):
            self.socket = socket
            self.instance_id = instance_id
            self.child_id = child_id
            self.pid = pid


    class PendingLaunch(Twin):
        __slots__ = ('socket', 'instance_id', 'asked_at',)

        def __init__(self, socket, instance_id, asked_at=0.0):
            self.socket = socket
            self.instance_id = instance_id
            self.asked_at = asked_at


    class SessionLeaf(Twin):
        __slots__ = ('name', 'argv', 'cwd', 'rows', 'cols', 'title', 'scrollback', 'ref', 'created_at', 'notice', 'host', 'pending_launch', 'exit_code',)

        def __init__(self, name, argv, cwd, rows=24, cols=80, title='', scrollback=None, ref=None, created_at=0.0, notice=None, host=None, pending_launch=None, exit_code=None):
            self.name = name
            self.argv = argv
            self.cwd = cwd
            self.rows = rows
            self.cols = cols
            self.title = title
            self.scrollback = scrollback
            self.ref = ref
            self.created_at = created_at
            self.notice = notice
            self.host = host
            self.pending_launch = pending_launch
            self.exit_code = exit_code

    LightRestorationRef = RestorationRef
    LightSessionLeaf = SessionLeaf


# name -> ((field, kind, default or REQUIRED, omitted at its default), ...)
FIELDS: dict[str, tuple[tuple[str, str, object, bool], ...]] = {
    'RestorationRef': (
        ('socket', 'str', 'REQUIRED', False),
        ('instance_id', 'str', 'REQUIRED', False),
        ('child_id', 'int', 'REQUIRED', False),
        ('pid', 'int', 'REQUIRED', False),
    ),
    'PendingLaunch': (
        ('socket', 'str', 'REQUIRED', False),
        ('instance_id', 'str', 'REQUIRED', False),
        ('asked_at', 'float', 0.0, False),
    ),
    'SessionLeaf': (
        ('name', 'str', 'REQUIRED', False),
        ('argv', '[str]', 'REQUIRED', False),
        ('cwd', 'str', 'REQUIRED', False),
        ('rows', 'int', 24, False),
        ('cols', 'int', 80, False),
        ('title', 'str', '', False),
        ('scrollback', '?bytes', None, False),
        ('ref', '?RestorationRef', None, False),
        ('created_at', 'float', 0.0, False),
        ('notice', '?bytes', None, False),
        ('host', '?str', None, False),
        ('pending_launch', '?PendingLaunch', None, False),
        ('exit_code', '?int', None, False),
    ),
}
REQUIRED = 'REQUIRED'
