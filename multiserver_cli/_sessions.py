"""Finding sessions by name across the user's daemons, never hanging on one.

What a name means is decided by ``_names`` from what the daemons said and
what the store saved (a ``Survey``); this module only gathers it. A name the
saved arrangement knows is looked up where it lives first: one daemon, one
round trip, however many sessions the others hold. Otherwise every daemon
found in the socket dirs is asked, concurrently (a thread each), each under
its own bound; a daemon that does not answer in time is reported, not
waited for. A command's own talk with its daemon is bounded too
(``deadline``, ``bounded``: REQUEST_TIMEOUT), being attached aside.
Blocking calls only: no trio.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from multiserver import (
    DaemonNotRunning,
    DaemonPaths,
    MultiserverError,
    SyncClient,
    TimedOut,
    UnsafeDirectory,
)
from multiserver.internal import find_sockets, record, replaced, unsafe_socket_dirs
from multiserver_cli._dial import dial
from multiserver_cli._errors import CliError
from multiserver_cli._names import (
    DaemonView,
    Found,
    Resolution,
    SavedOnly,
    Session,
    Survey,
    advice,
    name_problem,
    resolve,
)
from multiserver_cli._narrow import narrowed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from typing import TypeVar

    from multiserver import ChildInfo
    from multiserver_cli._saved import Saved
    from restore import RestorationRef, SessionLeaf

    A = TypeVar("A")
    R = TypeVar("R")

# How long one daemon may take to say hello before it is reported as unresponsive.
SCAN_TIMEOUT = 2.0
# How long a command waits for its daemon (to start, or to answer) at most.
REQUEST_TIMEOUT = 10.0


def deadline() -> float:
    """The bound of a command's talk with its daemon, from now."""
    return time.monotonic() + REQUEST_TIMEOUT


@contextlib.contextmanager
def bounded(what: str) -> Iterator[None]:
    """TimedOut as one line: the daemon took longer than REQUEST_TIMEOUT."""
    try:
        yield
    except TimedOut:
        raise CliError(f"{what}: the daemon did not answer within {REQUEST_TIMEOUT:g} s") from None


def check_name(name: str, *, new: bool = False) -> str:
    """``name``, or CliError (status 2) if it cannot name a session (``new``:
    a new session)."""
    problem = name_problem(name, new=new)
    if problem is not None:
        raise CliError(problem, 2)
    return name


@record
class Scan:
    daemons: list[DaemonView]
    problems: list[str]  # one line each: unresponsive or refused daemons
    silent: frozenset[str] = frozenset()  # the sockets of those daemons


def at_once(items: Sequence[A], fn: Callable[[A], R]) -> list[R]:
    """``fn`` of each item, all at once (the first in this thread, the
    others in threads of their own): as long as the slowest, not the sum."""
    answers: dict[int, R] = {}

    def one(i: int) -> None:
        answers[i] = fn(items[i])

    threads = []
    if len(items) > 1:
        import threading  # not for one daemon, the common case: ls need not load it

        threads = [
            threading.Thread(target=one, args=(i,), daemon=True) for i in range(1, len(items))
        ]
    for t in threads:
        t.start()
    if items:
        one(0)
    for t in threads:
        t.join()
    return [answers[i] for i in range(len(items))]


def ask_daemon(
    sock_path: Path, work: Callable[[SyncClient], R], *, children: bool = False
) -> R | str | None:
    """``work`` done with the daemon at ``sock_path`` within SCAN_TIMEOUT;
    a line saying why not; None if no daemon runs there."""
    try:
        with dial(sock_path, children=children, deadline=time.monotonic() + SCAN_TIMEOUT) as client:
            return work(client)
    except DaemonNotRunning:
        return None
    except TimedOut:
        return f"{sock_path}: daemon did not answer within {SCAN_TIMEOUT:g} s"
    except UnsafeDirectory as exc:
        return f"skipped {sock_path}: {exc}"
    except MultiserverError as exc:
        return f"{sock_path}: {exc}"


def _ask(
    sock_path: Path, foreground: bool, select: Selection | None = None
) -> DaemonView | str | None:
    """One daemon's children (``foreground``: with their foreground
    processes; ``select``: only those it selects); a line saying why not;
    None if none runs there."""

    def view(client: SyncClient) -> DaemonView:
        if select is not None:
            ids = select.ids.get(os.path.normpath(sock_path), ())
            children = client.list(foreground=foreground, prefixes=[select.prefix], ids=ids)
        elif foreground:
            children = client.list(foreground=True)
        else:
            children = client.welcome.children
        return DaemonView(sock_path, client.instance_id, client.daemon_pid, list(children))

    return ask_daemon(sock_path, view, children=not foreground and select is None)


