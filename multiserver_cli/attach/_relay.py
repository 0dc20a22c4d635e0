"""A terminal relayed over ssh: the person's terminal here, the attach there.

``attach HOST:NAME`` could run ``ssh -tt HOST multiserver attach NAME``;
then every byte the session writes crosses a second PTY on the host (the
one sshd makes), and that hop costs a third of the throughput. Instead the
remote attach runs with no terminal (``ssh -T``) and is told it has one:

- here (``relay_terminal``): this terminal in raw mode; ssh's output is
  this terminal itself (no copy here either); what is typed, and each size
  change, goes to ssh's stdin as ``_relay_codec`` frames it. The detach
  key is looked for here too, in every encoding (``_keys``), and sent on
  as its plain byte: the remote attach detaches as it does on a tty, and
  one that does not (it does not read, its host is frozen) is left after
  DETACH_WAIT all the same;
- there (``serve_relayed``, ``attach --relay``): the channel's input is
  decoded by a thread into a pipe that becomes fd 0, sizes are kept and
  announced with SIGWINCH, fd 2 joins fd 1 (status lines and errors come
  in order with the output, their line ends as a raw terminal needs).

The rest of the attach asks ``_tty``, not ``os.isatty``, whether it draws
on a terminal and how big it is, so it behaves the same on a relayed
terminal as on a tty; ``serve_relayed`` makes ``_tty`` say so
(``use_relayed``). Only raw mode is not set there: the terminal is raw
already, on this side.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import termios
import threading
import time
import tty

from multiserver_cli._errors import CliError
from multiserver_cli.attach._keys import DetachMatcher
from multiserver_cli.attach._relay_codec import Decoder, Size, encode_input, encode_size
from multiserver_cli.attach._tty import Relayed, terminal_size, use_relayed

# How long the remote attach waits for the first size (sent at once).
FIRST_SIZE_WAIT = 15.0
# Typed input not yet taken by ssh. Past it the terminal is still read,
# for the detach key, and what else is typed is dropped: ssh buffers far
# more than this before it stops taking input, so the other side is not
# reading at all.
PENDING_LIMIT = 64 * 1024
# After the terminal went away, how long ssh has to finish before it is told to.
GONE_WAIT = 10.0
# After the detach key, how long the remote attach has to detach (a round
# trip) before it is left: ssh is ended.
DETACH_WAIT = 2.0

# How ``_pump`` ends.
SSH_DONE, TERMINAL_GONE, DETACH_UNANSWERED = "ssh-done", "terminal-gone", "detach-unanswered"


# --- there: attach --relay ---------------------------------------------------------


def serve_relayed() -> None:
    """Make fds 0-2 the relayed terminal (see the module's docstring); the
    first size is read before this returns. CliError if it does not come
    within FIRST_SIZE_WAIT, or the stream breaks the relay's rules."""
    if os.isatty(0):
        raise CliError(
            "--relay is what `attach HOST:NAME` runs over ssh, not for a terminal:"
            " use `multiserver attach NAME`"
        )
    channel = os.dup(0)
    decoder = Decoder()
    first: list[bytes | Size] = []
    end = time.monotonic() + FIRST_SIZE_WAIT
    while not any(isinstance(item, tuple) for item in first):
        left = end - time.monotonic()
        if left <= 0 or not select.select([channel], [], [], left)[0]:
            raise CliError(f"--relay: no terminal size within {FIRST_SIZE_WAIT:g} s")
        data = os.read(channel, 4096)
        if not data:
            raise CliError("--relay: the terminal went away before its size came")
        first += decoder.feed(data)
        if decoder.error is not None and not any(isinstance(i, tuple) for i in first):
            raise CliError(f"--relay: {decoder.error}")
    relayed = Relayed(None)
    keys_r, keys_w = os.pipe()
    os.dup2(keys_r, 0)
    os.close(keys_r)
    # Status lines and errors go with the output, in order; a raw terminal
    # needs CR LF.
    os.dup2(1, 2)
    # A new stream on the new fd 2: ``reconfigure`` of the old one would
    # seek, and fails ("Illegal seek") when fd 2 was a file and is a pipe now.
    sys.stderr = open(  # noqa: SIM115  # fd 2 stays open; this object lives as long
        2, "w", buffering=1, newline="\r\n", closefd=False, errors="backslashreplace"
    )
    use_relayed(relayed)
    _deliver(first, relayed, keys_w)  # nobody is sized yet: SIGWINCH is ignored
    threading.Thread(
        target=_decode, args=(channel, decoder, relayed, keys_w), name="relay", daemon=True
    ).start()


def _deliver(items: list[bytes | Size], relayed: Relayed, keys_w: int) -> None:
    """Decoded input, in order: keystrokes into ``keys_w``; each size kept,
    given to ``size_to`` (the PTY sized before the keys after it go on),
    and announced with SIGWINCH (the daemon is told too)."""
    for item in items:
        if not isinstance(item, tuple):
            _write_all(keys_w, item)
            continue
        relayed.size = item
        with relayed.lock:
            if relayed.size_to is not None and all(item):
                with contextlib.suppress(OSError):
                    relayed.size_to(*item)
        os.kill(os.getpid(), signal.SIGWINCH)


def _decode(channel: int, decoder: Decoder, relayed: Relayed, keys_w: int) -> None:
    """The channel's input until its end (``_deliver``); ``keys_w`` is
    closed at the end, which the attach sees as its terminal gone."""
    try:
        while decoder.error is None and (data := os.read(channel, 65536)):
            _deliver(decoder.feed(data), relayed, keys_w)
        # A broken stream ends the input, as a terminal gone does (said
        # before the input ends: see relay_broken).
        relayed.broken = decoder.error
    except OSError:
        pass
    finally:
        os.close(keys_w)
        os.close(channel)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- here: the person's terminal, relayed to ssh -----------------------------------


def relay_terminal(argv: list[str], detach_key: bytes | None = None) -> tuple[int, bool]:
    """Run ``argv`` (an ``ssh -T`` running ``attach --relay``) with this
    terminal (fd 0, raw meanwhile) relayed to it: its output is written to
    the terminal by ssh itself; what is typed and each size change go to
    its stdin, up to ``detach_key`` (see the module's docstring). Returns
    ssh's exit status (negative: killed by a signal) and whether the
    detach key was typed. The terminal's modes come back on the way out."""
    import subprocess

    stdin = sys.stdin.fileno()
    size = terminal_size(stdin) or (24, 80)
    modes = termios.tcgetattr(stdin)
    sig_r, sig_w = os.pipe()
    done_r, done_w = os.pipe()
    os.set_blocking(sig_w, False)
    old_winch = signal.signal(signal.SIGWINCH, lambda *_: None)
    old_wakeup = signal.set_wakeup_fd(sig_w, warn_on_full_buffer=False)
    to_ssh = -1
    detached = False
    waiter: threading.Thread | None = None
    proc: subprocess.Popen[bytes] | None = None
    try:
        tty.setraw(stdin, termios.TCSANOW)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE)
        except FileNotFoundError as exc:
            raise CliError("ssh is not installed (not on PATH)") from exc
        assert proc.stdin is not None
        to_ssh = os.dup(proc.stdin.fileno())  # ours alone from here
        proc.stdin.close()
        os.set_blocking(to_ssh, False)

        def wait() -> None:
            proc.wait()
            os.write(done_w, b"x")

        waiter = threading.Thread(target=wait, name="ssh", daemon=True)
        waiter.start()
        keys = DetachMatcher(detach_key) if detach_key is not None else None
        ended = _pump(stdin, to_ssh, sig_r, done_r, size, keys)
        os.close(to_ssh)  # its end of input: the remote attach lets go
        to_ssh = -1
        if ended == DETACH_UNANSWERED:
            proc.terminate()
        elif ended == TERMINAL_GONE:
            try:
                proc.wait(GONE_WAIT)
            except subprocess.TimeoutExpired:
                proc.terminate()
        status = proc.wait()
        waiter.join()  # done_w is written before it is closed
        detached = keys is not None and keys.detached
        return status, detached
    finally:
        # An error or a signal's exception here (``_over_ssh``): ssh goes
        # too, reaped, before done_w does.
        if proc is not None and proc.returncode is None:
            proc.kill()
            if waiter is None:
                proc.wait()
        if waiter is not None:
            waiter.join()
        signal.set_wakeup_fd(old_wakeup)
        signal.signal(signal.SIGWINCH, old_winch)
        for fd in (sig_r, sig_w, done_r, done_w, to_ssh):
            if fd >= 0:
                os.close(fd)
        # After a detach, what was typed since is dropped, as a local attach
        # drops it: a kitty key release, say, is not for the shell.
        when = termios.TCSAFLUSH if detached else termios.TCSADRAIN
        with contextlib.suppress(termios.error):
            termios.tcsetattr(stdin, when, modes)


