"""GENERATED from multiserver/protocol/_messages.py by tools/lightgen.py
(``make faces``); do not edit. ``tests/multiserver/protocol/test_light.py`` fails
when it is stale.

The protocol's messages as plain classes, for the blocking client, which
imports neither attrs nor cattrs (``_light`` reads and writes them). Each
has the name, fields, defaults and type code of its attrs class; to a type
checker it is that class.
"""

from __future__ import annotations

TYPE_CHECKING = False

if TYPE_CHECKING:
    from multiserver.protocol._messages import (
        ChildError as ChildError,
        ChildExited as ChildExited,
        ChildInfo as ChildInfo,
        ChildTaken as ChildTaken,
        Children as Children,
        Claim as Claim,
        Claimed as Claimed,
        ClaimedChild as ClaimedChild,
        Collect as Collect,
        Collected as Collected,
        Error as Error,
        Hello as Hello,
        Launch as Launch,
        Launched as Launched,
        ListChildren as ListChildren,
        Ok as Ok,
        Peek as Peek,
        Peeked as Peeked,
        Refused as Refused,
        Release as Release,
        Released as Released,
        Resize as Resize,
        Shutdown as Shutdown,
        Signal as Signal,
        Upgrade as Upgrade,
        Upgraded as Upgraded,
        Welcome as Welcome,
    )
    from multiserver.protocol._messages import ChildExited as LightChildExited
    from multiserver.protocol._messages import ChildTaken as LightChildTaken
    __all__ = ['LightChildExited', 'LightChildTaken']