@record
class Selection:
    """Which children of each daemon a command about one session asks for:
    those whose name begins with ``prefix``, and by daemon socket
    (normalised), the ids its saved sessions refer to."""

    prefix: str
    ids: dict[str, list[int]]


def scan(
    number: int | None = None,
    *,
    foreground: bool = False,
    also: Iterable[str] = (),
    select: Selection | None = None,
) -> Scan:
    """Ask every daemon (or only daemon ``number``) for its children, all at
    once: the whole scan takes about SCAN_TIMEOUT at most. ``also``: more
    sockets to ask, where a file is (saved sessions' daemons elsewhere).
    ``select``: only the children it selects."""
    if number is not None:
        sockets = [DaemonPaths.for_number(number).socket]
    else:
        sockets = find_sockets()
        known = {os.path.normpath(p) for p in sockets}
        for extra in dict.fromkeys(os.path.normpath(a) for a in also):
            if extra not in known and os.path.exists(extra):
                sockets.append(Path(extra))
    # A socket dir nobody should trust is said once, even with no socket in
    # it (missing, under a dir another user owns: no daemon can start
    # there); the sockets in it are not asked, and count as silent.
    unsafe = unsafe_socket_dirs(None if number is None else [sockets[0].parent])
    asked = [s for s in sockets if s.parent not in unsafe]
    answers = at_once(asked, lambda sock: _ask(sock, foreground, select))
    daemons = [a for a in answers if isinstance(a, DaemonView)]
    problems = [str(exc) for exc in unsafe.values()] + [a for a in answers if isinstance(a, str)]
    silent = [s for s, a in zip(asked, answers, strict=True) if isinstance(a, str)]
    silent += [s for s in sockets if s.parent in unsafe]
    return Scan(daemons, problems, frozenset(str(s) for s in silent))


def survey(saved: Saved, number: int | None = None, *, foreground: bool = False) -> Survey:
    """What names are decided on: every daemon's children (or daemon
    ``number``'s only; ``foreground``: with where their foreground process
    is) and the saved sessions. The daemons saved sessions
    live on are asked wherever they are: a state dir shared by two logins
    whose runtime dirs differ (one with ``$XDG_RUNTIME_DIR``, an ssh login
    without) names daemons of the other's."""
    leaves = saved.leaves()
    # Another host's sessions (HOST:NAME) are that host's to answer for:
    # no daemon here has them, and their names cannot be one here.
    here = [leaf for leaf in leaves if leaf.host is None]
    elsewhere = [leaf.name for leaf in leaves if leaf.host is not None]
    refs = (leaf.ref.socket for leaf in here if leaf.ref is not None)
    result = scan(number, foreground=foreground, also=refs)
    return Survey(result.daemons, result.silent, here, result.problems, elsewhere)


def survey_about(saved: Saved, name: str) -> Survey:
    """``survey`` for a command about the one session ``name``, as
    ``_narrow.narrowed`` cuts it: every daemon is asked, but only for the
    children that bear on the name, and the store only for the saved
    sessions that do. Decides on ``name`` as the whole survey would, at a
    cost that does not grow with the sessions it does not touch."""
    from restore import late_family

    prefix = late_family(name)
    first = saved.about(prefix, name)
    ids: dict[str, list[int]] = {}
    for leaf in first:
        if leaf.host is None and leaf.ref is not None:
            ids.setdefault(os.path.normpath(leaf.ref.socket), []).append(leaf.ref.child_id)
    result = scan(also=saved.ref_sockets(), select=Selection(prefix, ids))
    found = [
        (os.path.normpath(d.socket), d.instance_id, c.id)
        for d in result.daemons
        for c in d.children
    ]
    more = saved.referring(found)
    seen = {leaf.name for leaf in first}
    leaves = [*first, *(leaf for leaf in more if leaf.name not in seen)]
    here = [leaf for leaf in leaves if leaf.host is None]
    elsewhere = [leaf.name for leaf in leaves if leaf.host is not None]
    whole = Survey(result.daemons, result.silent, here, result.problems, elsewhere)
    return narrowed(whole, name)


@record
class Located:
    socket: Path
    instance_id: str
    child: ChildInfo  # under the name the user knows it by


def located(session: Session) -> Located:
    assert session.child is not None
    return Located(Path(session.socket), session.instance_id, session.child)


