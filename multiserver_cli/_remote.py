"""Asking every configured host at once: each under its own bound, in a
thread of its own, so that one host that is down or silent is a line that
says why, never a wait for the others."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from multiserver import ChildInfo
from multiserver_cli._errors import CliError
from multiserver_cli._hosts import Host
from multiserver_cli._sessions import at_once
from multiserver_cli._ssh import remote_json

# How long ls waits for a host (connecting included, through the shared
# connection when one is up).
LS_TIMEOUT = 8.0


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
    """A host's ``ls --json`` answer; ValueError if it is not one."""
    if not isinstance(answer, list):
        raise ValueError("its ls --json is not a list")
    out = []
    for raw in answer:
        if not isinstance(raw, dict):
            raise ValueError("its ls --json holds something that is not a session")
        child = listed_child(raw, f"{host}:{raw['name']}")
        waiting = None
        if not child.held:
            waiting = (int(raw.get("waiting_bytes", 0)), int(raw.get("waiting_dropped_bytes", 0)))
        out.append(RemoteSession(host, child, waiting, raw))
    return out


def list_hosts(
    hosts: Sequence[Host], bound: float = LS_TIMEOUT
) -> tuple[list[RemoteSession], list[str]]:
    """Every host's sessions, asked at once, each for its own timeout and
    ``bound`` at most; a line for each host that could not be listed."""

    def ask(host: Host) -> list[RemoteSession] | str:
        # Bounded: ssh is killed at the host's timeout (run_remote).
        try:
            got = remote_json(host, ["ls", "--json"], timeout=min(host.timeout, bound))
            return parse_listing(host.name, got)
        except CliError as exc:
            return str(exc)
        except ValueError as exc:
            return f"{host.name}: answered garbage ({exc})"

    answers = at_once(hosts, ask)
    sessions: list[RemoteSession] = []
    problems: list[str] = []
    for got in answers:
        if isinstance(got, str):
            problems.append(got)
        else:
            sessions.extend(got)
    return sessions, problems
