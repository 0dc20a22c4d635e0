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

A host that has not answered by its own timeout has its sessions reported
timed out then, but its question is not abandoned: its ssh runs on until
the restore's deadline, and an answer by then goes to the adopter
(``adopter.late_host``), as a local daemon's late partial attach does.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from multiserver_cli._errors import CliError
from multiserver_cli._hosts import Host, load_hosts, save_hosts
from multiserver_cli._remote import listed_child
from multiserver_cli._ssh import AUTH_WORDS, remote_json, run_remote
from restore import (
    ArrangementStore,
    Decision,
    HostAnswer,
    HostChild,
    Options,
    RestorationRef,
    SessionLeaf,
    StoreError,
    decide_remote,
    relaunch_notice,
)

if TYPE_CHECKING:
    from adopter import SweepRow


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
            continue  # an ended session whose daemon is gone there, or garbage
    return HostAnswer("listed", host.name, sessions, children=tuple(children))


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
    host: Host,
    leaf: SessionLeaf,
    d: Decision,
    until: float,
    store: ArrangementStore,
    *,
    answer: HostAnswer | None = None,
    step: float | None = None,
) -> RemoteRow:
    """``d`` done: a session gone there started again (each ssh call under
    ``step``, the host's timeout unless given, and ``until`` at most); one
    found there under its name (``answer``) saved as its child there."""
    t0 = time.monotonic()
    if not d.relaunch:
        detail = d.detail
        if answer is not None:
            leaf, detail = _follow(leaf, answer, store, detail)
        return RemoteRow(leaf, d.outcome, detail, 0.0)
    name = leaf.name.rpartition(":")[2]
    left = until - time.monotonic()
    if left <= 0:
        return RemoteRow(leaf, "failed", f"{d.detail}; not started: the restore's deadline", 0.0)
    bound = min(host.timeout if step is None else step, left)
    try:
        start_there(host, name, leaf.argv, leaf.cwd, bound)
        made = remote_leaf(host, name, min(bound, max(0.1, until - time.monotonic())))
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


@attrs.frozen
class RemoteRestore:
    """What restore made of the sessions on other hosts: a report row each
    (``sessions``, in the leaves' order), and what the hosts that answered
    after their timeout handed to the adopter (``late``)."""

    sessions: list[dict[str, object]]
    late: list[SweepRow]


@attrs.define
class _Question:
    """One host's ``ls --json``: its thread asks (and owns the ssh until it
    ends or is killed at the restore's deadline); at ``bound`` (its own
    timeout) ``restore_remote`` calls it timed out if no answer has come.
    Whichever of the two takes ``lock`` first decides whether the answer
    is in time or ``late``."""

    host: str
    leaves: list[SessionLeaf]
    started: float
    bound: float
    lock: threading.Lock = attrs.Factory(threading.Lock)
    answered: threading.Event = attrs.Factory(threading.Event)
    late: bool = False


def _follow(
    leaf: SessionLeaf, answer: HostAnswer, store: ArrangementStore, detail: str
) -> tuple[SessionLeaf, str]:
    """``leaf`` pointed at its host's session of its name, if that is not
    the saved child (``decide_remote`` took it as the session); the detail,
    with what could not be saved."""
    name = leaf.name.rpartition(":")[2]
    for found in answer.children:
        if found.via is not None or found.child.name != name:
            continue
        ref = RestorationRef(found.socket, found.instance_id, found.child.id, found.child.pid)
        if leaf.ref == ref:
            return leaf, detail
        moved = attrs.evolve(leaf, ref=ref)
        try:
            store.update_session(moved)
        except (StoreError, KeyError) as exc:
            return leaf, f"{detail}; not saved: {exc}"
        return moved, detail
    return leaf, detail