def _pump(
    stdin: int, to_ssh: int, sig_r: int, done_r: int, said: Size, keys: DetachMatcher | None
) -> str:
    """Until ssh exits (``done_r``: SSH_DONE), the terminal is gone
    (TERMINAL_GONE), or ssh has not exited DETACH_WAIT after the detach key
    (DETACH_UNANSWERED): the terminal's input up to that key, then the key's
    byte, and its sizes (``sig_r``: SIGWINCH; ``said``: the first, sent
    before anything else) to ssh."""
    pending = bytearray(encode_size(*said))
    poller = select.poll()
    poller.register(done_r, select.POLLIN)
    poller.register(sig_r, select.POLLIN)
    masks: dict[int, int] = {}
    left_by: float | None = None  # when to leave, once the detach key came
    while True:
        want = {
            stdin: select.POLLIN,  # after the key too: what follows is dropped
            to_ssh: select.POLLOUT if pending else 0,
        }
        for fd, mask in want.items():
            if masks.get(fd, 0) == mask:
                continue
            if mask:
                poller.register(fd, mask)  # register again: modifies
                masks[fd] = mask
            else:
                poller.unregister(fd)
                del masks[fd]
        until = left_by
        if until is None and keys is not None:
            until = keys.held_until  # a tail that may start the key goes on then
        try:
            ready = dict(poller.poll(None if until is None else _ms_until(until)))
        except InterruptedError:
            continue
        if done_r in ready:
            return SSH_DONE
        now = time.monotonic()
        if left_by is not None and now >= left_by:
            return DETACH_UNANSWERED
        signals = os.read(sig_r, 64) if sig_r in ready else b""
        typed = keys.expire(now) if keys is not None else b""
        if stdin in ready:
            try:
                read = os.read(stdin, 65536)
            except OSError:
                read = b""
            if not read:
                return TERMINAL_GONE
            typed += keys.feed(read, now) if keys is not None else read
            if keys is not None and keys.detached and left_by is None:
                typed += keys.key  # the remote attach detaches on its plain byte
                left_by = now + DETACH_WAIT
        # Keys read are followed by a look at the size, SIGWINCH or not: poll
        # can say stdin before the signal's handler has run (the kernel runs
        # it as poll returns), and keys typed after a resize must go after
        # its size. Asked after the read, the size is at least as new as the
        # keys (a terminal resizes before it sends what is typed next).
        asked = typed or signal.SIGWINCH in signals
        if asked and (size := terminal_size(stdin)) and size != said:
            pending += encode_size(*size)
            said = size
        if len(pending) < PENDING_LIMIT or left_by is not None:
            pending += encode_input(typed)
        if to_ssh in ready:
            try:
                del pending[: os.write(to_ssh, pending)]
            except BlockingIOError:
                pass
            except OSError:  # ssh's input is closed: it is on its way out
                pending.clear()


def _ms_until(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000) + 1)
