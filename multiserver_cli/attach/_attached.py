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
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

from multiserver import ChildExited, ChildTaken, ConnectionClosed, describe_exit, exit_status
from multiserver.internal import OutputBuffer, mutable_record
from multiserver_cli import _shown
from multiserver_cli._errors import CliError
from multiserver_cli._scrollback import ScreenKeeper
from multiserver_cli.attach import _proxy
from multiserver_cli.attach._daemon_gone import DaemonGone
from multiserver_cli.attach._tty import is_terminal, relay_broken, sizes_to, terminal_size

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
# After the PTY reports EOF, how long to wait for the daemon's exit notice.
EXIT_NOTICE_WAIT = 5.0
# The signals an attached client answers: a size change, and being told to go.
_WATCHED = (signal.SIGWINCH, signal.SIGHUP, signal.SIGTERM)


@mutable_record
class _Outcome:
    """What ended the attachment, besides the proxy's own reason."""

    exit_code: int | None = None
    taken: bool = False
    signal: int | None = None
    reason: str | None = None  # the proxy's, once it returned


def _size_pty(master: int, rows: int, cols: int) -> None:
    """The PTY sized by this client, which holds its master (on a relayed
    terminal, so that keys sent after a resize come after it; the daemon is
    told too, and its own resize then changes nothing)."""
    from multiserver.internal import set_winsize

    set_winsize(master, rows, cols)


def _ends_line(shown: OutputBuffer) -> bool:
    data = shown.peek()[0]
    return not data or data.endswith(b"\n")


def _redraw(
    client: SyncClient, child: ChildInfo, master: int, size: tuple[int, int] | None, how: Redraw
) -> None:
    if size is not None:
        rows, cols = size
        if how == "winch":
            # A real size change is what makes a full-screen program repaint,
            # even when the size ends up where it was.
            client.resize(child.id, rows, max(1, cols - 1) if cols > 1 else cols + 1)
        client.resize(child.id, rows, cols)
    if how == "ctrl_l":
        _proxy.write_all(master, b"\x0c")


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
    master: int,
    *,
    replay: bytes,
    detach_key: bytes | None,
    redraw: Redraw,
    say: Say,
    close_exited: CloseExited,
    keeper: ScreenKeeper | None = None,
) -> int:
    """Attach this terminal to ``child`` whose ``master`` we hold (and own).
    A program that exits meanwhile is closed with ``close_exited``.
    Returns the exit status for the command.

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
    outcome = _Outcome()
    # Should the daemon die meanwhile: the session goes on, said so (_daemon_gone).
    gone = DaemonGone.watching(client, child, master, ctl_w)
    copier: threading.Thread | None = None
    try:
        # Raw mode; on every way out, the terminal reset (alternate screen
        # left, cursor shown...) before the status line.
        with (
            _proxy.attached_terminal(stdin, stdout, shown) as screen,
            _signals_to(sig_w),
            sizes_to(lambda rows, cols: _size_pty(master, rows, cols)),
        ):
            # The replay without its queries; the filter drops the terminal's
            # answers to what was missed.
            answers = screen.replay(replay, answers_to=stdin)
            if replay and terminal_size(stdin) not in (None, (child.rows, child.cols)):
                screen.resized()
            if keeper is not None:
                screen.keep = keeper.live
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
                        master, stdin, screen, ctl_r, detach_key, answers, gone.notes
                    )
                finally:
                    os.write(done_w, b"x")

            copier = threading.Thread(target=copy, name="copy", daemon=True)
            copier.start()
            _watch(client, child, stdin, outcome, sig_r, done_r, ctl_w, gone, keeper)
            copier.join()
            copier = None
            if outcome.exit_code is not None:
                screen.drain_rest(master)
    finally:
        if copier is not None:  # an error in this thread: stop the copy loop first
            os.write(ctl_w, b"x")
            copier.join()
        if keeper is not None:  # before the session is given back: the daemon writes next
            keeper.last()
        for fd in (ctl_r, ctl_w, done_r, done_w, sig_r, sig_w, master):
            os.close(fd)
        gone.forget()  # the hold, if its daemon died, ended with the master

    return _ended(client, child, outcome, gone, shown, say, close_exited)


def _ended(
    client: SyncClient,
    child: ChildInfo,
    outcome: _Outcome,
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
    say(f"[detached from {name}]", _ends_line(shown))
    return 0


def _watch(
    client: SyncClient,
    child: ChildInfo,
    stdin: int,
    outcome: _Outcome,
    sig_r: int,
    done_r: int,
    ctl_w: int,
    gone: DaemonGone,
    keeper: ScreenKeeper | None = None,
) -> None:
    """Until the copy loop returns: answer notices and signals; stop the
    copy loop (``ctl_w``) when the session is taken, exits or we are told to
    go; write what the session showed when due (``keeper``). After a PTY EOF, wait a while
    for the exit notice."""
    watched = [done_r, sig_r, client.fileno()]
    stopping = False
    while True:
        if client.fileno() in watched:
            try:
                client.read_notices()  # a notice may have come with a reply
            except ConnectionClosed:
                # The daemon is gone; the session goes on through our fd.
                watched.remove(client.fileno())
                gone.noticed()
            while client.notices:
                notice = client.notices.popleft()
                if notice.id != child.id or stopping:
                    continue
                if isinstance(notice, ChildTaken):
                    outcome.taken = True
                elif isinstance(notice, ChildExited):
                    # The PTY may stay open (a grandchild holds it): stop.
                    outcome.exit_code = notice.exit_code
                os.write(ctl_w, b"x")
                stopping = True
        ready, _, _ = select.select(watched, [], [], None if keeper is None else keeper.wait())
        if keeper is not None and not stopping:
            keeper.tick()
        if sig_r in ready:
            for signum in os.read(sig_r, 64):
                if signum == signal.SIGWINCH:
                    size = terminal_size(stdin)
                    if size is not None and not stopping:
                        gone.resize(client, *size)
                elif not stopping:
                    outcome.signal = signum
                    os.write(ctl_w, b"x")
                    stopping = True
        if done_r in ready:
            break
    if outcome.reason == _proxy.EOF and outcome.exit_code is None and not outcome.taken:
        until = time.monotonic() + EXIT_NOTICE_WAIT
        with contextlib.suppress(ConnectionClosed):
            while (late := client.wait_notice(until)) is not None:
                if late.id == child.id and isinstance(late, ChildExited):
                    outcome.exit_code = late.exit_code
                    break


def attach_exited(
    client: SyncClient,
    child: ChildInfo,
    replay: bytes,
    say: Say,
    close_exited: CloseExited,
) -> int:
    """The session had already exited: show what it wrote, close it."""
    # In raw mode as a live replay, its queries removed, the terminal reset.
    _proxy.show_exited(sys.stdin.fileno(), sys.stdout.fileno(), replay)
    code = child.exit_code if child.exit_code is not None else 0
    close_exited(client, child)
    say(f"[{child.name} {describe_exit(code)}]", not replay or replay.endswith(b"\n"))
    return exit_status(code)
