"""The relayed terminal (``attach --relay``, what ``attach HOST:NAME`` runs
through ``ssh -T``): its input codec; a size and the keys after it in that
order, on both ends of the relay; and a relay that breaks the rules or goes
away, which must cost the session nothing."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import threading
import time
import tty

import pytest
from hypothesis import given, strategies as st

from multiserver.internal import set_winsize
from multiserver_cli.attach._relay import _pump
from multiserver_cli.attach._relay_codec import (
    Decoder,
    Size,
    encode_input,
    encode_size,
)
from tests.cli.conftest import MULTISERVER, SCREEN_TIMEOUT, person_env, run_ms, wait_buffered
from tests.conftest import MsDirs, daemon_pids_for, frozen, read_until, wait_until_sync

Item = bytes | Size
items = st.lists(
    st.one_of(
        st.binary(min_size=1, max_size=40),
        st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF)),
    ),
    max_size=12,
)


def encode(sent: list[Item]) -> bytes:
    return b"".join(
        encode_size(*item) if isinstance(item, tuple) else encode_input(item) for item in sent
    )


def merged(got: list[Item]) -> list[Item]:
    """Keystrokes next to each other joined (the stream keeps no bounds
    between them), sizes as they are."""
    out: list[Item] = []
    for item in got:
        if isinstance(item, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += item
        else:
            out.append(item)
    return out


@given(items, st.lists(st.integers(1, 7), max_size=30))
def test_what_is_sent_comes_out_in_order_whatever_the_pieces(
    sent: list[Item], cuts: list[int]
) -> None:
    stream = encode(sent)
    decoder = Decoder()
    got: list[Item] = []
    at = 0
    for cut in cuts:
        got += decoder.feed(stream[at : at + cut])
        at += cut
    got += decoder.feed(stream[at:])
    assert merged(got) == merged(sent)


def test_a_nul_typed_is_a_nul_and_a_size_is_a_size() -> None:
    assert encode_input(b"a\x00b") == b"a\x00\x00b"
    assert Decoder().feed(b"x\x00W\x00\x18\x00\x50y\x00\x00") == [b"x", (24, 80), b"y\x00"]
    assert encode_size(70000, -3) == b"\x00W\xff\xff\x00\x00"  # clamped to 16 bits


def test_an_unknown_escape_ends_the_stream_after_what_came_before() -> None:
    decoder = Decoder()
    assert decoder.feed(b"ok\x00Zjunk") == [b"ok"]
    assert decoder.error == "relayed input has an unknown escape b'Z'"
    assert decoder.feed(b"more") == []


def _running(ms_dirs: MsDirs, name: str) -> bool:
    listed = json.loads(run_ms(ms_dirs, "ls", "--json").stdout)
    return any(s["name"] == name and s["state"] == "running" for s in listed)


def relayed_attach(ms_dirs: MsDirs, stdout: int, stderr: int) -> subprocess.Popen[bytes]:
    """``attach --relay`` to the session ``web``, as ssh runs it: its input a
    pipe the test writes the relay's stream to; no detach key, no redraw."""
    return subprocess.Popen(
        [MULTISERVER, "attach", "--relay", "-E", "--redraw", "none", "web"],
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=stderr,
        env=person_env(ms_dirs),
        cwd=ms_dirs.root,
    )


