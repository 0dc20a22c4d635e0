"""``multiserver peek NAME``: print what a session has kept of its output
(what ``attach`` would replay) without attaching; ``HOST:NAME`` through
ssh. A session started again by restore shows, as attach does, its saved
output and the marker first (until an attach takes them); one whose
program ended unseen, its daemon gone, shows its saved output.

To a pipe or a file the output is byte-exact. To a terminal it is written
as a replay is (``multiserver.for_terminal``: only what the one table of
what draws names, the title once; nothing the terminal would answer into
the shell), then the terminal reset where the program's screen ends
(``screen_reset``)."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli import _args
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from restore import SessionLeaf

NAME = "peek"
HELP = "print a session's kept output (what attach replays) without attaching"
EXAMPLE = "multiserver peek --bytes 4096 build"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "--bytes", type=int, metavar="N", help="at most the last N bytes (from a line start)"
    )
    p.add_argument("name", metavar="NAME")


def run(args: Namespace) -> int:
    from multiserver_cli import _saved
    from multiserver_cli._names import split_target

    host, name = split_target(args.name)
    if host is not None:
        return _peek_there(host, name, args)
    from multiserver_cli._dial import dial
    from multiserver_cli._sessions import bounded, deadline, live_or_fail, lookup, saved_end

    if args.bytes is not None and args.bytes < 0:
        raise CliError("--bytes must be >= 0", 2)
    with _saved.open_saved() as saved:
        resolution = lookup(args.name, _args.only_daemon(args), "peek", saved)
        ended = saved_end(resolution)
        if ended is not None:
            output = ended.scrollback or b""
            n = len(output) if args.bytes is None else min(args.bytes, len(output))
            _show(output[len(output) - n :])
            return 0
        found = live_or_fail(args.name, resolution)
        notice = saved_notice(saved.find(found.child.name), found.instance_id, found.child.id)
    with (
        bounded("peek"),
        dial(found.socket, children=False, deadline=deadline()) as client,
    ):
        result = client.peek(found.child.id, args.bytes)
    _show(_last(notice + result.output, args.bytes))
    return 0


def _last(output: bytes, limit: int | None) -> bytes:
    """The last ``limit`` bytes of ``output`` (the notice, then what the
    daemon cut already) at most, from a safe start (``safe_start``, as the
    daemon cuts its own), or all of it."""
    if limit is None or len(output) <= limit:
        return output
    from multiserver.internal import safe_start

    return output[safe_start(output, len(output) - limit) :]


def _show(output: bytes) -> None:
    """``output`` on stdout: byte-exact, unless stdout is a terminal."""
    out = sys.stdout.buffer
    if out.isatty():
        from multiserver.internal import screen_reset, strip_for_terminal

        shown = strip_for_terminal(output)
        output = shown + screen_reset(shown) if shown else b""
    out.write(output)
    out.flush()


def saved_notice(leaf: SessionLeaf | None, instance_id: str, child_id: int) -> bytes:
    """What attach shows first, and peek and capture too: the saved
    session's notice (a relaunched session's saved scrollback and the
    marker), if it is this child's and nobody attached since. Both leave
    it in place."""
    if leaf is None or leaf.ref is None or not leaf.notice:
        return b""
    if (leaf.ref.instance_id, leaf.ref.child_id) != (instance_id, child_id):
        return b""
    return bytes(leaf.notice)


def _peek_there(host_name: str, name: str, args: Namespace) -> int:
    """``peek HOST:NAME``: the host's own peek (to a pipe there: byte-exact),
    its output passed on as a local peek's is."""
    from multiserver_cli._remote import host_of, passed
    from multiserver_cli._sessions import check_name
    from restore import run_remote

    host = host_of(host_name)
    extra = [] if args.bytes is None else ["--bytes", str(args.bytes)]
    done = run_remote(host, ["peek", *extra, check_name(name)], timeout=host.timeout)
    _show(done.stdout)
    return passed(done, host_name, stdout=False)
