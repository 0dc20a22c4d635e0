"""``multiserver capture NAME``: print a session's screen as its terminal
shows it, as ``tmux capture-pane -p`` prints a pane: its lines, trailing
blanks left out; ``-S -N`` with N lines of history above them, ``-e``
with colours and attributes as SGR sequences, ``--json`` with the
cursor, the title and the size besides. ``HOST:NAME`` through ssh: the
host's own ``capture --json``, read strictly here.

Rendered (``multiserver.capture``) from what attach would replay: the
daemon's buffer (with a relaunched session's notice first, as peek shows
it), or, while a client holds the session, what that client keeps of
what it showed (written every few seconds while output flows). A session
whose program ended has no screen to capture: one line says so (``peek``
prints its output). docs/capture.md says more."""

from __future__ import annotations

import sys
from argparse import ArgumentParser, ArgumentTypeError, Namespace

from multiserver_cli import _args
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver import Capture

NAME = "capture"
HELP = "print a session's screen as text (like tmux capture-pane -p)"
EXAMPLE = "multiserver capture -S -200 build"


def history_lines(text: str) -> int | None:
    """``-S``'s value: ``-N`` (N lines of history), ``0``, or ``-`` (all
    the output holds: None)."""
    if text == "-":
        return None
    try:
        start = int(text)
    except ValueError:
        start = 1
    if start > 0:
        raise ArgumentTypeError(f"-S takes -N (N lines of history) or -, not {text!r}")
    return -start


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "-S",
        dest="history",
        type=history_lines,
        default=0,
        metavar="-N",
        help="N lines of history above the screen (-S -: all the kept output holds)",
    )
    p.add_argument(
        "-e", dest="styled", action="store_true", help="colours and attributes as SGR sequences"
    )
    p.add_argument(
        "--json", action="store_true", help="the lines, cursor, title and size as one JSON object"
    )
    p.add_argument("name", metavar="NAME")


def run(args: Namespace) -> int:
    from multiserver_cli._names import split_target

    host, name = split_target(args.name)
    if host is not None:
        return _capture_there(host, name, args)
    from multiserver import PeekResult, capture, describe_exit
    from multiserver_cli import _saved
    from multiserver_cli._dial import dial
    from multiserver_cli._sessions import bounded, deadline, live_or_fail, lookup
    from multiserver_cli.commands.peek import saved_notice

    with _saved.open_saved() as saved:
        found = live_or_fail(args.name, lookup(args.name, _args.only_daemon(args), NAME, saved))
        notice = saved_notice(saved.find(found.child.name), found.instance_id, found.child.id)
    with (
        bounded(NAME),
        dial(found.socket, children=False, deadline=deadline()) as client,
    ):
        peeked = client.shown(found.child.id)  # a holder's screen asked of it
    child = peeked.child
    if child.exit_code is not None:
        raise CliError(
            f"{found.child.name} {describe_exit(child.exit_code)}: no screen to capture"
            f" (multiserver peek {found.child.name} prints its output)"
        )
    if not child.held and notice:  # a holder has shown it already
        peeked = PeekResult(child, notice + peeked.output, peeked.dropped)
    _show(capture(peeked, history=args.history, styled=args.styled), args.json)
    return 0


def _show(screen: Capture, as_json: bool) -> None:
    if as_json:
        from multiserver_cli._format import print_json

        print_json(screen.as_json())
        return
    sys.stdout.buffer.write(screen.text().encode("utf-8", "replace"))
    sys.stdout.buffer.flush()


def _capture_there(host_name: str, name: str, args: Namespace) -> int:
    """``capture HOST:NAME``: the host's own ``capture --json`` (its
    failure passed on as a local one is: its words, marked as the host's,
    and its status), read strictly and shown here."""
    import json

    from multiserver import Capture
    from multiserver_cli._remote import host_of, passed
    from multiserver_cli._sessions import check_name
    from restore import run_remote

    host = host_of(host_name)
    asked = ["capture", "--json", check_name(name)]
    if args.history != 0:
        asked[2:2] = ["-S", "-" if args.history is None else f"-{args.history}"]
    if args.styled:
        asked[2:2] = ["-e"]
    done = run_remote(host, asked, timeout=host.timeout)
    if done.returncode != 0:
        return passed(done, host_name, stdout=False)
    try:
        screen = Capture.from_json(json.loads(done.stdout))
    except ValueError as exc:
        raise CliError(f"{host_name}: answered something that is no capture ({exc})") from None
    _show(screen, args.json)
    return 0
