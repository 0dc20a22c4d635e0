"""One attachment: hold a session's PTY and be its terminal (``attach``
and ``new`` do, ``commands/attach.py``).

Sequence: claim (taking it over from any other client; the command's
part) -> replay the output buffered while detached, without its queries
-> size the PTY to this terminal and make full-screen programs redraw ->
proxy in raw mode until detach, exit, takeover or the terminal going away
-> reset the terminal (alternate screen, cursor, keys, mouse...) and
restore its modes -> release (or collect).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from multiserver import (
    ConnectionClosed,
    describe_exit,
    exit_status,
)
from multiserver.internal import OutputBuffer
from multiserver_cli import _shown
from multiserver_cli._errors import CliError
from multiserver_cli._scrollback import ScreenKeeper
from multiserver_cli.attach import _proxy, _screen
from multiserver_cli.attach._daemon_gone import DaemonGone
from multiserver_cli.attach._tty import is_terminal, relay_broken, sizes_to, terminal_size
from multiserver_cli.attach._watch import AttachWatch, Outcome, keep_again

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    from multiserver import ChildInfo, SyncClient

    # Closes a session whose program exited: collect it, forget its saved session.
    CloseExited = Callable[[SyncClient, ChildInfo], None]

    Redraw = Literal["none", "winch", "ctrl_l"]

# Prints a status line; True when the terminal's cursor is at a line start.
Say = Callable[[str, bool], None]
# How much of what the terminal showed goes back to the daemon on detach.
SCREEN_KEEP = 256 * 1024
# The signals an attached client answers: a size change, and being told to go.
_WATCHED = (signal.SIGWINCH, signal.SIGHUP, signal.SIGTERM)


def _size_pty(master: int | None, outcome: Outcome, rows: int, cols: int) -> None:
    """The PTY sized by this client, which holds its master alone (on a
    relayed terminal, so that keys sent after a resize come after it; the
    daemon is told too, and its own resize then changes nothing). Shared,
    the daemon sizes it, by its policy."""
    from multiserver.internal import set_winsize

    if master is not None and not outcome.shared:
        set_winsize(master, rows, cols)


def _ends_line(shown: OutputBuffer) -> bool:
    data = shown.peek()[0]
    return not data or data.endswith(b"\n")


def _redraw(
    client: SyncClient,
    child: ChildInfo,
    master: int | None,
    size: tuple[int, int] | None,
    how: Redraw,
) -> None:
    if master is None:  # a watcher's size never counts, nor does it redraw
        return
    if size is not None:
        rows, cols = size
        if how == "winch":
            # A real size change is what makes a full-screen program repaint,
            # even when the size ends up where it was.
            client.resize(child.id, rows, max(1, cols - 1) if cols > 1 else cols + 1)
        client.resize(child.id, rows, cols)
    if how == "ctrl_l":
        _screen.write_all(master, b"\x0c")


@contextlib.contextmanager
def _signals_to(fd: int) -> Iterator[None]:
    """While attached: each watched signal's number is written to ``fd``
    (the main loop polls it). Afterwards HUP and TERM stay ignored: the
    command ends right after, once the session is released with its screen
    (the closed terminal's shell exits after the hangup, and the kernel then
    hangs up our process group)."""
    old = {s: signal.signal(s, lambda *_: None) for s in _WATCHED}
    old_fd = signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGWINCH, old[signal.SIGWINCH])
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run_attached(
    client: SyncClient,
    child: ChildInfo,
    master: int | None,
    *,
    replay: bytes,
    detach_key: bytes | None,
    redraw: Redraw,
    say: Say,
    close_exited: CloseExited,
    keeper: ScreenKeeper | None = None,
    feed: int | None = None,
) -> int:
    """Attach this terminal to ``child`` whose ``master`` we hold (and own;
    None: only watching). With ``feed`` (ours too) other clients hold it:
    its output comes on the feed (docs/sharing.md). A program that exits
    meanwhile is closed with ``close_exited``. Returns the exit status for
    the command.

    Two loops: the copy loop (``_proxy.proxy``, in a thread: terminal <->
    PTY) and this thread's, which answers the daemon's notices (taken
    elsewhere, exited) and signals (a size change, a hangup), stops the
    copy loop through its ``ctl`` pipe, and, with ``keeper``, writes what
    the session shows to its output file while output flows
    (``_scrollback``) and once more before it is given back (or taken
    elsewhere, or it ended: the file is whole for whoever writes next).
    """
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    if not is_terminal(stdin):
        raise CliError("attach needs a terminal: stdin is not a tty")
    # Attached for as long as the person likes: never hold the directory
    # the command was typed in (the session's program has its own cwd).
    os.chdir("/")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # What this terminal shows, handed back on release so that the next
    # attach replays the screen left behind (a shell's too, not only
    # full-screen programs, which redraw).
    shown = OutputBuffer(SCREEN_KEEP)
    ctl_r, ctl_w = os.pipe()
    done_r, done_w = os.pipe()
    sig_r, sig_w = os.pipe()
    os.set_blocking(sig_w, False)
    outcome = Outcome(shared=feed is not None)
    # Should the daemon die meanwhile: the session goes on, said so (_daemon_gone).
    gone = DaemonGone.watching(client, child, master, ctl_w)
    sharing = _proxy.Sharing(done_w, feed)
    copier: threading.Thread | None = None
    try:
        # Raw mode; on every way out, the terminal reset (alternate screen
        # left, cursor shown...) before the status line.
        with (
            _screen.attached_terminal(stdin, stdout, shown) as screen,
            _signals_to(sig_w),
            sizes_to(lambda rows, cols: _size_pty(master, outcome, rows, cols)),
        ):
            # The replay without its queries; the filter drops the terminal's
            # answers to what was missed.
            answers = screen.replay(replay, answers_to=stdin)
            if replay and terminal_size(stdin) not in (None, (child.rows, child.cols)):
                screen.resized()
            if keeper is not None and not outcome.shared:  # shared: the daemon keeps it
                screen.keep = keeper.live
            if keeper is not None:
                sharing.reading_again = lambda: keep_again(keeper, screen)
            try:
                _redraw(client, child, master, terminal_size(stdin), redraw)
            except ConnectionClosed:  # it died as we came: go on without it
                gone.noticed()
                if (size := terminal_size(stdin)) is not None:
                    gone.resize(client, *size)
            client.deadline = None  # attached: no bound, but the person's

            def copy() -> None:
                try:
                    outcome.reason = _proxy.proxy(
                        master, stdin, screen, ctl_r, detach_key, answers, gone.notes, sharing
                    )
                finally:
                    os.write(done_w, b"x")

            copier = threading.Thread(target=copy, name="copy", daemon=True)
            copier.start()
            watch = AttachWatch(client, child, stdin, outcome, ctl_w, gone, keeper, sharing, screen)
            watch.run(sig_r, done_r)
            copier.join()
            copier = None
            if outcome.exit_code is not None and master is not None and not outcome.shared:
                screen.drain_rest(master)
    finally:
        if copier is not None:  # an error in this thread: stop the copy loop first
            os.write(ctl_w, b"x")
            copier.join()
        if keeper is not None:  # before the session is given back: the daemon writes next
            keeper.last()
        feeds = [fd for fd in sharing.feeds if fd != master]  # handed, never read
        for fd in (ctl_r, ctl_w, done_r, done_w, sig_r, sig_w, master, *feeds):
            if fd is not None:
                os.close(fd)
        gone.forget()  # the hold, if its daemon died, ended with the master

    return _ended(client, child, outcome, gone, shown, say, close_exited)


def _ended(
    client: SyncClient,
    child: ChildInfo,
    outcome: Outcome,
    gone: DaemonGone,
    shown: OutputBuffer,
    say: Say,
    close_exited: CloseExited,
) -> int:
    """The attachment is over, the master closed: what became of the
    session, said on the terminal (which showed ``shown``), and the exit
    status for the command. Its daemon gone, nothing is released or
    collected; taken elsewhere, its new holder has it; exited, it is
    closed; else it is released with the screen it leaves behind."""
    name = child.name
    if gone.happened:  # nothing to release to, nothing to collect from
        return gone.finish(
            outcome.reason, outcome.signal, outcome.exit_code, say, _ends_line(shown)
        )
    if outcome.taken:
        say(f"[{name} attached elsewhere]", _ends_line(shown))
        return 0
    if outcome.exit_code is not None:
        code = outcome.exit_code
        close_exited(client, child)
        say(f"[{name} {describe_exit(code)}]", _ends_line(shown))
        return exit_status(code)
    kept = shown.peek()[0]
    client.release([child.id], replace_output=kept)
    # So that ls counts as WAITING only what comes after this screen.
    _shown.record(client.instance_id, child.id, len(kept))
    if outcome.signal is not None:
        return 128 + outcome.signal
    if outcome.reason == _proxy.TERMINAL_GONE:
        broken = relay_broken()
        if broken is not None:  # its output still reaches the person: say why
            say(f"[{name}: {broken}; detached]", _ends_line(shown))
        return 1
    skipped = f"; {outcome.skipped} bytes skipped while it was behind" if outcome.skipped else ""
    say(f"[detached from {name}{skipped}]", _ends_line(shown))
    return 0


def attach_exited(
    client: SyncClient,
    child: ChildInfo,
    replay: bytes,
    say: Say,
    close_exited: CloseExited,
) -> int:
    """The session had already exited: show what it wrote, close it."""
    # In raw mode as a live replay, its queries removed, the terminal reset.
    _screen.show_exited(sys.stdin.fileno(), sys.stdout.fileno(), replay)
    code = child.exit_code if child.exit_code is not None else 0
    close_exited(client, child)
    say(f"[{child.name} {describe_exit(code)}]", not replay or replay.endswith(b"\n"))
    return exit_status(code)
