"""Terminals a person sits at, for driving the ``multiserver`` command end to end.

A ``Terminal`` is a PTY whose master the test holds, like a terminal emulator's
window. On its slave runs, as session leader with the slave as its controlling
terminal, either the person's shell (``sh -i``, prompt ``outer$ ``) or one
command run directly (like ``xterm -e CMD``). Everything the window receives is
kept byte for byte (``raw``) and rendered by pyte (``screen_text``). Typing is
writing to the master; resizing is ``TIOCSWINSZ`` on it (the kernel sends
SIGWINCH); closing the window is closing the master (the kernel hangs up the
session).

The person's environment points at the test's private runtime and state dirs
(from ``ms_dirs``) and a private ``HOME``; nothing touches the user's real
dirs. Every process started in a window is found by its session id and
SIGKILLed by pid at teardown; daemons are stopped by ``ms_dirs``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import attrs
import pyte
import pytest
import trio

from multiserver import ChildInfo, open_client
from tests.conftest import (
    POLL_INTERVAL,
    MsDirs,
    is_alive,
    stop_daemon_sync,
    wait_until_sync,
)
from tests.procs import cmdlines

MULTISERVER = str(Path(sys.executable).with_name("multiserver"))
OUTER_PROMPT = "outer$ "
INNER_PROMPT = "in$ "
# An interactive shell with a known prompt, as a session's command.
INNER_SH = f"env 'PS1={INNER_PROMPT}' sh -i"
ROWS, COLS = 30, 100
# Bounds on what a person waits for: every `multiserver` run pays ~1 s of
# Python start-up on this machine, more when both cores are busy.
SCREEN_TIMEOUT = 15.0


def session_pids(sid: int) -> list[int]:
    """Live processes whose session id is ``sid`` (the window's processes)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return sorted(found)


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


@attrs.define(eq=False)
class Terminal:
    """One window: a PTY master, the process run on its slave, and what it shows."""

    name: str
    proc: subprocess.Popen[bytes]
    master: int | None
    # Answers what pyte answers (DA1, DSR, the cursor's position), as it
    # receives it: a terminal that asked gets its answer typed back.
    answering: bool = False
    raw: bytearray = attrs.Factory(bytearray)
    answered: list[str] = attrs.Factory(list)  # what it answered, in order
    hung_up: trio.Event = attrs.Factory(trio.Event)
    reading: trio.Event = attrs.Factory(trio.Event)
    _screen: pyte.Screen = attrs.field(init=False)
    _stream: pyte.ByteStream = attrs.field(init=False)
    _fed: int = 0

    def __attrs_post_init__(self) -> None:
        self._screen = pyte.Screen(COLS, ROWS)
        self._stream = pyte.ByteStream(self._screen)
        if self.answering:
            self._screen.write_process_input = self._answer  # type: ignore[method-assign]

    @property
    def pid(self) -> int:
        return self.proc.pid

    # --- what the person does ---

    def type(self, keys: str | bytes) -> None:
        assert self.master is not None, f"{self.name} is closed"
        data = keys.encode() if isinstance(keys, str) else keys
        while data:
            n = os.write(self.master, data)
            data = data[n:]

    def line(self, text: str) -> None:
        """Type ``text`` and Enter."""
        self.type(text + "\r")

    def resize(self, rows: int, cols: int) -> None:
        assert self.master is not None
        self._feed()
        self._screen.resize(rows, cols)
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def start_reading(self) -> None:
        """A window opened with ``reading=False`` reads nothing until this:
        the terminal of a person whose emulator has stalled."""
        self.reading.set()

    def pending(self) -> int:
        """Bytes written to the window that it has not read yet."""
        assert self.master is not None
        buf = fcntl.ioctl(self.master, termios.FIONREAD, b"\0\0\0\0")
        return int(struct.unpack("i", buf)[0])

    def close(self) -> None:
        """Close the window: the kernel hangs up everything on its slave."""
        if self.master is not None:
            fd, self.master = self.master, None
            trio.lowlevel.notify_closing(fd)
            os.close(fd)

    def _answer(self, answer: str) -> None:
        if self.master is not None:
            self.answered.append(answer)
            self.type(answer)

    # --- what the person sees ---

    def _feed(self) -> None:
        if self._fed < len(self.raw):
            self._stream.feed(bytes(self.raw[self._fed :]))
            self._fed = len(self.raw)

    def screen_lines(self) -> list[str]:
        self._feed()
        return [line.rstrip() for line in self._screen.display]

    def screen_text(self) -> str:
        """The screen, trailing blank lines and spaces removed."""
        return "\n".join(self.screen_lines()).rstrip("\n")

    def cursor(self) -> tuple[int, int]:
        self._feed()
        return self._screen.cursor.y, self._screen.cursor.x

    async def wait_screen(
        self,
        check: str | re.Pattern[str] | Callable[[str], object],
        timeout: float = SCREEN_TIMEOUT,
    ) -> str:
        """Wait until the screen shows ``check`` (text, regex or predicate);
        returns the screen. Fails with the screen as it is."""
        if isinstance(check, str):
            needle = check
            ok: Callable[[str], object] = lambda s: needle in s  # noqa: E731
        elif isinstance(check, re.Pattern):
            pattern = check
            ok = lambda s: pattern.search(s)  # noqa: E731
        else:
            ok = check
        deadline = trio.current_time() + timeout
        while not ok(text := self.screen_text()):
            if trio.current_time() >= deadline:
                what = getattr(check, "__qualname__", None) or repr(check)
                pytest.fail(
                    f"{self.name}: {what} not on screen within {timeout} s; screen:\n{text}"
                )
            await trio.sleep(POLL_INTERVAL * 4)
        return text

    async def wait_bytes(
        self, check: bytes | Callable[[bytes], object], timeout: float = SCREEN_TIMEOUT
    ) -> None:
        """Wait until what the window received contains ``check`` (or passes
        it), without rendering: for streams too long for pyte."""
        ok = (lambda b: check in b) if isinstance(check, bytes) else check
        deadline = trio.current_time() + timeout
        while not ok(self.raw):
            if trio.current_time() >= deadline:
                pytest.fail(
                    f"{self.name}: {check!r} not received within {timeout} s;"
                    f" last bytes: {bytes(self.raw[-300:])!r}"
                )
            await trio.sleep(POLL_INTERVAL)

    async def wait_prompt(self, prompt: str = OUTER_PROMPT, count: int = 1) -> str:
        """Wait until the screen ends with ``prompt`` (the ``count``-th time
        it appears on screen)."""
        want = prompt.rstrip()

        def ok(screen: str) -> bool:
            return screen.endswith(want) and screen.count(want) >= count

        ok.__qualname__ = f"prompt {want!r} (#{count})"
        return await self.wait_screen(ok)

    def is_raw(self) -> bool:
        """True while the terminal is in raw mode (a client has taken it)."""
        if self.master is None:
            return False
        lflag = termios.tcgetattr(self.master)[3]
        return not lflag & (termios.ICANON | termios.ECHO)

    async def wait_raw_mode(self, raw: bool = True, timeout: float = SCREEN_TIMEOUT) -> None:
        """Wait until a client has taken the terminal (raw) or given it back."""
        with trio.move_on_after(timeout):
            while self.is_raw() != raw:
                await trio.sleep(POLL_INTERVAL)
            return
        pytest.fail(
            f"{self.name}: not {'in' if raw else 'out of'} raw mode within {timeout} s;"
            f" screen:\n{self.screen_text()}"
        )

    def processes(self) -> list[int]:
        return session_pids(self.pid)

    def client_pids(self) -> list[int]:
        """The ``multiserver`` processes running in this window."""
        return [p for p in self.processes() if any("multiserver" in a for a in cmdline(p)[:2])]

    # --- the window's plumbing ---

    async def pump(self) -> None:
        """Read what the window receives until it is hung up or closed."""
        try:
            await self.reading.wait()
            while self.master is not None:
                fd = self.master
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    with contextlib.suppress(trio.ClosedResourceError):
                        await trio.lowlevel.wait_readable(fd)
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EIO, errno.EBADF):
                        return
                    raise
                if not data:
                    return
                self.raw += data
                if self.answering:
                    self._feed()  # pyte answers what asks, at once
        finally:
            self.hung_up.set()

    def kill_all(self) -> None:
        """SIGKILL, by pid, every process left in the window, then reap the
        one we started."""
        for _ in range(3):
            pids = self.processes()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            wait_until_sync(lambda pids=pids: not any(is_alive(p) for p in pids), 5.0)
        self.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)