else:
    from multiserver import Twin


    class ChildInfo(Twin):
        __slots__ = ('id', 'pid', 'name', 'argv', 'cwd', 'tty', 'rows', 'cols', 'state', 'exit_code', 'held', 'buffered_bytes', 'dropped_bytes', 'started_at', 'exited_at', 'linger', 'fg_pid', 'fg_cwd', 'fg_argv', 'argv_omitted',)

        def __init__(self, id, pid, name, argv, cwd, tty, rows, cols, state, exit_code, held, buffered_bytes, dropped_bytes, started_at, exited_at, linger, fg_pid=None, fg_cwd=None, fg_argv=None, argv_omitted=0):
            self.id = id
            self.pid = pid
            self.name = name
            self.argv = argv
            self.cwd = cwd
            self.tty = tty
            self.rows = rows
            self.cols = cols
            self.state = state
            self.exit_code = exit_code
            self.held = held
            self.buffered_bytes = buffered_bytes
            self.dropped_bytes = dropped_bytes
            self.started_at = started_at
            self.exited_at = exited_at
            self.linger = linger
            self.fg_pid = fg_pid
            self.fg_cwd = fg_cwd
            self.fg_argv = fg_argv
            self.argv_omitted = argv_omitted


    class ClaimedChild(Twin):
        __slots__ = ('id', 'child', 'dropped', 'output_len', 'fd', 'errno', 'message',)

        def __init__(self, id, child=None, dropped=0, output_len=0, fd=False, errno=0, message=''):
            self.id = id
            self.child = child
            self.dropped = dropped
            self.output_len = output_len
            self.fd = fd
            self.errno = errno
            self.message = message


    class Hello(Twin):
        __slots__ = ('min_version', 'max_version', 'client', 'children',)
        TYPE = 1

        def __init__(self, min_version, max_version, client='', children=True):
            self.min_version = min_version
            self.max_version = max_version
            self.client = client
            self.children = children


    class Welcome(Twin):
        __slots__ = ('version', 'instance_id', 'pid', 'server', 'children', 'more',)
        TYPE = 2

        def __init__(self, version, instance_id, pid, server, children, more=False):
            self.version = version
            self.instance_id = instance_id
            self.pid = pid
            self.server = server
            self.children = children
            self.more = more


    class Refused(Twin):
        __slots__ = ('reason', 'min_version', 'max_version',)
        TYPE = 3

        def __init__(self, reason, min_version, max_version):
            self.reason = reason
            self.min_version = min_version
            self.max_version = max_version


    class Launch(Twin):
        __slots__ = ('req', 'argv', 'env', 'cwd', 'rows', 'cols', 'name', 'linger', 'hold',)
        TYPE = 10

        def __init__(self, req, argv, env, cwd, rows=24, cols=80, name='', linger=None, hold=True):
            self.req = req
            self.argv = argv
            self.env = env
            self.cwd = cwd
            self.rows = rows
            self.cols = cols
            self.name = name
            self.linger = linger
            self.hold = hold


    class Claim(Twin):
        __slots__ = ('req', 'ids', 'steal', 'keep_output',)
        TYPE = 11

        def __init__(self, req, ids, steal=False, keep_output=False):
            self.req = req
            self.ids = ids
            self.steal = steal
            self.keep_output = keep_output


    class Release(Twin):
        __slots__ = ('req', 'ids', 'replace_output', 'output',)
        TYPE = 12
        BLOB = 'output'

        def __init__(self, req, ids, replace_output=False, output=b''):
            self.req = req
            self.ids = ids
            self.replace_output = replace_output
            self.output = output


    class Signal(Twin):
        __slots__ = ('req', 'id', 'signum',)
        TYPE = 13

        def __init__(self, req, id, signum):
            self.req = req
            self.id = id
            self.signum = signum


    class Collect(Twin):
        __slots__ = ('req', 'id',)
        TYPE = 14

        def __init__(self, req, id):
            self.req = req
            self.id = id


    class ListChildren(Twin):
        __slots__ = ('req', 'foreground', 'prefixes', 'ids',)
        TYPE = 15

        def __init__(self, req, foreground=False, prefixes=None, ids=None):
            self.req = req
            self.foreground = foreground
            self.prefixes = prefixes
            self.ids = ids


    class Peek(Twin):
        __slots__ = ('req', 'id', 'max_bytes',)
        TYPE = 16

        def __init__(self, req, id, max_bytes=None):
            self.req = req
            self.id = id
            self.max_bytes = max_bytes


    class Resize(Twin):
        __slots__ = ('req', 'id', 'rows', 'cols',)
        TYPE = 17

        def __init__(self, req, id, rows, cols):
            self.req = req
            self.id = id
            self.rows = rows
            self.cols = cols


    class Shutdown(Twin):
        __slots__ = ('req', 'force',)
        TYPE = 18

        def __init__(self, req, force=False):
            self.req = req
            self.force = force


    class Upgrade(Twin):
        __slots__ = ('req',)
        TYPE = 19

        def __init__(self, req):
            self.req = req


    class Launched(Twin):
        __slots__ = ('req', 'child',)
        TYPE = 30

        def __init__(self, req, child):
            self.req = req
            self.child = child


    class Claimed(Twin):
        __slots__ = ('req', 'children', 'last', 'outputs',)
        TYPE = 31
        BLOB = 'outputs'

        def __init__(self, req, children, last=True, outputs=b''):
            self.req = req
            self.children = children
            self.last = last
            self.outputs = outputs


    class ChildError(Twin):
        __slots__ = ('req', 'id', 'errno', 'message',)
        TYPE = 32

        def __init__(self, req, id, errno, message):
            self.req = req
            self.id = id
            self.errno = errno
            self.message = message


    class Released(Twin):
        __slots__ = ('req', 'ids',)
        TYPE = 33

        def __init__(self, req, ids):
            self.req = req
            self.ids = ids


    class Ok(Twin):
        __slots__ = ('req',)
        TYPE = 34

        def __init__(self, req):
            self.req = req


    class Collected(Twin):
        __slots__ = ('req', 'child',)
        TYPE = 35

        def __init__(self, req, child):
            self.req = req
            self.child = child


    class Children(Twin):
        __slots__ = ('req', 'children', 'last',)
        TYPE = 36

        def __init__(self, req, children, last=True):
            self.req = req
            self.children = children
            self.last = last


    class Peeked(Twin):
        __slots__ = ('req', 'child', 'dropped', 'output',)
        TYPE = 37
        BLOB = 'output'

        def __init__(self, req, child, dropped, output=b''):
            self.req = req
            self.child = child
            self.dropped = dropped
            self.output = output


    class Error(Twin):
        __slots__ = ('req', 'errno', 'message',)
        TYPE = 38

        def __init__(self, req, errno, message):
            self.req = req
            self.errno = errno
            self.message = message


    class Upgraded(Twin):
        __slots__ = ('req', 'pid', 'old_server', 'server', 'paused',)
        TYPE = 39

        def __init__(self, req, pid, old_server, server, paused):
            self.req = req
            self.pid = pid
            self.old_server = old_server
            self.server = server
            self.paused = paused


    class ChildExited(Twin):
        __slots__ = ('id', 'exit_code',)
        TYPE = 50

        def __init__(self, id, exit_code):
            self.id = id
            self.exit_code = exit_code


    class ChildTaken(Twin):
        __slots__ = ('id',)
        TYPE = 51

        def __init__(self, id):
            self.id = id

    LightChildExited = ChildExited
    LightChildTaken = ChildTaken


