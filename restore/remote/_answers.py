"""What a host's answers mean (pure: no ssh, no store).

A host is asked with its own ``multiserver ls --json``; its rows become
ChildInfo (``listed_child``), the command line's rows (``parse_listing``)
or the restore's HostAnswer (``host_answer``), and a failure to ask
becomes the HostAnswer of its kind (``failed_answer``). A session is made
there with ``new --relaunch`` (``start_request``) and saved here from the row its
host lists for it (``leaf_there``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from multiserver import ChildInfo
from restore._plan import HostAnswer, HostChild
from restore.remote._errors import HostFailure
from restore.remote._hosts import Host
from restore.store._model import RestorationRef, SessionLeaf

LS = ("ls", "--json")


@attrs.frozen
class RemoteSession:
    """A session of a host, as its ``ls --json`` gave it."""

    host: str
    child: ChildInfo
    waiting: tuple[int, int] | None
    raw: dict[str, object]


def listed_child(raw: dict[str, object], name: str) -> ChildInfo:
    """A session of a host's ``ls --json`` as a ChildInfo called ``name``
    (``HOST:NAME`` for ``ls`` here, its own name for the adopter);
    ValueError if it is not one."""
    try:
        return ChildInfo(
            id=int(raw["id"]),  # type: ignore[call-overload]
            pid=int(raw["pid"]),  # type: ignore[call-overload]
            name=name,
            argv=[str(a) for a in raw["argv"]],  # type: ignore[attr-defined]
            cwd=str(raw["cwd"]),
            tty=str(raw["tty"]),
            rows=0,
            cols=0,
            state="exited" if raw["state"] == "exited" else "running",
            exit_code=None if raw["exit_code"] is None else int(raw["exit_code"]),  # type: ignore[call-overload]
            held=bool(raw["held"]),
            buffered_bytes=int(raw["buffered_bytes"]),  # type: ignore[call-overload]
            dropped_bytes=int(raw["dropped_bytes"]),  # type: ignore[call-overload]
            started_at=float(raw["started_at"]),  # type: ignore[arg-type]
            exited_at=None if raw["exited_at"] is None else float(raw["exited_at"]),  # type: ignore[arg-type]
            linger=None if raw["linger"] is None else float(raw["linger"]),  # type: ignore[arg-type]
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not a session: {exc}") from exc


def parse_listing(host: str, answer: object) -> list[RemoteSession]:
    """A host's ``ls --json`` answer, for ``ls`` here; ValueError if it is
    not one (whatever is wrong with it: ``ls`` says it in the host's one
    line and lists the other hosts)."""
    if not isinstance(answer, list):
        raise ValueError("its ls --json is not a list")
    out = []
    for raw in answer:
        if not isinstance(raw, dict):
            raise ValueError("its ls --json holds something that is not a session")
        if raw.get("id", 0) is None:
            continue  # saved there, with no live child: nothing of it runs to reach
        name = raw.get("name")
        if not isinstance(name, str):
            raise ValueError(f"its ls --json holds a session with no name: {str(raw)[:60]!r}")
        child = listed_child(raw, f"{host}:{name}")
        waiting = None
        if not child.held:
            try:
                waiting = (
                    int(raw.get("waiting_bytes", 0)),
                    int(raw.get("waiting_dropped_bytes", 0)),
                )
            except (TypeError, ValueError) as exc:
                raise ValueError(f"not a session: {exc}") from exc
        out.append(RemoteSession(host, child, waiting, raw))
    return out


def host_answer(host: str, got: object) -> HostAnswer:
    """A host's ``ls --json`` answer, for the restore: its own sessions by
    name, and every row as a whole (for the adopter). Rows that are not
    sessions (an ended one whose daemon is gone there, garbage) are passed
    over; an answer that is no list is ``failed``."""
    if not isinstance(got, list):
        return HostAnswer("failed", host, why=f"{host}: its ls --json is not a list")
    sessions: dict[str, tuple[str, int, int, str, int | None]] = {}
    children: list[HostChild] = []
    for raw in got:
        try:
            via = raw.get("host")
            if via is None:  # its own sessions, not its hosts'
                sessions[str(raw["name"])] = (
                    str(raw["daemon_instance"]),
                    int(raw["id"]),
                    int(raw["pid"]),
                    str(raw["state"]),
                    None if raw["exit_code"] is None else int(raw["exit_code"]),
                )
            child = listed_child(raw, str(raw["name"]))
            children.append(
                HostChild(
                    str(raw["socket"]),
                    str(raw["daemon_instance"]),
                    child,
                    via=None if via is None else str(via),
                )
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return HostAnswer("listed", host, sessions, children=tuple(children))


def failed_answer(failure: HostFailure) -> HostAnswer:
    """A host that could not be asked, as the restore takes it: one that
    needs a credential is deferred, a silent one timed out, the rest
    failed."""
    if failure.kind == "credential":
        return HostAnswer("credential", failure.host, why=str(failure))
    if failure.kind == "silent":
        return HostAnswer("silent", failure.host, why=str(failure))
    return HostAnswer("failed", failure.host, why=str(failure))


def start_request(host: Host, name: str, argv: Sequence[str], cwd: str, why: str) -> list[str]:
    """Session ``name``, gone from ``host``, started again there in ``cwd``
    with its grace window as linger (``new --relaunch WHY``, which is ``-A
    -d``): a session of that name running there is taken as it; one the
    host saved, not running (the host rebooted: its store still names it)
    starts again keeping what the host saved of its screen; either way its
    first attach there shows that screen, then the marker and ``why``."""
    remote = ["new", "--relaunch", why, "-d", "-n", name, "--cwd", cwd]
    if host.grace is not None:
        remote += ["--linger", f"{host.grace:g}"]
    if argv:
        remote += ["--", *argv]
    return remote


def leaf_there(host: Host, name: str, got: object) -> SessionLeaf:
    """The saved session ``HOST:NAME`` of a session just made on ``host``,
    from its ``ls --json`` (``got``): its command and cwd as the host has
    them, and a ref to its child there. HostFailure (``garbage``) if the
    host does not list it as one."""
    for raw in got if isinstance(got, list) else []:
        if isinstance(raw, dict) and raw.get("name") == name and raw.get("host") is None:
            try:
                ref = RestorationRef(
                    str(raw["socket"]), str(raw["daemon_instance"]), int(raw["id"]), int(raw["pid"])
                )
                argv = [str(a) for a in raw["argv"]]
            except (KeyError, TypeError, ValueError) as exc:
                raise HostFailure(
                    host.name, "garbage", f"{host.name}: answered garbage for {name}: {exc}"
                ) from exc
            return SessionLeaf(
                f"{host.name}:{name}",
                argv,
                str(raw.get("cwd") or "/"),
                ref=ref,
                host=host.name,
                created_at=time.time(),
            )
    raise HostFailure(host.name, "error", f"{host.name}: no session {name} there after starting it")


def started_again(leaf: SessionLeaf, made: SessionLeaf) -> SessionLeaf:
    """``leaf`` as it is saved once started again on its host: the child
    there that ``made`` (``leaf_there``) names, nothing of the old run's
    scrollback or exit. Its notice is the host's to show (``start_request``:
    the host saved the screen, and the attach there replays it before the
    marker); one here that nobody saw yet stays, shown first."""
    return attrs.evolve(leaf, ref=made.ref, scrollback=None, exit_code=None)
