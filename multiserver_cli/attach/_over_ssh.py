"""``attach HOST:NAME``: this terminal attached to a session of another
host, through ssh. The remote multiserver's own attach draws, detaches and
resets the terminal as it does here; this side runs ssh (relayed,
``_relay``, where the remote can: no PTY of sshd's between the session and
the link; else ``ssh -tt``) and makes the connection again when it drops.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import termios
import time
import tty
from argparse import Namespace
from collections.abc import Collection, Iterator

from multiserver_cli import _remote
from multiserver_cli._errors import CliError
from multiserver_cli._saved import open_saved, take_notice
from multiserver_cli._sessions import check_name
from multiserver_cli._version import compatible
from multiserver_cli.attach._keys import DetachMatcher, key_name
from multiserver_cli.attach._relay import relay_terminal
from restore import SSH_FAILED, Host, remote_json, ssh_argv

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Reconnecting after a drop: waits double from the first to the last, and
# it gives up RECONNECT_FOR seconds after the drop.
RECONNECT_FIRST, RECONNECT_LAST = 0.5, 8.0
RECONNECT_FOR = 300.0
# A connection that lasted this long was up: a drop after it starts the
# waits again from the first.
WAS_UP = 10.0


def attach_there(host_name: str, name: str, args: Namespace) -> int:
    """``attach HOST:NAME``: one round trip first (``_reach``), the session
    started again there if it is saved here and gone there
    (``_remote.bring_back``), its notice shown once, then the remote
    attach (``interactive``)."""
    host = _remote.host_of(host_name)
    check_name(name)
    if not os.isatty(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    features = _reach(host)
    _remote.bring_back(host, name)
    # A session started again there (by restore, or just now): its notice
    # (the saved scrollback, the marker and why) first, once.
    with open_saved() as saved:
        notice = take_notice(saved, f"{host_name}:{name}")
    if notice:
        from multiserver.internal import strip_for_terminal

        os.write(sys.stdout.fileno(), strip_for_terminal(notice))
    words = ["attach", *detach_words(args, features)]
    if "host-label" in features:  # its refusals name this host (as `rh: ...`)
        words += ["--host-label", host_name]
    return interactive(host, [*words, name], args.detach_key, "attach-relay" in features)


def detach_words(args: Namespace, features: Collection[str] | None = None) -> list[str]:
    """The remote attach's options that say what this one's say, as its
    ``features`` read them (None: not asked; a session just made there,
    which nobody else holds)."""
    words = ["-E"] if args.no_detach else ["-e", args.detach_spec]
    shares = features is None or "share" in features
    if args.redraw != "winch":  # the default on both sides: no flag
        words += ["--redraw" if shares else "-r", args.redraw]
    if features is not None and not shares:
        if getattr(args, "read_only", False):
            raise CliError("that host's multiserver is too old to watch a session (-r): upgrade it")
        return words  # it takes sessions over, as -d does
    if getattr(args, "read_only", False):
        words.append("--read-only")
    elif getattr(args, "takeover", False):
        words.append("--takeover")
    return words


def interactive(
    host: Host, remote: list[str], detach_key: bytes | None = None, relay: bool | None = None
) -> int:
    """The remote ``attach`` on this terminal: the remote multiserver draws,
    detaches and resets the terminal as it does here. Relayed (``_relay``:
    ``ssh -T``, no PTY on the host between the session and the link) when
    the remote can (``relay``: its ``version --json`` said so; None: ask);
    else through ``ssh -tt``.

    Relayed, the detach key is seen here too (``_relay``): a remote that
    does not answer it is left. A connection that drops (ssh exits 255, or
    is killed) is made again, with waits that double up to RECONNECT_LAST,
    for RECONNECT_FOR seconds at most, each wait said on the terminal; the
    detach key (in whatever encoding the terminal sends it) stops the
    waiting. The remote session was let go of at the drop (the relay's
    input ended; through ``-tt``, sshd hung its terminal up), so the next
    attach replays everything it wrote meanwhile. The terminal's modes are
    put back after each ssh (one that was killed could not), and after a
    drop the terminal is reset (``screen_reset``) before the lines for the
    person. SIGTERM or SIGHUP ends it all: ssh killed and reaped, the
    terminal put back and reset; the status is 128 + the signal's number."""
    if not os.isatty(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    if relay is None:
        relay = "attach-relay" in _reach(host)
    # A person is here: ssh may ask for a passphrase (the shared connection
    # is up already, made by _reach, so it seldom has to).
    if relay:
        argv = ssh_argv(host, [remote[0], "--relay", *remote[1:]], batch=False)
    else:
        argv = ssh_argv(host, remote, tty=True, batch=False)
    modes = termios.tcgetattr(0)
    with _signals_end_it():
        try:
            return _connections(host, argv, relay, modes, detach_key)
        except _Signalled as exc:
            # ssh was killed on the way out (subprocess.run's, relay_terminal's
            # own cleanup); the terminal's modes are put back and reset.
            termios.tcsetattr(0, termios.TCSADRAIN, modes)
            _reset_terminal()
            return 128 + exc.signum


def _connections(
    host: Host, argv: list[str], relay: bool, modes: list[Any], detach_key: bytes | None
) -> int:
    """ssh, made again after each drop (see ``interactive``)."""
    waits = _waits()
    given_up_at: float | None = None
    while True:
        started = time.monotonic()
        detached = False
        try:
            if relay:
                status, detached = relay_terminal(argv, detach_key)
            else:
                status = subprocess.run(argv).returncode
        except FileNotFoundError as exc:
            raise CliError("ssh is not installed (not on PATH)") from exc
        finally:
            termios.tcsetattr(0, termios.TCSAFLUSH if detached else termios.TCSADRAIN, modes)
        if status != SSH_FAILED and status >= 0:
            return status  # the remote attach's own end: detached, exited
        # The link is lost (or ssh was ended at the detach key: the remote
        # did not answer), and the remote attach's reset with it: the
        # program's modes end here, before the lines for the person.
        _reset_terminal()
        if detached:  # not to be made again
            _say(f"[detached: {host.name} did not answer; the session runs on there]")
            return 0
        now = time.monotonic()
        if given_up_at is None or now - started >= WAS_UP:
            given_up_at, waits = now + RECONNECT_FOR, _waits()
        wait = next(waits)
        if now + wait > given_up_at:
            _say(f"[gave up reconnecting to {host.name} after {RECONNECT_FOR:g} s]")
            return 1
        stop = "" if detach_key is None else f"; {key_name(detach_key)} to stop"
        _say(f"[reconnecting to {host.name}... in {wait:g} s{stop}]")
        if _key_within(detach_key, wait):
            _say(f"[stopped reconnecting to {host.name}; the session runs on there]")
            return 0


class _Signalled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_end_it() -> Iterator[None]:
    """While attached over ssh, SIGTERM and SIGHUP end the attach as an
    exception where this thread is (in ssh's wait, the relay's poll, the
    reconnect wait): every step on the way out kills and reaps its ssh, so
    no ``ssh -T`` is left behind."""

    def end(signum: int, _frame: object) -> None:
        raise _Signalled(signum)

    old = {s: signal.signal(s, end) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _reset_terminal() -> None:
    """The one reset (``screen_reset``) where the remote program's screen
    ends without its own attach's: its modes were never followed here (ssh
    writes to the terminal itself), so all of them are undone."""
    from multiserver.internal import screen_reset

    with contextlib.suppress(OSError):
        os.write(sys.stdout.fileno(), screen_reset(None))


def _reach(host: Host) -> frozenset[str]:
    """One round trip first, a person at the terminal (ssh may ask for a
    passphrase: a deferred host is brought back so): a host that cannot be
    reached is one line, not a reconnect loop; and the shared connection is
    up for what follows. What its command line can do (``_version.FEATURES``:
    whether its attach can be relayed, ``_relay``, and so on)."""
    answer = remote_json(host, ["version", "--json"], timeout=host.timeout, batch=False)
    compatible(answer, host)
    features = answer.get("features") if isinstance(answer, dict) else None
    if not isinstance(features, list):
        return frozenset()
    return frozenset(f for f in features if isinstance(f, str))


def _waits() -> Iterator[float]:
    wait = RECONNECT_FIRST
    while True:
        yield wait
        wait = min(RECONNECT_LAST, wait * 2)


def _say(line: str) -> None:
    from multiserver.internal import printable

    os.write(sys.stderr.fileno(), f"\r\n{printable(line)}\r\n".encode())


def _key_within(key: bytes | None, seconds: float) -> bool:
    """Wait ``seconds``, reading the terminal raw: True if ``key`` came,
    in any encoding (the program there may have turned on the kitty
    keyboard protocol: the terminal still sends what it asked for)."""
    end = time.monotonic() + seconds
    keys = DetachMatcher(key) if key is not None else None
    modes = termios.tcgetattr(0)
    try:
        tty.setraw(0, termios.TCSANOW)
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([0], [], [], left)
            if ready:
                typed = os.read(0, 1024)
                if not typed:
                    return True  # the terminal went away
                if keys is not None:
                    keys.feed(typed)  # what is not the key is dropped
                    if keys.detached:
                        return True
        return False
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, modes)