def restore_remote(
    leaves: Sequence[SessionLeaf], options: Options, timeout: float
) -> RemoteRestore:
    """Every saved session on another host, host by host at once, within
    ``timeout``: a host's sessions are called timed out at the host's own
    timeout, and its answer until ``timeout`` goes to the adopter. Returns
    by ``timeout`` (plus the last store write)."""
    started = time.monotonic()
    until = started + timeout
    hosts = load_hosts()
    by_host: dict[str, list[SessionLeaf]] = {}
    for leaf in leaves:
        assert leaf.host is not None
        by_host.setdefault(leaf.host, []).append(leaf)
    rows: dict[str, RemoteRow] = {}
    late: list[SweepRow] = []
    credential_needed: set[str] = set()

    def one_host(q: _Question) -> None:
        host = hosts.get(q.host)
        if host is None:
            with q.lock:
                for leaf in q.leaves:
                    rows[leaf.name] = RemoteRow(
                        leaf, "failed", f"no host named {q.host} any more", 0.0
                    )
                q.answered.set()
            return
        # Asked until the restore's deadline, not the host's own timeout:
        # an answer after that one still comes to the adopter.
        answer = ask_host(host, max(0.1, until - time.monotonic()))
        asked = time.monotonic() - q.started
        with q.lock:
            q.answered.set()
            in_time = not q.late
        if answer.kind == "credential" and not host.needs_credential:
            credential_needed.add(q.host)
        if not in_time:
            late.extend(adopt_late_host(host, answer, asked, options, until))
            return
        with ArrangementStore.open() as store:
            for leaf in q.leaves:
                d = decide_remote(leaf, answer, options)
                row = _carry_out(host, leaf, d, until, store, answer=answer)
                rows[leaf.name] = attrs.evolve(row, seconds=asked + row.seconds)

    questions = [
        _Question(
            name,
            its,
            started,
            min(started + hosts[name].timeout, until) if name in hosts else started,
        )
        for name, its in by_host.items()
    ]
    threads = [
        threading.Thread(target=one_host, args=(q,), name=f"host {q.host}", daemon=True)
        for q in questions
    ]
    for t in threads:
        t.start()
    # Each host's own timeout, in the order they fall due.
    for q in sorted(questions, key=lambda q: q.bound):
        q.answered.wait(max(0.0, q.bound - time.monotonic()))
        with q.lock:
            if q.answered.is_set():
                continue
            q.late = True
            waited = time.monotonic() - q.started
            silent = HostAnswer(
                "silent", q.host, why=f"{q.host}: no answer within {q.bound - q.started:.3g} s"
            )
            for leaf in q.leaves:
                d = decide_remote(leaf, silent, options)
                detail = f"{d.detail}; asked on until the restore's deadline"
                rows[leaf.name] = RemoteRow(leaf, d.outcome, detail, waited)
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
    return RemoteRestore(out, list(late))


def adopt_late_host(
    host: Host, answer: HostAnswer, after: float, options: Options, until: float
) -> list[SweepRow]:
    """``host``'s answer that came ``after`` seconds, past its timeout, to
    the adopter (``adopter.late_host``): its saved sessions running there
    are found (kept as they are), those gone there started again there by
    ``until``, and its running sessions that no leaf references adopted as
    ``HOST:NAME`` into the orphans window, each in one transaction that
    refuses a child some leaf references by then. A row each, state
    ``late``; none for a host that never answered."""
    from adopter import StoreSink, SweepRow, late_host

    def row(socket: str, action: str, name: str, detail: str) -> SweepRow:
        return SweepRow(
            f"{host.name}:{socket}",
            "late",
            action,
            name=name,
            detail=f"answered after {after:.1f} s; {detail}",
        )

    rows: list[SweepRow] = []
    try:
        with ArrangementStore.open() as store:
            plan = late_host(store.load(), host.name, answer, options)
            for leaf, d in plan.saved:
                # No step bound but the deadline's: the host has shown it
                # takes longer than its timeout.
                done = _carry_out(host, leaf, d, until, store, answer=answer, step=math.inf)
                sock = done.leaf.ref.socket if done.leaf.ref is not None else ""
                if d.outcome == "attached":
                    rows.append(row(sock, "found", leaf.name, f"{done.detail}: kept as it is"))
                else:
                    rows.append(row(sock, done.outcome, leaf.name, done.detail))
            sink = StoreSink(store)
            for found in plan.adopt:
                c = found.child
                try:
                    made = sink.record_host(host.name, found)
                except StoreError as exc:
                    rows.append(row(found.socket, "retry", c.name, f"not recorded: {exc}"))
                    continue
                if made is None:
                    rows.append(row(found.socket, "skipped", c.name, f"{c.name} is saved by now"))
                else:
                    what = f"pid {c.pid}: {' '.join(c.argv)}"
                    rows.append(row(found.socket, "adopted", made.name, what))
    except StoreError as exc:
        rows.append(row("", "retry", "", f"the saved arrangement cannot be used: {exc}"))
    return rows


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
