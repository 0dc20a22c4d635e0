"""``multiserver attach NAME``: this terminal attached to a session, beside
the other terminals that hold it (``-r``: only watching; ``-d``: taken
over from them), until detach; ``HOST:NAME``, a session of another host,
through ssh. A session whose program ended while nobody
watched, its daemon gone since, is shown once from the store, then
forgotten. ``new`` attaches with this command's code too."""

from __future__ import annotations

import argparse
import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli import _args
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver import ChildInfo, ClaimResult, SyncClient
    from multiserver_cli._saved import Saved
    from multiserver_cli._sessions import Located
    from multiserver_cli.attach._attached import CloseExited
    from restore import ArrangementStore, SessionLeaf

NAME = "attach"
HELP = "attach this terminal to a session"
EXAMPLE = "multiserver attach -e ^A build"
# What config.toml decides (_settings.apply: the flag's attribute, or None:
# through its environment variable).
SETTINGS = {
    "detach_key": "detach_spec",
    "buffer_limit": None,
    "share_size": None,
    "strip_env": None,
    "keep_env": None,
}


def add_arguments(p: ArgumentParser) -> None:
    _args.detach_options(p)
    _args.share_options(p, "-d", "--takeover")
    # `attach HOST:NAME` runs `attach --relay NAME` there: the terminal is
    # relayed over ssh's stdin and stdout, not a PTY of sshd's (attach/_relay).
    p.add_argument("--relay", action="store_true", help=argparse.SUPPRESS)
    # Run so by `attach HOST:NAME` elsewhere: what that machine calls this one.
    p.add_argument("--host-label", metavar="HOST", help=argparse.SUPPRESS)
    p.add_argument("name", metavar="NAME")


def run(args: Namespace) -> int:
    if args.host_label is None:
        return _run(args)
    from multiserver import MultiserverError
    from multiserver_cli._errors import UsageError

    try:
        return _run(args)
    except UsageError:
        raise
    except MultiserverError as exc:  # said on another machine: which host says it
        status = exc.status if isinstance(exc, CliError) else 1
        raise CliError(f"{args.host_label}: {exc}", status) from None


