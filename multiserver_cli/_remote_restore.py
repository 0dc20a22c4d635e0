"""Sessions on other hosts, at login: saved, asked for, started again there.

A session made with ``new --host H`` is saved as ``H:NAME`` (its ``host``,
and a ``ref`` to the remote daemon's child). ``restore`` asks every host
that has saved sessions at once, each in a thread of its own for its own
timeout (and the restore's deadline at most), while the local restore runs:
one host that is down or silent never holds up the others, nor the local
sessions. What each session becomes is ``restore._plan.decide_remote``'s
rule: running there (attached), deferred (the host needs a credential: not
asked at login, where nobody types a passphrase), gone (started again there
in its saved cwd, with the marker at its first attach), failed, timed out.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

import attrs

from multiserver_cli._errors import CliError
from multiserver_cli._hosts import Host, load_hosts, save_hosts
from multiserver_cli._ssh import AUTH_WORDS, remote_json, run_remote
from restore import ArrangementStore, RestorationRef, SessionLeaf, StoreError
from restore._plan import Decision, HostAnswer, Options, decide_remote, relaunch_notice


def ask_host(host: Host, timeout: float) -> HostAnswer:
    """``host``'s sessions (``ls --json`` over ssh, BatchMode), or why not."""
    if host.needs_credential:
        return HostAnswer("credential", host.name)
    try:
        got = remote_json(host, ["ls", "--json"], timeout=timeout)
    except CliError as exc:
        said = str(exc)
        if "ssh failed" in said and any(w in said.lower() for w in AUTH_WORDS):
            return HostAnswer("credential", host.name, why=said)
        if "no answer within" in said:
            return HostAnswer("silent", host.name, why=said)
        return HostAnswer("failed", host.name, why=said)
    if not isinstance(got, list):
        return HostAnswer("failed", host.name, why=f"{host.name}: its ls --json is not a list")
    sessions: dict[str, tuple[str, int, int, str, int | None]] = {}
    for raw in got:
        try:
            if raw.get("host") is None:  # its own sessions, not its hosts'
                sessions[str(raw["name"])] = (
                    str(raw["daemon_instance"]),
                    int(raw["id"]),
                    int(raw["pid"]),
                    str(raw["state"]),
                    None if raw["exit_code"] is None else int(raw["exit_code"]),
                )
        except (AttributeError, KeyError, TypeError, ValueError):
            continue  # an ended session whose daemon is gone there, or garbage
    return HostAnswer("listed", host.name, sessions)


def _listed(host: Host, name: str, timeout: float) -> dict[str, Any]:
    """Session ``name`` as the host's ls --json gives it."""
    got = remote_json(host, ["ls", "--json"], timeout=timeout)
    for raw in got if isinstance(got, list) else []:
        if isinstance(raw, dict) and raw.get("name") == name and raw.get("host") is None:
            return raw
    raise CliError(f"{host.name}: no session {name} there after starting it")


