"""The command line's side of other hosts: asking every configured host at
once for ``ls`` (each under its own bound, in a thread of its own, so that
one host that is down or silent is a line that says why, never a wait for
the others), and the blocking steps of a command through a host (finding
the host, asking it, starting a session there, saving it here as
``HOST:NAME``, passing its output on). What the answers mean is
``restore.remote``'s (pure); so is the restore's part, on trio."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from multiserver.internal import replaced
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
    exit_argv,
    failed_answer,
    host_answer,
    leaf_there,
    listing_of,
    load_hosts,
    remote_json,
    remote_sessions,
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


def passed(done: subprocess.CompletedProcess[bytes], host: str, *, stdout: bool = True) -> int:
    """The remote command's output (unless the caller shows it: not
    ``stdout``) and status, as if it ran here; its messages
    (``multiserver: ...``) say which host said them, as the same words
    from a local command would be read as this machine's."""
    if stdout:
        sys.stdout.buffer.write(done.stdout)
        sys.stdout.buffer.flush()
    sys.stderr.buffer.write(labelled(done.stderr, host))
    sys.stderr.buffer.flush()
    return done.returncode


def labelled(said: bytes, host: str) -> bytes:
    """``said`` (a remote multiserver's stderr) with its own messages
    marked as ``host``'s: ``multiserver: rh: ...``."""
    mark, own = b"multiserver: ", f"multiserver: {host}: ".encode()
    return b"".join(
        own + line[len(mark) :] if line.startswith(mark) else line
        for line in said.splitlines(keepends=True)
    )


def list_hosts(
    hosts: Sequence[Host], bound: float = LS_TIMEOUT
) -> tuple[list[RemoteSession], list[str], set[str]]:
    """Every host's sessions, asked at once, each for its own timeout and
    ``bound`` at most; a line for each host that could not be listed, and
    those hosts' names."""

    def ask(host: Host) -> list[RemoteSession] | str:
        # Bounded: ssh is killed at the host's timeout (run_remote).
        try:
            got = remote_json(host, LS, timeout=min(host.timeout, bound))
            return remote_sessions(host.name, listing_of(host.name, got))
        except HostFailure as exc:
            return str(exc)

    sessions: list[RemoteSession] = []
    problems: list[str] = []
    unanswered: set[str] = set()
    for host, got in zip(hosts, at_once(hosts, ask), strict=True):
        if isinstance(got, str):
            problems.append(got)
            unanswered.add(host.name)
        else:
            sessions.extend(got)
    return sessions, problems, unanswered


def not_listed(
    saved: Sequence[SessionLeaf],
    listed: Sequence[RemoteSession],
    hosts: Sequence[str],
    unanswered: set[str],
) -> list[tuple[SessionLeaf, str]]:
    """The saved sessions of other hosts that their host does not list,
    each with why it is not running: they are the person's all the same
    (``attach HOST:NAME`` and ``restore`` start them again), and a name
    taken."""
    shown = {r.child.name for r in listed}
    out = []
    for leaf in saved:
        if leaf.host is None or leaf.name in shown:
            continue
        if leaf.host not in hosts:
            why = f"no host named {leaf.host} any more"
        elif leaf.host in unanswered:
            why = f"{leaf.host} did not answer"
        else:
            why = f"gone from {leaf.host}; `multiserver attach {leaf.name}` starts it again"
        out.append((leaf, why))
    return out


# How long ``ssh -O exit`` may take to stop a shared connection.
EXIT_TIMEOUT = 5.0


def stop_connections(hosts: Sequence[Host]) -> None:
    """Stop ssh's shared connection (ControlMaster) to each of ``hosts``
    (``ssh -O exit`` on the control path ``ssh_argv`` uses), all at once:
    none is left running for ControlPersist once multiserver is done with
    a host. One that is not up, or does not answer in time, is no error."""

    def stop(host: Host) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                exit_argv(host),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=EXIT_TIMEOUT,
                check=False,
            )

    at_once(hosts, stop)


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
    save_made(leaf)


def find_made(host: Host, name: str) -> SessionLeaf | None:
    """The saved session ``HOST:NAME`` of a session the host lists under
    ``name`` (asked again: a new connection if the shared one died); None
    if it lists none, or cannot be asked."""
    try:
        return remote_leaf(host, name, host.timeout)
    except HostFailure:
        return None


# ``new --host H -n NAME`` asked for and not known to be made or refused
# (its link died): the next ``new`` of that name takes the session the
# host has under it as the one it made, rather than refusing its own.
ASKED_FILE = "remote-new-asked.json"


def _asked_path() -> Path:
    from multiserver.internal import ensure_private_dir, state_dir

    return ensure_private_dir(state_dir()) / ASKED_FILE


def _asked() -> dict[str, float]:
    try:
        got = json.loads(_asked_path().read_bytes())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in got.items()} if isinstance(got, dict) else {}


def note_asked(target: str, asked: bool) -> None:
    """Remember (``asked``) or forget that ``new`` of ``target`` (HOST:NAME)
    was asked of its host with no answer either way; a file that cannot be
    written costs only a retry's finding it (it is refused as taken)."""
    had = _asked()
    now = {k: v for k, v in had.items() if k != target}
    if asked:
        now[target] = time.time()
    if now == had:
        return
    from multiserver.internal import write_whole

    try:
        write_whole(_asked_path(), json.dumps(now).encode())
    except OSError as exc:
        warn(f"could not note the new of {target}: {exc.strerror}")


def was_asked(target: str) -> bool:
    return target in _asked()


def save_made(leaf: SessionLeaf) -> None:
    """Save ``leaf`` (a session just made on its host) here."""
    with open_store() as store:
        if store is None:
            return
        try:
            if store.sessions(names=[leaf.name]):
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
            store.remove_session(name)
        except KeyError:
            pass  # not saved here
        except StoreError as exc:
            warn(f"{name}: killed there, but not forgotten here: {exc}")


def bring_back(host: Host, name: str) -> None:
    """A saved session that is gone from its host (a deferred host's, whose
    grace window elapsed while nobody could log in) is started again there
    in its saved cwd, its marker waiting for the next attach."""
    from restore import GONE_THERE, started_again

    with open_store() as store:
        leaf = None if store is None else store.find(f"{host.name}:{name}")
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
