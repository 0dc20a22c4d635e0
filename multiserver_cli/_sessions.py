"""Finding sessions by name across the user's daemons, never hanging on one.

Each daemon found in the socket dirs is asked concurrently, each under its own
bound; a daemon that does not answer in time is reported, not waited for.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import trio

from multiserver import (
    ChildInfo,
    DaemonNotRunning,
    DaemonPaths,
    MultiserverError,
    UnsafeDirectory,
    connect,
    handshake,
    open_client,
)
from multiserver._codec import Codec
from multiserver._messages import NAME_RE
from multiserver._paths import find_sockets
from multiserver._wire import FramedSocket
from multiserver_cli._state import open_store

# How long one daemon may take to say hello before it is reported as unresponsive.
SCAN_TIMEOUT = 2.0
# How long a command waits for its daemon (to start, or to answer) at most.
REQUEST_TIMEOUT = 10.0


class CliError(MultiserverError):
    """An error for the user: one line, exit status ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


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


async def _ask(sock_path: Path, out: list[DaemonView], problems: list[str]) -> None:
    with trio.move_on_after(SCAN_TIMEOUT) as scope:
        try:
            sock = await connect(sock_path)
        except DaemonNotRunning:
            return
        except UnsafeDirectory as exc:
            problems.append(f"skipped {sock_path}: {exc}")
            return
        except MultiserverError as exc:
            problems.append(f"{sock_path}: {exc}")
            return
        framed = FramedSocket(sock, Codec("client"))
        try:
            welcome = await handshake(framed)
        except MultiserverError as exc:
            problems.append(f"{sock_path}: {exc}")
            return
        finally:
            framed.close()
        out.append(DaemonView(sock_path, welcome.instance_id, welcome.pid, list(welcome.children)))
    if scope.cancelled_caught:
        problems.append(f"{sock_path}: daemon did not answer within {SCAN_TIMEOUT:g} s")


async def scan(number: int | None = None) -> Scan:
    """Ask every daemon (or only daemon ``number``) for its children."""
    sockets = [DaemonPaths.for_number(number).socket] if number is not None else find_sockets()
    daemons: list[DaemonView] = []
    problems: list[str] = []
    async with trio.open_nursery() as nursery:
        for path in sockets:
            nursery.start_soon(_ask, path, daemons, problems)
    order = {p: i for i, p in enumerate(sockets)}
    daemons.sort(key=lambda d: order[d.socket])
    return Scan(daemons, problems)


@attrs.frozen
class Located:
    socket: Path
    instance_id: str
    child: ChildInfo


async def find_session(name: str, number: int | None) -> Located:
    """The session called ``name``: the saved session of that name if its
    child lives (an adopted orphan is saved under a name of its own), else
    the daemons' child of that name. CliError if none or several match."""
    check_name(name)
    result = await scan(number)
    saved = saved_names()
    matches = [
        # Shown under the name the user knows it by.
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


async def check_name_free(name: str, socket: Path) -> None:
    """Refuse ``name`` for a new session on the daemon at ``socket`` while a
    saved session of that name lives on another daemon. (Each daemon keeps
    its own children's names apart; the saved arrangement spans them all,
    and a new leaf would take the name from the live one.)"""
    with open_store() as store:
        leaf = store.load().find(name) if store is not None else None
    if leaf is None or leaf.ref is None or leaf.ref.socket == str(socket):
        return
    ref = leaf.ref
    alive = False
    with trio.move_on_after(SCAN_TIMEOUT):  # a wedged daemon does not hold the name
        try:
            async with open_client(Path(ref.socket), children=False) as client:
                if client.instance_id == ref.instance_id:
                    await client.peek(ref.child_id, 0)
                    alive = True
        except MultiserverError:  # gone, or the child is unknown (ENOENT)
            pass
    if alive:
        raise CliError(
            f"a session named {name!r} already runs on {Path(ref.socket).name};"
            " choose another name (or attach to it)"
        )


SavedKey = tuple[str, str, int]  # daemon socket, daemon instance id, child id


def saved_names() -> dict[SavedKey, str]:
    """The saved sessions' names by the child they refer to: a saved name
    (an adopted orphan's, say) comes before the daemon's name for its child."""
    with open_store() as store:
        leaves = store.load().leaves() if store is not None else []
    return {
        (leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id): leaf.name
        for leaf in leaves
        if leaf.ref is not None
    }