def let_go(proc: subprocess.Popen[bytes]) -> None:
    """The relayed terminal goes (its input closes): the attach lets go and
    exits; killed if it has not within SCREEN_TIMEOUT."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        proc.wait(SCREEN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        (b"\x00Zjunk", "multiserver: --relay: relayed input has an unknown escape b'Z'"),
        (b"", "multiserver: --relay: the terminal went away before its size came"),
    ],
)
def test_a_relay_that_breaks_the_rules_at_once_is_one_line(
    ms_dirs: MsDirs, sent: bytes, said: str
) -> None:
    run_ms(ms_dirs, "new", "-d", "-n", "web", "--", "sh")
    done = run_ms(ms_dirs, "attach", "--relay", "web", check=False, input=sent)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [said]
    assert _running(ms_dirs, "web")  # never touched


def test_relay_is_refused_on_a_terminal(ms_dirs: MsDirs) -> None:
    run_ms(ms_dirs, "new", "-d", "-n", "web", "--", "sh")
    pid, master = pty.fork()
    if pid == 0:  # the child: multiserver attach --relay on a terminal
        try:
            os.execve(MULTISERVER, [MULTISERVER, "attach", "--relay", "web"], person_env(ms_dirs))
        finally:
            os._exit(127)
    try:
        seen = bytearray()
        with contextlib.suppress(OSError):
            while chunk := os.read(master, 4096):
                seen += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(master)
    assert os.waitstatus_to_exitcode(status) == 1
    assert bytes(seen).strip() == (
        b"multiserver: --relay is what `attach HOST:NAME` runs over ssh, not for a"
        b" terminal: use `multiserver attach NAME`"
    )
    assert _running(ms_dirs, "web")


@pytest.mark.parametrize("end", [b"", b"\x00Q broken after the size"])
async def test_a_relay_that_ends_or_breaks_later_lets_the_session_go(
    ms_dirs: MsDirs, end: bytes
) -> None:
    run_ms(ms_dirs, "new", "-d", "-n", "web", "--", "sh")
    sent = encode_size(24, 80) + b"echo typed-through-the-relay\r" + end
    done = run_ms(ms_dirs, "attach", "--relay", "--redraw", "none", "web", check=False, input=sent)
    # The relayed terminal went away: the session is let go, as at a hangup;
    # an input that broke the rules is said (the output still goes there).
    assert done.returncode == 1, done.stderr
    said = "[web: relayed input has an unknown escape b'Q'; detached]"
    assert (said in done.stdout.decode(errors="replace")) == bool(end), done.stdout[-300:]
    await wait_buffered(ms_dirs, "web", b"typed-through-the-relay")
    assert _running(ms_dirs, "web")
    listed = json.loads(run_ms(ms_dirs, "ls", "--json").stdout)
    assert [s["held"] for s in listed if s["name"] == "web"] == [False]


async def test_keys_sent_after_a_resize_reach_the_program_after_it(ms_dirs: MsDirs) -> None:
    """A resize and the line typed after it, in one write: the program
    reads the line on a PTY of the new size. The daemon is frozen
    meanwhile, so its own resize (SIGWINCH -> the attach -> ``Resize``)
    cannot come first by luck: the relay sizes the PTY itself, before it
    passes on what followed the size (``_relay._deliver``, ``size_to``).
    Without that, the program says the old size, every run."""
    script = 'while read -r line; do echo "[$line at $(stty size)]"; done'
    run_ms(ms_dirs, "new", "-d", "-n", "web", "--", "sh", "-c", script)
    [daemon] = daemon_pids_for(ms_dirs.paths.socket)
    proc = relayed_attach(ms_dirs, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdin is not None and proc.stdout is not None
    to_relay, shown = proc.stdin.fileno(), proc.stdout.fileno()
    try:
        os.write(to_relay, encode_size(30, 100) + encode_input(b"before\r"))
        await read_until(shown, b"[before at 30 100]", SCREEN_TIMEOUT)  # attached, sized
        async with frozen(daemon):
            os.write(to_relay, encode_size(40, 120) + encode_input(b"after\r"))
            said = await read_until(shown, b"]", SCREEN_TIMEOUT)
        assert b"[after at 40 120]" in said, said
    finally:
        let_go(proc)
    assert _running(ms_dirs, "web")


def test_keys_read_after_a_resize_go_to_ssh_after_its_size() -> None:
    """This side of the relay (``_relay._pump``) on a real PTY: the window
    is resized and keys typed before the SIGWINCH is seen (here it never
    is: nothing writes to ``sig_r``), and the size still goes first,
    asked after the keys are read. A resize alone goes on its SIGWINCH."""
    master, window = os.openpty()  # the person's window; ``window`` is its tty
    tty.setraw(window)
    set_winsize(master, 24, 80)
    to_ssh_r, to_ssh = os.pipe()
    sig_r, sig_w = os.pipe()
    done_r, done_w = os.pipe()
    os.set_blocking(to_ssh, False)
    pump = threading.Thread(target=_pump, args=(window, to_ssh, sig_r, done_r, (24, 80), None))
    pump.start()
    got: list[Item] = []
    decoder = Decoder()

    def sent_to_ssh(*want: Item) -> None:
        """What went to ssh, read until its last item came (in whatever order)."""
        end = time.monotonic() + SCREEN_TIMEOUT
        while want[-1] not in merged(got):
            left = max(0.0, end - time.monotonic())
            assert select.select([to_ssh_r], [], [], left)[0], f"{want[-1]!r} not sent: {got}"
            got.extend(decoder.feed(os.read(to_ssh_r, 4096)))
        assert merged(got) == list(want)

    try:
        sent_to_ssh((24, 80))  # the first size, before anything else
        set_winsize(master, 40, 120)
        os.write(master, b"keys")
        sent_to_ssh((24, 80), (40, 120), b"keys")
        set_winsize(master, 50, 132)
        os.write(sig_w, bytes([signal.SIGWINCH]))
        sent_to_ssh((24, 80), (40, 120), b"keys", (50, 132))
    finally:
        os.write(done_w, b"x")  # ssh exited: the pump returns
        pump.join(SCREEN_TIMEOUT)
        for fd in (master, window, to_ssh_r, to_ssh, sig_r, sig_w, done_r, done_w):
            os.close(fd)
    assert not pump.is_alive()


def test_a_large_paste_reaches_the_program_byte_for_byte(ms_dirs: MsDirs) -> None:
    """256 KiB of every byte value typed through the relay into a program
    on a raw terminal (the relay's NUL, the PTY's 4 KiB input queue and the
    copy loop's input limit all on the way): it gets them all, in order.
    The session shows nothing first: a replay would make the attach ask the
    terminal (nobody here answers) and take answer-like bytes typed within
    a second for the answers (``_terminal.AnswerFilter``)."""
    out = ms_dirs.root / "pasted"
    script = f"stty raw -echo; exec cat > {out}"
    run_ms(ms_dirs, "new", "-d", "-n", "web", "--", "sh", "-c", script)
    paste = os.urandom(256 * 1024)
    proc = relayed_attach(ms_dirs, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        assert wait_until_sync(out.exists, 15)  # stty has run
        writer = threading.Thread(
            target=proc.stdin.write, args=(encode_size(24, 80) + encode_input(paste),)
        )
        writer.start()
        writer.join(60)
        assert not writer.is_alive(), "the relay stopped taking input"
        proc.stdin.flush()
        assert wait_until_sync(lambda: out.stat().st_size >= len(paste), 60), out.stat()
    finally:
        proc.stdin.close()
        proc.wait(30)
    assert out.read_bytes() == paste
    assert _running(ms_dirs, "web")


async def test_a_relay_whose_stderr_is_a_file_runs(ms_dirs: MsDirs) -> None:
    """stderr a file, stdout a pipe (as under a test runner's capture): the
    relay points stderr at the output and writes CR LF there; it used to
    ``reconfigure`` the old stream, which seeks: "Illegal seek" at once."""
    run_ms(ms_dirs, "new", "-d", "-n", "web", "--", "sh")
    with open(ms_dirs.root / "relay-stderr", "w+b") as err:
        proc = relayed_attach(ms_dirs, stdout=subprocess.PIPE, stderr=err.fileno())
        assert proc.stdin is not None and proc.stdout is not None
        try:
            os.write(proc.stdin.fileno(), encode_size(24, 80) + encode_input(b"echo re-lay-ed\r"))
            await read_until(proc.stdout.fileno(), b"re-lay-ed", SCREEN_TIMEOUT)
        finally:
            let_go(proc)
        err.seek(0)
        assert err.read() == b""  # everything went to the output, nothing crashed
    assert proc.returncode == 1  # the relayed terminal went away: let go
    assert _running(ms_dirs, "web")