def _run(args: Namespace) -> int:
    from multiserver_cli import _saved
    from multiserver_cli._names import split_target
    from multiserver_cli._sessions import (
        check_name,
        deadline,
        live_or_fail,
        lookup,
        saved_daemon,
        saved_end,
    )
    from multiserver_cli.attach._tty import is_terminal

    host, remote_name = split_target(args.name)
    if host is not None:
        from multiserver_cli.attach._over_ssh import attach_there

        return attach_there(host, remote_name, args)
    if args.relay:  # run through ssh by `attach HOST:NAME` elsewhere
        from multiserver_cli.attach._relay import serve_relayed

        serve_relayed()
    name = check_name(args.name)
    if not is_terminal(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    number = _args.only_daemon(args)
    with _saved.open_saved() as saved:
        # The saved session's own daemon, asked on the connection that then
        # holds it: one dial before raw mode. Else the survey says.
        with saved_daemon(name, number, saved) as there:
            if there is not None:
                client, ref = there
                client.deadline = deadline()  # a command's bound, past the scan's
                (result,) = _claim(args, client, ref.child_id, name)
                if result.error is None:
                    return _claimed(args, client, name, result, saved)
        resolution = lookup(name, number, "attach", saved, own_daemon=False)
        ended = saved_end(resolution)
        if ended is not None:
            return _show_saved_end(saved.store(), ended)
        return attach_found(args, live_or_fail(name, resolution), saved)


def _show_saved_end(store: ArrangementStore | None, leaf: SessionLeaf) -> int:
    """Show what an ended session showed last, as an exited live one is
    shown, then forget it (a durable close, as ``kill NAME`` does): it has
    been seen."""
    from multiserver import describe_exit, exit_status
    from multiserver_cli import _state
    from multiserver_cli.attach import _screen
    from multiserver_cli.attach._tty import say

    assert leaf.exit_code is not None
    replay = (leaf.notice or b"") + (leaf.scrollback or b"")
    _screen.show_exited(sys.stdin.fileno(), sys.stdout.fileno(), replay)
    if _state.stage_close_named(store, leaf.name) is not None:
        _state.finish_pending_closes(store)
    say(f"[{leaf.name} {describe_exit(leaf.exit_code)}]", not replay or replay.endswith(b"\n"))
    return exit_status(leaf.exit_code)


def attach_found(args: Namespace, found: Located, saved: Saved) -> int:
    """Attach this terminal to the live session ``found`` (``attach NAME``,
    and ``new -A`` of a session that exists)."""
    from multiserver_cli._dial import dial
    from multiserver_cli._sessions import bounded, deadline
    from multiserver_cli.attach._tty import is_terminal

    if not is_terminal(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    name = found.child.name  # the name the user knows it by
    with (
        bounded("attach"),
        dial(found.socket, children=False, deadline=deadline()) as client,
    ):
        (result,) = _claim(args, client, found.child.id, name)
        if result.error is not None:
            raise CliError(f"cannot attach to {name}: {result.error.message}")
        return _claimed(args, client, name, result, saved)


def _claim(args: Namespace, client: SyncClient, child_id: int, name: str) -> list[ClaimResult]:
    """Claim the child for this terminal: beside whoever holds it (their
    reader gives reading back first), only watching (``--read-only``), or
    taken from them (``--takeover``, and with a daemon too old to share).
    keep_output: if this client dies before it releases, the daemon still
    has the output it was about to show."""
    import errno

    from multiserver import DaemonTooOld, RequestFailed
    from multiserver_cli._sessions import bounded
    from multiserver_cli._state import warn

    read_only, takeover = getattr(args, "read_only", False), getattr(args, "takeover", False)
    with bounded("attach"):
        if not takeover:
            try:
                return client.claim(
                    [child_id], steal=True, keep_output=True, join=True, read_only=read_only
                )
            except RequestFailed as exc:
                # A daemon, or a holder, that cannot share: taken over, as
                # attach always did, and said so; a watcher cannot watch.
                unshared = isinstance(exc, DaemonTooOld) or exc.errno == errno.EBUSY
                if read_only or not unshared:
                    verb = "watch" if read_only else "attach to"
                    raise CliError(f"cannot {verb} {name}: {exc.message}") from None
                warn(f"{exc.message}: taking it over (attach -d)")
        return client.claim([child_id], steal=True, keep_output=True)


def _claimed(
    args: Namespace, client: SyncClient, name: str, result: ClaimResult, saved: Saved
) -> int:
    """Be the terminal of the child ``result`` claimed on ``client`` (or
    show how it ended), under the name the user knows it by."""
    from multiserver.internal import replaced
    from multiserver_cli import _saved
    from multiserver_cli._sessions import bounded
    from multiserver_cli.attach import _attached
    from multiserver_cli.attach._tty import say

    assert result.child is not None
    child = replaced(result.child, name=name)
    notice = _saved.take_notice(saved, name)
    replay = notice + result.output
    if result.dropped:
        replay = (
            f"[multiserver: {result.dropped} earlier bytes of {name} were not kept]\r\n".encode()
            + replay
        )
    with bounded("attach"):
        if result.master is None and result.feed is None:
            return _attached.attach_exited(client, child, replay, say, _closer(saved))
        return attach_held(
            args, client, child, result.master, replay, saved, notice, feed=result.feed
        )


def attach_held(
    args: Namespace,
    client: SyncClient,
    child: ChildInfo,
    master: int | None,
    replay: bytes,
    saved: Saved,
    notice: bytes = b"",
    *,
    feed: int | None = None,
) -> int:
    """Be the terminal of ``child``, whose ``master`` this client holds
    (None: only watching; with ``feed``, beside other clients:
    ``_attached.run_attached``): its close kept in ``saved``'s store
    (opened when first written), what it shows in its output file (a
    relaunch's ``notice`` first: shown now, it lives on past the next
    reboot), and, in a tmux pane or a kitty window, the layout saved with
    it where it is shown (``_pane``, in the background)."""
    from multiserver_cli import _pane
    from multiserver_cli._scrollback import ScreenKeeper
    from multiserver_cli.attach import _attached
    from multiserver_cli.attach._tty import say

    _pane.track_pane(child.name)
    keeper = (
        None if master is None else ScreenKeeper.for_child(client.instance_id, child.id, master)
    )
    if keeper is not None and notice:
        keeper.shown_notice(notice)
    return _attached.run_attached(
        client,
        child,
        master,
        replay=replay,
        detach_key=args.detach_key,
        redraw=args.redraw,
        say=say,
        close_exited=_closer(saved),
        keeper=keeper,
        feed=feed,
    )


def _closer(saved: Saved) -> CloseExited:
    from multiserver_cli import _state

    return lambda client, child: _state.close_exited(saved.store(), client, child)
