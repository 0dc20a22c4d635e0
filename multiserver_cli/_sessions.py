"""Finding sessions by name across the user's daemons, never hanging on one.

Each daemon found in the socket dirs is asked concurrently, each under its own
bound; a daemon that does not answer in time is reported, not waited for.
What a name means is decided by ``_names`` from what they said (a
``Survey``); this module only gathers it.
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
)
from multiserver._codec import Codec
from multiserver._paths import find_sockets
from multiserver._wire import FramedSocket
from multiserver_cli._names import (
    DaemonView,
    Found,
    Resolution,
    SavedOnly,
    Session,
    Survey,
    name_problem,
    resolve,
)
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


def check_name(name: str, *, new: bool = False) -> str:
    """``name``, or CliError (status 2) if it cannot name a session (``new``:
    a new session)."""
    problem = name_problem(name, new=new)
    if problem is not None:
        raise CliError(problem, 2)
    return name


@attrs.frozen
class Scan:
    daemons: list[DaemonView]
    problems: list[str]  # one line each: unresponsive or refused daemons
    silent: frozenset[str] = frozenset()  # the sockets of those daemons


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
    silent: set[str] = set()
    problems: list[str] = []

    async def ask(path: Path) -> None:
        mine: list[str] = []
        await _ask(path, daemons, mine)
        if mine:
            silent.add(str(path))
            problems.extend(mine)

    async with trio.open_nursery() as nursery:
        for path in sockets:
            nursery.start_soon(ask, path)
    order = {p: i for i, p in enumerate(sockets)}
    daemons.sort(key=lambda d: order[d.socket])
    return Scan(daemons, problems, frozenset(silent))


async def survey(number: int | None = None) -> Survey:
    """What names are decided on: every daemon's children (or daemon
    ``number``'s only) and the saved sessions."""
    result = await scan(number)
    with open_store() as store:
        saved = store.load().leaves() if store is not None else []
    return Survey(result.daemons, result.silent, saved, result.problems)


@attrs.frozen
class Located:
    socket: Path
    instance_id: str
    child: ChildInfo  # under the name the user knows it by


def located(session: Session) -> Located:
    assert session.child is not None
    return Located(Path(session.socket), session.instance_id, session.child)


def scope_of(number: int | None) -> Path | None:
    return None if number is None else DaemonPaths.for_number(number).socket


async def lookup(name: str, number: int | None, command: str) -> Resolution:
    """What ``name`` names for ``command`` (``_names.resolve``). With
    ``number`` (``--daemon N``) only that daemon's children are candidates;
    every daemon is asked either way, as a saved session whose child lives
    on another daemon is not one "saved, not running"."""
    check_name(name)
    return resolve(await survey(), name, command=command, scope=scope_of(number))


def live_or_fail(name: str, found: Resolution) -> Located:
    """The live session of a resolution; CliError if none, several, or a
    saved session with no live child."""
    if isinstance(found, Found):
        return located(found.session)
    if isinstance(found, SavedOnly):
        raise CliError(
            f"session {name!r} is {found.session.state}; `multiserver restore` brings it"
            f" back, `multiserver kill {name}` forgets it"
        )
    raise CliError(found.message)


async def find_session(name: str, number: int | None, command: str) -> Located:
    """The live session called ``name`` (see ``lookup``)."""
    return live_or_fail(name, await lookup(name, number, command))