# name -> ((field, kind, default or REQUIRED, omitted at its default), ...)
FIELDS: dict[str, tuple[tuple[str, str, object, bool], ...]] = {
    'ChildInfo': (
        ('id', 'int', 'REQUIRED', False),
        ('pid', 'int', 'REQUIRED', False),
        ('name', 'str', 'REQUIRED', False),
        ('argv', '[os]', 'REQUIRED', False),
        ('cwd', 'os', 'REQUIRED', False),
        ('tty', 'str', 'REQUIRED', False),
        ('rows', 'int', 'REQUIRED', False),
        ('cols', 'int', 'REQUIRED', False),
        ('state', 'lit:running|exited', 'REQUIRED', False),
        ('exit_code', '?int', 'REQUIRED', False),
        ('held', 'bool', 'REQUIRED', False),
        ('buffered_bytes', 'int', 'REQUIRED', False),
        ('dropped_bytes', 'int', 'REQUIRED', False),
        ('started_at', 'float', 'REQUIRED', False),
        ('exited_at', '?float', 'REQUIRED', False),
        ('linger', '?float', 'REQUIRED', False),
        ('fg_pid', '?int', None, False),
        ('fg_cwd', '?os', None, False),
        ('fg_argv', '?[os]', None, False),
        ('argv_omitted', 'int', 0, True),
    ),
    'ClaimedChild': (
        ('id', 'int', 'REQUIRED', False),
        ('child', '?ChildInfo', None, False),
        ('dropped', 'int', 0, False),
        ('output_len', 'int', 0, False),
        ('fd', 'bool', False, False),
        ('errno', 'int', 0, False),
        ('message', 'str', '', False),
    ),
    'Hello': (
        ('min_version', 'int', 'REQUIRED', False),
        ('max_version', 'int', 'REQUIRED', False),
        ('client', 'str', '', True),
        ('children', 'bool', True, True),
    ),
    'Welcome': (
        ('version', 'int', 'REQUIRED', False),
        ('instance_id', 'str', 'REQUIRED', False),
        ('pid', 'int', 'REQUIRED', False),
        ('server', 'str', 'REQUIRED', False),
        ('children', '[ChildInfo]', 'REQUIRED', False),
        ('more', 'bool', False, True),
    ),
    'Refused': (
        ('reason', 'str', 'REQUIRED', False),
        ('min_version', 'int', 'REQUIRED', False),
        ('max_version', 'int', 'REQUIRED', False),
    ),
    'Launch': (
        ('req', 'int', 'REQUIRED', False),
        ('argv', '[os]', 'REQUIRED', False),
        ('env', 'env', 'REQUIRED', False),
        ('cwd', 'os', 'REQUIRED', False),
        ('rows', 'int', 24, False),
        ('cols', 'int', 80, False),
        ('name', 'str', '', False),
        ('linger', '?float', None, False),
        ('hold', 'bool', True, False),
    ),
    'Claim': (
        ('req', 'int', 'REQUIRED', False),
        ('ids', '[int]', 'REQUIRED', False),
        ('steal', 'bool', False, False),
        ('keep_output', 'bool', False, False),
    ),
    'Release': (
        ('req', 'int', 'REQUIRED', False),
        ('ids', '[int]', 'REQUIRED', False),
        ('replace_output', 'bool', False, False),
        ('output', 'bytes', b'', False),
    ),
    'Signal': (
        ('req', 'int', 'REQUIRED', False),
        ('id', 'int', 'REQUIRED', False),
        ('signum', 'int', 'REQUIRED', False),
    ),
    'Collect': (
        ('req', 'int', 'REQUIRED', False),
        ('id', 'int', 'REQUIRED', False),
    ),
    'ListChildren': (
        ('req', 'int', 'REQUIRED', False),
        ('foreground', 'bool', False, False),
        ('prefixes', '?[str]', None, True),
        ('ids', '?[int]', None, True),
    ),
    'Peek': (
        ('req', 'int', 'REQUIRED', False),
        ('id', 'int', 'REQUIRED', False),
        ('max_bytes', '?int', None, False),
    ),
    'Resize': (
        ('req', 'int', 'REQUIRED', False),
        ('id', 'int', 'REQUIRED', False),
        ('rows', 'int', 'REQUIRED', False),
        ('cols', 'int', 'REQUIRED', False),
    ),
    'Shutdown': (
        ('req', 'int', 'REQUIRED', False),
        ('force', 'bool', False, False),
    ),
    'Upgrade': (
        ('req', 'int', 'REQUIRED', False),
    ),
    'Launched': (
        ('req', 'int', 'REQUIRED', False),
        ('child', 'ChildInfo', 'REQUIRED', False),
    ),
    'Claimed': (
        ('req', 'int', 'REQUIRED', False),
        ('children', '[ClaimedChild]', 'REQUIRED', False),
        ('last', 'bool', True, False),
        ('outputs', 'bytes', b'', False),
    ),
    'ChildError': (
        ('req', 'int', 'REQUIRED', False),
        ('id', 'int', 'REQUIRED', False),
        ('errno', 'int', 'REQUIRED', False),
        ('message', 'str', 'REQUIRED', False),
    ),
    'Released': (
        ('req', 'int', 'REQUIRED', False),
        ('ids', '[int]', 'REQUIRED', False),
    ),
    'Ok': (
        ('req', 'int', 'REQUIRED', False),
    ),
    'Collected': (
        ('req', 'int', 'REQUIRED', False),
        ('child', 'ChildInfo', 'REQUIRED', False),
    ),
    'Children': (
        ('req', 'int', 'REQUIRED', False),
        ('children', '[ChildInfo]', 'REQUIRED', False),
        ('last', 'bool', True, True),
    ),
    'Peeked': (
        ('req', 'int', 'REQUIRED', False),
        ('child', 'ChildInfo', 'REQUIRED', False),
        ('dropped', 'int', 'REQUIRED', False),
        ('output', 'bytes', b'', False),
    ),
    'Error': (
        ('req', '?int', 'REQUIRED', False),
        ('errno', 'int', 'REQUIRED', False),
        ('message', 'str', 'REQUIRED', False),
    ),
    'Upgraded': (
        ('req', 'int', 'REQUIRED', False),
        ('pid', 'int', 'REQUIRED', False),
        ('old_server', 'str', 'REQUIRED', False),
        ('server', 'str', 'REQUIRED', False),
        ('paused', 'float', 'REQUIRED', False),
    ),
    'ChildExited': (
        ('id', 'int', 'REQUIRED', False),
        ('exit_code', 'int', 'REQUIRED', False),
    ),
    'ChildTaken': (
        ('id', 'int', 'REQUIRED', False),
    ),
}
REQUIRED = 'REQUIRED'
# type code -> class name; the codes a client sends; fds a message may carry
TYPES: dict[int, str] = {1: 'Hello', 2: 'Welcome', 3: 'Refused', 10: 'Launch', 11: 'Claim', 12: 'Release', 13: 'Signal', 14: 'Collect', 15: 'ListChildren', 16: 'Peek', 17: 'Resize', 18: 'Shutdown', 19: 'Upgrade', 30: 'Launched', 31: 'Claimed', 32: 'ChildError', 33: 'Released', 34: 'Ok', 35: 'Collected', 36: 'Children', 37: 'Peeked', 38: 'Error', 39: 'Upgraded', 50: 'ChildExited', 51: 'ChildTaken'}
CLIENT: frozenset[int] = frozenset({1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19})
MAX_FDS: dict[int, int] = {30: 1, 31: 253}
