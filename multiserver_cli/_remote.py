"""The command line's side of other hosts: asking every configured host at
once for ``ls`` (each under its own bound, in a thread of its own, so that
one host that is down or silent is a line that says why, never a wait for
the others), and the blocking steps of a command through a host (finding
the host, asking it, starting a session there, saving it here as
``HOST:NAME``, passing its output on). What the answers mean is
``restore.remote``'s (pure); so is the restore's part, on trio."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from multiserver import replaced
from multiserver_cli._errors import CliError
from multiserver_cli._sessions import at_once
from multiserver_cli._state import open_store, warn
from restore import (
    Host,
    HostAnswer,
    HostFailure,
    RemoteSession,
    SessionLeaf,
    StoreError,
    failed_answer,
    host_answer,
    leaf_there,
    load_hosts,
    parse_listing,
    remote_json,
    run_remote,
    start_request,
    succeeded,
)

# How long ls waits for a host (connecting included, through the shared
# connection when one is up).
LS_TIMEOUT = 8.0
LS = ["ls", "--json"]


def host_of(name: str) -> Host:
    """The configured host ``name``; CliError listing the known ones if none."""
    hosts = load_hosts()
    if name not in hosts:
        known = ", ".join(sorted(hosts)) or "none: multiserver host add NAME --ssh DEST"
        raise CliError(f"no host named {name} (hosts: {known})")
    return hosts[name]


def passed(done: subprocess.CompletedProcess[bytes]) -> int:
    """The remote command's output and status, as if it ran here."""
    sys.stdout.buffer.write(done.stdout)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(done.stderr)
    sys.stderr.buffer.flush()
    return done.returncode


def list_hosts(
    hosts: Sequence[Host], bound: float = LS_TIMEOUT
) -> tuple[list[RemoteSession], list[str]]:
    """Every host's sessions, asked at once, each for its own timeout and
    ``bound`` at most; a line for each host that could not be listed."""

    def ask(host: Host) -> list[RemoteSession] | str:
        # Bounded: ssh is killed at the host's timeout (run_remote).
        try:
            got = remote_json(host, LS, timeout=min(host.timeout, bound))
            return parse_listing(host.name, got)
        except HostFailure as exc:
            return str(exc)
        except ValueError as exc:
            return f"{host.name}: answered garbage ({exc})"

    sessions: list[RemoteSession] = []
    problems: list[str] = []
    for got in at_once(hosts, ask):
        if isinstance(got, str):
            problems.append(got)
        else:
            sessions.extend(got)
    return sessions, problems


def ask_host(host: Host, timeout: float) -> HostAnswer:
    """``host``'s sessions (``ls --json`` over ssh, BatchMode), or why not."""
    if host.needs_credential:
        return HostAnswer("credential", host.name)
    try:
        return host_answer(host.name, remote_json(host, LS, timeout=timeout))
    except HostFailure as exc:
        return failed_answer(exc)


def start_there(host: Host, leaf: SessionLeaf, timeout: float, why: str) -> SessionLeaf:
    """``leaf``, a session of ``host`` gone there, started again there in
    its saved cwd (its screen, then the marker and ``why``, waiting there
    for its first attach): the saved session of the new one (its ref
    there). HostFailure if it could not be."""
    name = leaf.name.rpartition(":")[2]
    request = start_request(host, name, leaf.argv, leaf.cwd, why)
    succeeded(host, run_remote(host, request, timeout=timeout))
    return remote_leaf(host, name, timeout)


def remote_leaf(host: Host, name: str, timeout: float) -> SessionLeaf:
    """The saved session ``HOST:NAME`` of a session just made on ``host``."""
    return leaf_there(host, name, remote_json(host, LS, timeout=timeout))


def record_made(host: Host, name: str) -> None:
    """``new --host``: the session is saved here, as HOST:NAME (a store that
    cannot take it is said, and costs the session nothing)."""
    try:
        leaf = remote_leaf(host, name, host.timeout)
    except HostFailure as exc:
        warn(f"{host.name}:{name} not saved: {exc}")
        return
    with open_store() as store:
        if store is None:
            return
        try:
            if store.load().find(leaf.name) is not None:
                store.update_session(leaf)
            else:
                store.add_session(leaf)
        except (StoreError, KeyError, ValueError) as exc:
            warn(f"{leaf.name} not saved: {exc}")


def forget_made(name: str) -> None:
    """``kill HOST:NAME``: its saved session goes too."""
    with open_store() as store:
        if store is None:
            return
        try:
            if store.load().find(name) is not None:
                store.remove_session(name)
        except (StoreError, KeyError) as exc:
            warn(f"{name}: killed there, but not forgotten here: {exc}")


def bring_back(host: Host, name: str) -> None:
    """A saved session that is gone from its host (a deferred host's, whose
    grace window elapsed while nobody could log in) is started again there
    in its saved cwd, its marker waiting for the next attach."""
    from restore import GONE_THERE, started_again

    with open_store() as store:
        leaf = None if store is None else store.load().find(f"{host.name}:{name}")
        if store is None or leaf is None:
            return  # not saved here: the host is not asked (the attach says if it is gone)
        answer = ask_host(replaced(host, needs_credential=False), host.timeout)
        if answer.kind != "listed" or name in answer.sessions:
            return
        made = start_there(host, leaf, host.timeout, GONE_THERE)
        try:
            store.update_session(started_again(leaf, made))
        except (StoreError, KeyError) as exc:
            warn(f"{leaf.name} started again there, but not saved: {exc}")