def scope_of(number: int | None) -> Path | None:
    return None if number is None else DaemonPaths.for_number(number).socket


def _saved_ref(name: str, number: int | None, saved: Saved) -> RestorationRef | None:
    """The ref of the saved session ``name`` when its own daemon alone can
    answer for it: only while one daemon runs (with several, a child of
    another daemon may have the same name: old data, or a race, and only
    asking them all can tell), and within ``--daemon N``'s scope. None
    otherwise, or if the store does not know the name."""
    if len(find_sockets()) > 1:
        return None
    leaf = saved.find(name)
    if leaf is None or leaf.ref is None:
        return None
    if number is not None and Path(leaf.ref.socket) != DaemonPaths.for_number(number).socket:
        return None
    return leaf.ref


@contextlib.contextmanager
def saved_daemon(
    name: str, number: int | None, saved: Saved
) -> Iterator[tuple[SyncClient, RestorationRef] | None]:
    """A connection to the saved session ``name``'s own daemon, the run its
    ref names (``_saved_ref``), open for the block; None when there is
    none to ask (or it did not answer: the survey then says why)."""
    ref = _saved_ref(name, number, saved)
    client = None
    if ref is not None:
        with contextlib.suppress(MultiserverError):
            client = dial(
                Path(ref.socket), children=False, deadline=time.monotonic() + SCAN_TIMEOUT
            )
    if client is None or ref is None:
        yield None
        return
    with client:
        yield (client, ref) if client.instance_id == ref.instance_id else None


def _where_saved(name: str, number: int | None, saved: Saved) -> Located | None:
    """The saved session ``name``, asked of its own daemon only: one round
    trip, without listing its children. None if it cannot be asked so, or
    its child is not there."""
    with saved_daemon(name, number, saved) as there:
        if there is None:
            return None
        client, ref = there
        try:
            child = client.peek(ref.child_id, 0).child
        except MultiserverError:
            return None  # gone, or not answering: the survey says which
    return Located(Path(ref.socket), ref.instance_id, replaced(child, name=name))


def lookup(
    name: str, number: int | None, command: str, saved: Saved, *, own_daemon: bool = True
) -> Resolution | Located:
    """What ``name`` names for ``command``: the saved session's live child,
    asked of its daemon alone; else ``_names.resolve`` over every daemon.
    With ``number`` (``--daemon N``) only that daemon's children are
    candidates; every daemon is asked either way, as a saved session whose
    child lives on another daemon is not one "saved, not running".
    ``own_daemon`` False: the caller asked that daemon already
    (``saved_daemon``), and it is not asked (nor waited for) again."""
    check_name(name)
    found = _where_saved(name, number, saved) if own_daemon else None
    if found is not None:
        return found
    return resolve(survey_about(saved, name), name, command=command, scope=scope_of(number))


def live_or_fail(name: str, found: Resolution | Located) -> Located:
    """The live session of a resolution; CliError if none, several, or a
    saved session with no live child."""
    if isinstance(found, Located):
        return found
    if isinstance(found, Found):
        return located(found.session)
    if isinstance(found, SavedOnly):
        raise CliError(f"session {name!r} is {found.session.state}; {advice(found.session)}")
    raise CliError(found.message)


def find_session(name: str, number: int | None, command: str, saved: Saved) -> Located:
    """The live session called ``name`` (see ``lookup``)."""
    return live_or_fail(name, lookup(name, number, command, saved))


def as_kept(leaf: SessionLeaf) -> SessionLeaf:
    """A saved leaf as its daemon last kept it on disk (newer than the
    saved arrangement): where its program was, how it ended, and the
    output it showed last."""
    from multiserver.internal import replaced
    from restore import kept_fields, kept_scrollback

    found = kept_fields(leaf.ref)
    changes: dict[str, object] = {k: found[k] for k in ("cwd", "exit_code") if k in found}
    scrollback = kept_scrollback(leaf.ref)
    if scrollback is not None:
        changes["scrollback"] = scrollback
    return replaced(leaf, **changes) if changes else leaf


def saved_end(resolution: Resolution | Located) -> SessionLeaf | None:
    """The saved leaf of a session whose program had ended, unseen, and
    whose daemon is gone (restore reported it ``ended`` and kept it), as
    its daemon kept it (``as_kept``): its output is all there is to show."""
    if isinstance(resolution, SavedOnly) and resolution.session.leaf is not None:
        kept = as_kept(resolution.session.leaf)
        return kept if kept.exit_code is not None else None
    return None
