"""``multiserver attach``: hold a session's PTY and be its terminal.

Sequence: claim (taking it over from any other client) -> replay the output
buffered while detached, without its queries -> size the PTY to this terminal
and make full-screen programs redraw -> proxy in raw mode until detach, exit,
takeover or the terminal going away -> reset the terminal (alternate screen,
cursor, keys, mouse...) and restore its modes -> release (or collect).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import sys
import termios
from collections.abc import Awaitable, Callable
from typing import Literal

import attrs
import trio

from multiserver import ChildExited, ChildInfo, ChildTaken, Client, MultiserverError
from multiserver._buffer import OutputBuffer
from multiserver_cli import _proxy
from multiserver_cli._sessions import CliError

Redraw = Literal["none", "winch", "ctrl_l"]
# Prints a status line; True when the terminal's cursor is at a line start.
Say = Callable[[str, bool], None]
# Closes a session whose program exited: collect it, forget its saved session.
CloseExited = Callable[[Client, ChildInfo], Awaitable[None]]
# How much of what the terminal showed goes back to the daemon on detach.
SCREEN_KEEP = 256 * 1024
# After the PTY reports EOF, how long to wait for the daemon's exit notice.
EXIT_NOTICE_WAIT = 5.0


@attrs.define
class _Outcome:
    """What ended the attachment, besides the proxy's own reason."""

    exit_code: int | None = None
    taken: bool = False
    signal: int | None = None
    settled: trio.Event = attrs.Factory(trio.Event)


def _ends_line(shown: OutputBuffer) -> bool:
    data = shown.peek()[0]
    return not data or data.endswith(b"\n")


def exit_status(code: int) -> int:
    """A child's exit code as a shell would report it (128+N for signal N)."""
    return 128 - code if code < 0 else code


def terminal_size(fd: int) -> tuple[int, int] | None:
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        return None
    return (rows, cols) if rows and cols else None


async def _redraw(
    client: Client, child: ChildInfo, master: int, size: tuple[int, int] | None, how: Redraw
) -> None:
    if size is not None:
        rows, cols = size
        if how == "winch":
            # A real size change is what makes a full-screen program repaint,
            # even when the size ends up where it was.
            await client.resize(child.id, rows, max(1, cols - 1) if cols > 1 else cols + 1)
        await client.resize(child.id, rows, cols)
    if how == "ctrl_l":
        _proxy.write_all(master, b"\x0c")


async def run_attached(
    client: Client,
    child: ChildInfo,
    master: int,
    *,
    replay: bytes,
    detach_key: bytes | None,
    redraw: Redraw,
    say: Say,
    close_exited: CloseExited,
) -> int:
    """Attach this terminal to ``child`` whose ``master`` we hold (and own).
    A program that exits meanwhile is closed with ``close_exited``.
    Returns the exit status for the command."""
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    if not os.isatty(stdin):
        raise CliError("attach needs a terminal: stdin is not a tty")
    name = child.name
    # A SIGHUP or SIGTERM that comes once the proxy has stopped (the closed
    # terminal's shell exits after the hangup, and the kernel then hangs up
    # our process group) must not kill us before the session is released with
    # its screen. While attached, the signal receiver handles them (and puts
    # this back on its way out); the command ends right after.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # What this terminal shows, handed back on release so that the next
    # attach replays the screen left behind (a shell's too, not only
    # full-screen programs, which redraw).
    shown = OutputBuffer(SCREEN_KEEP)
    ctl_r, ctl_w = os.pipe()
    outcome = _Outcome()
    try:
        # Raw mode; on every way out, the terminal reset (alternate screen
        # left, cursor shown...) before the status line.
        with _proxy.attached_terminal(stdin, stdout, shown) as screen:
            # The replay without its queries; the filter drops the terminal's
            # answers to what was missed.
            answers = screen.replay(replay, answers_to=stdin)
            await _redraw(client, child, master, terminal_size(stdin), redraw)

            async def watch() -> None:
                with trio.open_signal_receiver(
                    signal.SIGWINCH, signal.SIGHUP, signal.SIGTERM
                ) as sigs:
                    async for signum in sigs:
                        if signum == signal.SIGWINCH:
                            size = terminal_size(stdin)
                            if size is not None:
                                with contextlib.suppress(MultiserverError):
                                    await client.resize(child.id, *size)
                            continue
                        outcome.signal = signum
                        os.write(ctl_w, b"x")
                        return

            async def notices() -> None:
                async for notice in client.notices:
                    if notice.id != child.id:
                        continue
                    if isinstance(notice, ChildTaken):
                        outcome.taken = True
                        outcome.settled.set()
                        os.write(ctl_w, b"x")
                        return
                    if isinstance(notice, ChildExited):
                        outcome.exit_code = notice.exit_code
                        outcome.settled.set()
                        # The PTY may stay open (a grandchild holds it): stop.
                        os.write(ctl_w, b"x")
                        return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                nursery.start_soon(notices)
                reason = await trio.to_thread.run_sync(
                    _proxy.proxy,
                    master,
                    stdin,
                    screen,
                    ctl_r,
                    detach_key,
                    answers,
                    abandon_on_cancel=False,
                )
                if reason == _proxy.EOF:
                    with trio.move_on_after(EXIT_NOTICE_WAIT):
                        await outcome.settled.wait()
                nursery.cancel_scope.cancel()
            if outcome.exit_code is not None:
                screen.drain_rest(master)
    finally:
        os.close(ctl_r)
        os.close(ctl_w)
        os.close(master)

    if outcome.taken:
        say(f"[{name} attached elsewhere]", _ends_line(shown))
        return 0
    if outcome.exit_code is not None:
        code = outcome.exit_code
        await close_exited(client, child)
        say(f"[{name} exited with code {code}]", _ends_line(shown))
        return exit_status(code)
    await client.release([child.id], replace_output=shown.peek()[0])
    if outcome.signal is not None:
        return 128 + outcome.signal
    if reason == _proxy.TERMINAL_GONE:
        return 1
    say(f"[detached from {name}]", _ends_line(shown))
    return 0


async def attach_exited(
    client: Client,
    child: ChildInfo,
    replay: bytes,
    say: Say,
    close_exited: CloseExited,
) -> int:
    """The session had already exited: show what it wrote, close it."""
    # In raw mode as a live replay, its queries removed, the terminal reset.
    _proxy.show_exited(sys.stdin.fileno(), sys.stdout.fileno(), replay)
    code = child.exit_code if child.exit_code is not None else 0
    await close_exited(client, child)
    say(f"[{child.name} exited with code {code}]", not replay or replay.endswith(b"\n"))
    return exit_status(code)