def on_a_terminal(argv: list[str], env: dict[str, str], cols: int = 0) -> bytes:
    """Run ``argv`` with stdin, stdout and stderr a fresh PTY (``cols``
    wide, if given) until it exits, which it must with 0; every byte it
    wrote there."""
    code, seen = run_on_a_terminal(argv, env, cols)
    assert code == 0, seen
    return seen


def run_on_a_terminal(
    argv: list[str], env: dict[str, str], cols: int = 0, cwd: Path | None = None
) -> tuple[int, bytes]:
    """Run ``argv`` (in ``cwd``) with stdin, stdout and stderr a fresh PTY
    (``cols`` wide, if given) until it exits: its exit status (negative:
    killed by that signal) and every byte it wrote there."""
    leader, follower = pty.openpty()
    if cols:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=follower, stdout=follower, stderr=follower
        )
        os.close(follower)
        follower = -1
        seen = b""
        while True:  # until the PTY hangs up: the command exited, every byte read
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        return proc.wait(timeout=30), seen
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)


def person_env(ms_dirs: MsDirs) -> dict[str, str]:
    """The environment of the person's shell: the test's private dirs (set
    by ``ms_dirs``), a private HOME and TMPDIR, the venv's ``multiserver``
    first on PATH."""
    home = ms_dirs.root / "home"
    home.mkdir(exist_ok=True)
    # The short-path fallback socket dir is $TMPDIR/ms-UID: private too, so
    # no command here ever sees a daemon of the user's or of another test.
    tmp = ms_dirs.root / "tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BASH_ENV", "ENV", "TMUX"))}
    env.update(
        PATH=f"{Path(MULTISERVER).parent}:/usr/bin:/bin",
        HOME=str(home),
        TMPDIR=str(tmp),
        SHELL="/bin/sh",
        TERM="xterm",
        PS1=OUTER_PROMPT,
        LC_ALL="C.UTF-8",
    )
    env.pop("PROMPT_COMMAND", None)
    return env


