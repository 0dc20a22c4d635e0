"""Finding sessions by name across the user's daemons, never hanging on one.

A name the saved arrangement knows is looked up where it lives: one daemon,
one round trip, however many sessions the others hold. Otherwise each daemon
found in the socket dirs is asked, concurrently (a thread each), each under
its own bound; a daemon that does not answer in time is reported, not
waited for. Blocking calls only: no trio.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import attrs

from multiserver import (
    ChildInfo,
    DaemonNotRunning,
    DaemonPaths,
    MultiserverError,
    TimedOut,
    UnsafeDirectory,
    dial_blocking,
)
from multiserver._messages import NAME_RE
from multiserver._paths import find_sockets
from multiserver_cli._errors import CliError
from restore import ArrangementStore

# How long one daemon may take to say hello before it is reported as unresponsive.
SCAN_TIMEOUT = 2.0
# How long a command waits for its daemon (to start, or to answer) at most.
REQUEST_TIMEOUT = 10.0


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise CliError(
            f"bad session name {name!r}: use letters, digits, '_', '.', '-' (first a letter or digit, at most 128)",
            2,
        )
    return name


@attrs.frozen
class DaemonView:
    socket: Path
    instance_id: str
    pid: int
    children: list[ChildInfo]


@attrs.frozen
class Scan:
    daemons: list[DaemonView]
    problems: list[str]  # one line each: unresponsive or refused daemons


def _ask(sock_path: Path, foreground: bool) -> DaemonView | str | None:
    """One daemon's children (``foreground``: with their foreground
    processes); a line saying why not; None if none runs there."""
    try:
        with dial_blocking(
            sock_path, children=not foreground, deadline=time.monotonic() + SCAN_TIMEOUT
        ) as client:
            children = client.list(foreground=True) if foreground else client.welcome.children
            return DaemonView(sock_path, client.instance_id, client.daemon_pid, list(children))
    except DaemonNotRunning:
        return None
    except TimedOut:
        return f"{sock_path}: daemon did not answer within {SCAN_TIMEOUT:g} s"
    except UnsafeDirectory as exc:
        return f"skipped {sock_path}: {exc}"
    except MultiserverError as exc:
        return f"{sock_path}: {exc}"


def scan(number: int | None = None, *, foreground: bool = False) -> Scan:
    """Ask every daemon (or only daemon ``number``) for its children, all at
    once: the whole scan takes about SCAN_TIMEOUT at most."""
    sockets = [DaemonPaths.for_number(number).socket] if number is not None else find_sockets()
    answers: list[DaemonView | str | None] = [None] * len(sockets)

    def ask(i: int) -> None:
        answers[i] = _ask(sockets[i], foreground)

    threads = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(1, len(sockets))]
    for t in threads:
        t.start()
    if sockets:
        ask(0)
    for t in threads:
        t.join()
    daemons = [a for a in answers if isinstance(a, DaemonView)]
    problems = [a for a in answers if isinstance(a, str)]
    return Scan(daemons, problems)


@attrs.frozen
class Located:
    socket: Path
    instance_id: str
    child: ChildInfo


SavedKey = tuple[str, str, int]  # daemon socket, daemon instance id, child id


def saved_names(store: ArrangementStore | None) -> dict[SavedKey, str]:
    """The saved sessions' names by the child they refer to: a saved name
    (an adopted orphan's, say) comes before the daemon's name for its child."""
    leaves = store.load().leaves() if store is not None else []
    return {
        (leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id): leaf.name
        for leaf in leaves
        if leaf.ref is not None
    }


def _where_saved(name: str, number: int | None, store: ArrangementStore | None) -> Located | None:
    """The saved session ``name``, asked of its own daemon only: one round
    trip. None if the store does not know it, or its child is gone."""
    leaf = store.load().find(name) if store is not None else None
    if leaf is None or leaf.ref is None:
        return None
    ref = leaf.ref
    if number is not None and Path(ref.socket) != DaemonPaths.for_number(number).socket:
        return None
    try:
        with dial_blocking(
            Path(ref.socket), children=False, deadline=time.monotonic() + SCAN_TIMEOUT
        ) as client:
            if client.instance_id != ref.instance_id:
                return None
            child = client.peek(ref.child_id, 0).child
    except MultiserverError:
        return None  # gone, or not answering: the scan says which
    # Shown under the name the user knows it by.
    return Located(Path(ref.socket), ref.instance_id, attrs.evolve(child, name=name))


def find_session(name: str, number: int | None, store: ArrangementStore | None) -> Located:
    """The session called ``name``: the saved session of that name if its
    child lives (an adopted orphan is saved under a name of its own), else
    the daemons' child of that name. CliError if none or several match."""
    check_name(name)
    found = _where_saved(name, number, store)
    if found is not None:
        return found
    result = scan(number)
    saved = saved_names(store)
    matches = [
        Located(d.socket, d.instance_id, attrs.evolve(c, name=name))
        for d in result.daemons
        for c in d.children
        if saved.get((str(d.socket), d.instance_id, c.id)) == name
    ]
    if not matches:
        matches = [
            Located(d.socket, d.instance_id, c)
            for d in result.daemons
            for c in d.children
            if c.name == name
        ]
    if not matches:
        extra = f" ({'; '.join(result.problems)})" if result.problems else ""
        raise CliError(f"no session named {name!r}{extra}")
    if len(matches) > 1:
        raise CliError(f"several sessions are named {name!r}; choose one with --daemon N")
    return matches[0]


def check_name_free(name: str, socket: Path, store: ArrangementStore | None) -> None:
    """Refuse ``name`` for a new session on the daemon at ``socket`` while a
    saved session of that name lives on another daemon. (Each daemon keeps
    its own children's names apart; the saved arrangement spans them all,
    and a new leaf would take the name from the live one.)"""
    leaf = store.load().find(name) if store is not None else None
    if leaf is None or leaf.ref is None or leaf.ref.socket == str(socket):
        return
    ref = leaf.ref
    alive = False
    try:  # a wedged daemon does not hold the name
        with dial_blocking(
            Path(ref.socket), children=False, deadline=time.monotonic() + SCAN_TIMEOUT
        ) as client:
            if client.instance_id == ref.instance_id:
                client.peek(ref.child_id, 0)
                alive = True
    except MultiserverError:  # gone, or the child is unknown (ENOENT)
        pass
    if alive:
        raise CliError(
            f"a session named {name!r} already runs on {Path(ref.socket).name};"
            " choose another name (or attach to it)"
        )