def remote_leaf(host: Host, name: str, timeout: float) -> SessionLeaf:
    """The saved session of ``name``, just made on ``host``: its command
    and cwd as the host has them, and a ref to its child there."""
    raw = _listed(host, name, timeout)
    try:
        ref = RestorationRef(
            str(raw["socket"]),
            str(raw["daemon_instance"]),
            int(raw["id"]),
            int(raw["pid"]),
        )
        argv = [str(a) for a in raw["argv"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(f"{host.name}: answered garbage for {name}: {exc}") from exc
    return SessionLeaf(
        f"{host.name}:{name}",
        argv,
        str(raw.get("cwd") or "/"),
        ref=ref,
        host=host.name,
        created_at=time.time(),
    )


def start_there(host: Host, name: str, argv: Sequence[str], cwd: str, timeout: float) -> str:
    """``new -d`` on ``host`` with its grace window as linger; the name."""
    remote = ["new", "-d", "-n", name, "--cwd", cwd]
    if host.grace is not None:
        remote += ["--linger", f"{host.grace:g}"]
    if argv:
        remote += ["--", *argv]
    done = run_remote(host, remote, timeout=timeout)
    if done.returncode != 0:
        said = " ".join(done.stderr.decode(errors="replace").split())[-300:]
        raise CliError(f"{host.name}: {said or f'exit status {done.returncode}'}")
    return done.stdout.decode(errors="replace").strip() or name


@attrs.frozen
class RemoteRow:
    leaf: SessionLeaf
    outcome: str
    detail: str
    seconds: float
    exit_code: int | None = None

    def row(self) -> dict[str, object]:
        return {
            "name": self.leaf.name,
            "outcome": self.outcome,
            "daemon": self.leaf.host,
            "detail": self.detail,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 4),
        }


def _carry_out(
    host: Host, leaf: SessionLeaf, d: Decision, until: float, store: ArrangementStore
) -> RemoteRow:
    t0 = time.monotonic()
    if not d.relaunch:
        return RemoteRow(leaf, d.outcome, d.detail, 0.0)
    name = leaf.name.rpartition(":")[2]
    left = until - time.monotonic()
    if left <= 0:
        return RemoteRow(leaf, "failed", f"{d.detail}; not started: the restore's deadline", 0.0)
    try:
        start_there(host, name, leaf.argv, leaf.cwd, min(host.timeout, left))
        made = remote_leaf(host, name, min(host.timeout, left))
    except CliError as exc:
        return RemoteRow(leaf, "failed", f"{d.detail}; relaunch failed: {exc}", 0.0)
    notice = relaunch_notice(leaf, d.reason or d.detail)
    new = attrs.evolve(leaf, ref=made.ref, notice=notice, scrollback=None, exit_code=None)
    detail = d.detail
    try:
        store.update_session(new)
    except (StoreError, KeyError) as exc:
        detail += f"; not saved: {exc}"
    return RemoteRow(new, d.outcome, detail, time.monotonic() - t0)


def restore_remote(
    leaves: Sequence[SessionLeaf], options: Options, timeout: float
) -> list[dict[str, object]]:
    """Every saved session on another host, host by host at once, within
    ``timeout``; a report row each (in ``leaves``' order)."""
    until = time.monotonic() + timeout
    hosts = load_hosts()
    by_host: dict[str, list[SessionLeaf]] = {}
    for leaf in leaves:
        assert leaf.host is not None
        by_host.setdefault(leaf.host, []).append(leaf)
    rows: dict[str, RemoteRow] = {}
    credential_needed: set[str] = set()

    def one_host(name: str, its: list[SessionLeaf]) -> None:
        t0 = time.monotonic()
        host = hosts.get(name)
        if host is None:
            for leaf in its:
                rows[leaf.name] = RemoteRow(leaf, "failed", f"no host named {name} any more", 0.0)
            return
        answer = ask_host(host, max(0.1, min(host.timeout, until - time.monotonic())))
        if answer.kind == "credential" and not host.needs_credential:
            credential_needed.add(name)
        asked = time.monotonic() - t0
        with ArrangementStore.open() as store:
            for leaf in its:
                d = decide_remote(leaf, answer, options)
                row = _carry_out(host, leaf, d, until, store)
                rows[leaf.name] = attrs.evolve(row, seconds=asked + row.seconds)

    threads = [
        threading.Thread(target=one_host, args=(name, its), daemon=True)
        for name, its in by_host.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, until - time.monotonic()) + 1.0)
    if credential_needed:  # remembered: the next login defers them at once
        with contextlib.suppress(CliError):
            save_hosts(
                {
                    n: attrs.evolve(h, needs_credential=True) if n in credential_needed else h
                    for n, h in load_hosts().items()
                }
            )
    out = []
    for leaf in leaves:
        row = rows.get(leaf.name)
        if row is None:
            why = f"{leaf.host}: no answer within {timeout:g} s"
            row = RemoteRow(leaf, "timed-out", why, timeout)
        out.append(row.row())
    return out


def record_made(host: Host, name: str) -> None:
    """``new --host``: the session is saved here, as HOST:NAME (a store that
    cannot take it is said, and costs the session nothing)."""
    from multiserver_cli._state import open_store, warn

    try:
        leaf = remote_leaf(host, name, host.timeout)
    except CliError as exc:
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
    from multiserver_cli._state import open_store, warn

    with open_store() as store:
        if store is None:
            return
        try:
            if store.load().find(name) is not None:
                store.remove_session(name)
        except (StoreError, KeyError) as exc:
            warn(f"{name}: killed there, but not forgotten here: {exc}")