@pytest.fixture
async def open_terminal(
    ms_dirs: MsDirs, nursery: trio.Nursery
) -> AsyncIterator[Callable[..., Terminal]]:
    """``open_terminal(argv=None, name=..., rows=, cols=)`` opens a window
    running the person's shell (or ``argv`` directly) and starts reading it
    (``reading=False``: not yet; ``answering=True``: it answers queries).
    Every window is closed and every process in it SIGKILLed at teardown."""
    opened: list[Terminal] = []
    counter = iter(range(1, 100))

    def open_(
        argv: Sequence[str] | None = None,
        *,
        name: str | None = None,
        rows: int = ROWS,
        cols: int = COLS,
        env: dict[str, str] | None = None,
        reading: bool = True,
        answering: bool = False,
    ) -> Terminal:
        master, slave = os.openpty()
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.set_blocking(master, False)
        # setsid -c: a new session whose controlling terminal is the slave.
        command = ["setsid", "-c", *(argv or ["sh", "-i"])]
        try:
            proc = subprocess.Popen(
                command,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=env or person_env(ms_dirs),
                cwd=ms_dirs.root,
                close_fds=True,
            )
        finally:
            os.close(slave)
        term = Terminal(name or f"terminal {next(counter)}", proc, master, answering)
        if (rows, cols) != (ROWS, COLS):
            term._screen.resize(rows, cols)
        opened.append(term)
        if reading:
            term.start_reading()
        nursery.start_soon(term.pump)
        return term

    try:
        yield open_
    finally:
        for term in opened:
            term.kill_all()


def running_for(ms_dirs: MsDirs) -> dict[int, bytes]:
    """Every process but this one whose command line or environment names
    this test's dirs, with its command line: a daemon (its socket names
    them), a client, and whatever a session runs (it has the environment
    of the command that started it)."""
    root = str(ms_dirs.root).encode()
    found = {}
    for pid, cmdline in cmdlines():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if root in cmdline or root in environ:
            found[pid] = cmdline
    return found


def ours(ms_dirs: MsDirs) -> list[int]:
    """Every process of multiserver's running for these dirs (of
    ``running_for``, those that run multiserver)."""
    return sorted(pid for pid, cmdline in running_for(ms_dirs).items() if b"multiserver" in cmdline)


# --- scripts' view, for checks next to what the person sees ---------------------------


