"""``multiserver events [NAME...]``: what happens to the sessions of one
daemon (``--daemon N``, default ``$MULTISERVER_DAEMON`` or 1), a line each
as it happens, until Ctrl-C (exit 0), until what it writes to is closed
(exit 0), or until the daemon goes away (one line, exit 1). ``--json``:
one object per line, for scripts. ``HOST:NAME``: the host's own ``events
--json``, through ssh. docs/events.md.

One daemon, not every one as ``ls`` lists them: a daemon's events have
one order and one numbering (``seq``, which ``--since`` resumes from),
and several daemons' together have neither. A daemon that does not run
is not started (it would run for this command alone, which keeps it from
exiting when idle): say so, exit 1."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver import EventsMissed, SessionEvent, SyncClient

NAME = "events"
HELP = "follow what happens to sessions (created, joined, left, exited...), a line each"
EXAMPLE = "multiserver events --json build"
# What a line of --json is: a script checks it (a field added keeps it 1).
SCHEMA = 1


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=f'for scripts: one JSON object per event, a line each ("schema": {SCHEMA})',
    )
    p.add_argument(
        "--since",
        type=int,
        metavar="SEQ",
        help="first the events from SEQ on that the daemon still holds (a seq of this"
        " daemon instance: --json's daemon_instance)",
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="only these sessions' events (HOST:NAME: a host's, through ssh)",
    )


def run(args: Namespace) -> int:
    from multiserver_cli._names import split_target
    from multiserver_cli._sessions import check_name

    targets = [split_target(n) for n in args.names]
    hosts = {host for host, _ in targets}
    if len(hosts) > 1:
        raise CliError("events follows one daemon: the names of one host, or of this machine", 2)
    names = frozenset(check_name(name) for _, name in targets)
    host = hosts.pop() if hosts else None
    if host is not None:
        return _follow_there(host, names, args.json, args.since)
    return _follow_here(args.daemon, names, args.json, args.since)


def _follow_here(number: int, names: frozenset[str], as_json: bool, since: int | None) -> int:
    from multiserver import ConnectionClosed, DaemonNotRunning, DaemonPaths, RequestFailed
    from multiserver_cli._dial import dial
    from multiserver_cli._sessions import bounded, deadline

    paths = DaemonPaths.for_number(number)
    try:
        with bounded("events"), dial(paths.socket, children=False, deadline=deadline()) as client:
            try:
                client.watch(since)
            except RequestFailed as exc:  # too old for events; a --since past the next
                raise CliError(f"daemon {number}: {exc.message}") from None
            client.deadline = None  # from here it waits for events, for as long as it takes
            _follow(client, names, as_json)
    except DaemonNotRunning:
        raise CliError(
            f"daemon {number} is not running ({paths.socket}): no events to follow;"
            " `multiserver new` starts it"
        ) from None
    except ConnectionClosed as exc:
        raise CliError(f"daemon {number} went away: {exc}") from None
    except KeyboardInterrupt:  # Ctrl-C: the way to stop following
        return 0
    return 0


def _follow(client: SyncClient, names: frozenset[str], as_json: bool) -> None:
    """Write each event as it comes, until the daemon goes away
    (ConnectionClosed) or what this writes to does (then return)."""
    import select
    import time

    out = sys.stdout
    poll = select.poll()
    poll.register(client.fileno(), select.POLLIN)
    poll.register(out.fileno(), 0)  # its hangup and error only: its reader gone
    while True:
        # What already came first: the events that arrived with the answer
        # to Watch (a --since replay) are read, and the socket then has
        # nothing to wake a poll with.
        while (item := client.wait_event(time.monotonic())) is not None:
            fields = {**as_fields(item), "daemon_instance": client.instance_id}
            if wanted(fields, names):
                out.write(shown(fields, as_json) + "\n")
        out.flush()
        for fd, happened in poll.poll():
            if fd == out.fileno() and happened & (select.POLLHUP | select.POLLERR):
                return


def _follow_there(host_name: str, names: frozenset[str], as_json: bool, since: int | None) -> int:
    """``HOST:NAME``: the host's own ``events --json`` through ssh (which
    ends when this does: it stops at its output's hangup), each line
    written here as a local one is, with ``"host"`` in ``--json``."""
    import json
    import subprocess

    from multiserver_cli._remote import host_of, labelled
    from restore import SSH_FAILED, ssh_argv

    host = host_of(host_name)
    remote = ["events", "--json", *([] if since is None else ["--since", str(since)]), *names]
    proc = subprocess.Popen(
        ssh_argv(host, remote),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        for line in proc.stdout:
            try:
                fields = json.loads(line)
            except ValueError:
                continue  # not a line of events --json (a login's banner): not ours to show
            sys.stdout.write(shown({**fields, "host": host_name}, as_json) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        return 0
    said = proc.stderr.read()
    status = proc.wait()
    if status == SSH_FAILED:
        why = " ".join(said.decode(errors="replace").split())[-300:]
        raise CliError(f"{host_name}: ssh failed: {why or 'no reason given'}")
    sys.stderr.buffer.write(labelled(said, host_name))
    return status


def as_fields(item: SessionEvent | EventsMissed) -> dict[str, object]:
    """An event as ``--json`` writes it (but ``schema`` and where it is
    from): its fields; ``kind`` "missed" for a stretch that will not come."""
    from multiserver import EventsMissed

    if isinstance(item, EventsMissed):
        return {"kind": "missed", "first_missing": item.first_missing, "next_seq": item.next_seq}
    return {f: getattr(item, f) for f in type(item).__record_fields__}  # type: ignore[attr-defined]


def wanted(fields: dict[str, object], names: frozenset[str]) -> bool:
    """Whether an event is one of the sessions named (none named: all);
    the daemon's own (upgraded) and a missed stretch always are."""
    return not names or not fields.get("name") or fields["name"] in names


def shown(fields: dict[str, object], as_json: bool) -> str:
    """An event as this command writes it (its ``as_fields``, with where it
    is from): ``--json``'s object, or a line for a person: its time, kind,
    session name and id, and what else it says."""
    if as_json:
        import json

        return json.dumps({"schema": SCHEMA, **fields})
    from multiserver import describe_exit
    from multiserver.internal import printable

    kind = str(fields.get("kind"))
    if kind == "missed":
        missed = f"events {fields.get('first_missing')}..{_int(fields.get('next_seq')) - 1}"
        return f"{_clock(None)}  missed           -  -  {missed} (list again: multiserver ls)"
    code, client = fields.get("exit_code"), _int(fields.get("client"))
    detail = (
        describe_exit(code)
        if isinstance(code, int) and kind in ("exited", "killed")
        else f"now runs {fields.get('server')}"
        if kind == "daemon_upgraded"
        else f"client {client}"
        if client
        else ""
    )
    name = str(fields.get("name") or "-")
    if "host" in fields:
        name = f"{fields['host']}:{name}"
    line = f"{_clock(fields.get('at'))}  {kind:<15}  {name}  {fields.get('id')}  {detail}"
    return printable(line.rstrip())


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _clock(at: object) -> str:
    """Local time of day, to the millisecond (now, for no time)."""
    import time

    t = at if isinstance(at, float | int) else time.time()
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"