def run_ms(
    ms_dirs: MsDirs, *args: str, check: bool = True, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``multiserver ARGS`` as a script runs it (no terminal), synchronously."""
    result = subprocess.run(
        [MULTISERVER, *args],
        env=person_env(ms_dirs),
        cwd=ms_dirs.root,
        capture_output=True,
        stdin=subprocess.DEVNULL if input is None else None,
        input=input,
        timeout=30,
    )
    if check and result.returncode != 0:
        pytest.fail(f"multiserver {' '.join(args)} -> {result.returncode}: {result.stderr!r}")
    return result


async def ms(ms_dirs: MsDirs, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """``run_ms`` in a worker thread, so windows keep being read meanwhile."""
    return await trio.to_thread.run_sync(lambda: run_ms(ms_dirs, *args, check=check))


async def ms_many(
    ms_dirs: MsDirs, *runs: Sequence[str], check: bool = True
) -> list[subprocess.CompletedProcess[bytes]]:
    """Several ``multiserver`` runs at once (each pays ~1 s of start-up,
    mostly CPU: two at a time on this 2-core machine); results in order."""
    results: list[subprocess.CompletedProcess[bytes] | None] = [None] * len(runs)
    limiter = trio.CapacityLimiter(2)

    async def one(i: int) -> None:
        async with limiter:
            results[i] = await ms(ms_dirs, *runs[i], check=check)

    async with trio.open_nursery() as nursery:
        for i in range(len(runs)):
            nursery.start_soon(one, i)
    return [r for r in results if r is not None]


async def sessions(ms_dirs: MsDirs) -> dict[str, dict[str, object]]:
    """``multiserver ls --json`` by name."""
    out = (await ms(ms_dirs, "ls", "--json")).stdout
    return {s["name"]: s for s in json.loads(out)}


async def listed(ms_dirs: MsDirs) -> dict[str, ChildInfo]:
    """The daemon's sessions by name, through the library."""
    async with open_client(ms_dirs.paths) as client:
        return {c.name: c for c in await client.list()}


async def wait_session(
    ms_dirs: MsDirs, name: str, check: Callable[[ChildInfo | None], object], what: str
) -> ChildInfo | None:
    """Poll the daemon (through the library: quicker than ``ls --json``)
    until the session ``name`` (None if absent) passes ``check``."""
    found: ChildInfo | None = None
    with trio.move_on_after(SCREEN_TIMEOUT):
        while True:
            async with open_client(ms_dirs.paths) as client:
                found = next((c for c in await client.list() if c.name == name), None)
            if check(found):
                return found
            await trio.sleep(POLL_INTERVAL * 4)
    pytest.fail(f"session {name}: not {what} within {SCREEN_TIMEOUT} s: {found}")


async def wait_buffered(ms_dirs: MsDirs, name: str, needle: bytes) -> bytes:
    """Poll the daemon until the output it keeps for ``name`` (what the next
    attach replays) contains ``needle``; returns that output."""
    kept = b""
    with trio.move_on_after(SCREEN_TIMEOUT):
        while True:
            async with open_client(ms_dirs.paths) as client:
                child = next((c for c in await client.list() if c.name == name), None)
                if child is not None:
                    kept = (await client.peek(child.id)).output
            if needle in kept:
                return kept
            await trio.sleep(POLL_INTERVAL * 4)
    pytest.fail(f"session {name}: {needle!r} not kept within {SCREEN_TIMEOUT} s: {kept[-300:]!r}")


async def write_fifo(path: Path, data: bytes = b"\n", timeout: float = SCREEN_TIMEOUT) -> None:
    """Write ``data`` to the FIFO ``path`` once a program has it open for
    reading (a program blocked opening it counts)."""
    deadline = trio.current_time() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or trio.current_time() >= deadline:
                raise
            await trio.sleep(POLL_INTERVAL)
            continue
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return


@contextlib.asynccontextmanager
async def older_daemon(ms_dirs: MsDirs, version: int) -> AsyncIterator[None]:
    """This code's daemon, speaking protocol 2..``version`` (the version is
    only ever read in the handshake), in the foreground at ``ms_dirs``'s
    socket for the length of the block, then stopped by its pid."""
    code = (
        "import multiserver.daemon._core as core\n"
        f"core.PROTOCOL_VERSION = {version}\n"
        "from multiserver_cli.main import main\n"
        'main(["daemon", "--foreground"])\n'
    )
    old = subprocess.Popen(
        [sys.executable, "-c", code],
        env=person_env(ms_dirs),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd="/",
    )
    try:
        assert old.stdout is not None
        ready = await trio.to_thread.run_sync(old.stdout.readline)  # the socket, once it listens
        assert ready.strip() == str(ms_dirs.paths.socket).encode()
        yield
    finally:
        if is_alive(old.pid):
            stop_daemon_sync(old.pid)
        old.wait(timeout=10)
        if old.stdout is not None:
            old.stdout.close()
