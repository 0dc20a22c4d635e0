"""new, peek, attach and kill through a host (a real sshd on loopback)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Sequence

import attrs
import pytest
import trio

from tests.cli.conftest import Terminal, cmdline, session_pids
from tests.conftest import POLL_INTERVAL, MsDirs
from tests.remote.conftest import Remote, ssh_masters_under
from tests.remote.test_hosts import person_ssh_env, run


async def test_a_session_on_a_host_is_made_shown_attached_and_ended(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(
        ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web",
        "--", "sh", "-c", "echo hello-from-db1; exec sh",
    )  # fmt: skip
    assert made.returncode == 0 and made.stdout == "web\n", made.stderr
    (web,) = [s for s in json.loads(run(ms_dirs, sshd, "ls", "--json").stdout) if "host" in s]
    assert (web["host"], web["name"], web["linger"]) == ("db1", "web", 300.0)

    peeked = run(ms_dirs, sshd, "peek", "db1:web")
    assert peeked.returncode == 0 and "hello-from-db1" in peeked.stdout

    term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await term.wait_prompt()
    term.line("multiserver attach db1:web")
    await term.wait_screen("hello-from-db1")
    term.line("echo typed-over-ssh")
    await term.wait_screen("typed-over-ssh\n")
    term.type(b"\x1c")  # the detach key, ^\, read by the remote attach
    await term.wait_screen("detached from web")
    await term.wait_prompt(count=2)
    again = run(ms_dirs, sshd, "peek", "db1:web")
    assert "typed-over-ssh" in again.stdout  # it ran on, with what was typed

    killed = run(ms_dirs, sshd, "kill", "db1:web")
    assert killed.returncode == 0, killed.stderr
    assert not [s for s in json.loads(run(ms_dirs, sshd, "ls", "--json").stdout) if "host" in s]


def test_a_host_that_is_not_configured_is_named(ms_dirs: MsDirs, sshd: Remote) -> None:
    done = run(ms_dirs, sshd, "peek", "nowhere:web")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "multiserver: no host named nowhere (hosts: none: multiserver host add NAME --ssh DEST)"
    )


async def wait_until(check: Callable[[], object], what: str, timeout: float) -> None:
    with trio.move_on_after(timeout):
        while not check():
            await trio.sleep(POLL_INTERVAL * 4)
        return
    pytest.fail(f"not {what} within {timeout} s")


def ssh_clients_in(term: Terminal) -> list[int]:
    """The ssh processes running a remote attach in the person's terminal.
    Each command line read once: a process that ends between two reads has
    none the second time."""
    lines = ((p, cmdline(p)) for p in session_pids(term.pid))
    return [p for p, line in lines if line[:1] == ["ssh"] and " attach " in f" {line[-1]} "]


async def attached_over_ssh(
    ms_dirs: MsDirs,
    sshd: Remote,
    open_terminal: Callable[..., Terminal],
    command: Sequence[str] = ("sh",),
) -> Terminal:
    """Host db1 added, its session web (``command``: a shell) made, and a
    person's terminal attached to it through ssh."""
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web", "--", *command)
    assert made.returncode == 0, made.stderr
    term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await term.wait_prompt()
    term.line("multiserver attach db1:web")
    await wait_until(lambda: ssh_clients_in(term), "connected", 15)
    return term


async def test_a_dropped_connection_reconnects_and_replays_what_was_missed(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    term = await attached_over_ssh(ms_dirs, sshd, open_terminal)
    # Output that keeps coming while the link is down: numbered lines.
    term.line("i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo tick-$i; sleep 0.1; done")
    await term.wait_screen("tick-3")
    for pid in ssh_clients_in(term):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # the link drops (as a laptop lid closing)
    await term.wait_screen("[reconnecting to db1... in 0.5 s; ^\\ to stop]")
    await term.wait_bytes(b"tick-40")
    # Every line is there: those written while nobody was attached replayed.
    shown = bytes(term.raw).decode(errors="replace")
    assert all(f"tick-{i}\r\n" in shown for i in range(1, 41)), shown[-2000:]
    term.type(b"\x1c")
    await term.wait_screen("detached from web")


# Ctrl-\\ as the terminal sends it: as is; after a program there turned on
# the kitty keyboard protocol; or xterm's modifyOtherKeys.
@pytest.mark.parametrize(
    "sent", [b"\x1c", b"\x1b[92;5u", b"\x1b[27;5;92~"], ids=["plain", "kitty", "modify-other-keys"]
)
async def test_the_detach_key_stops_the_reconnecting(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal], sent: bytes
) -> None:
    term = await attached_over_ssh(ms_dirs, sshd, open_terminal)
    # The host goes away for good: sshd stops taking connections.
    config = sshd.ssh_config.read_text().replace(f"Port {sshd.port}", "Port 1")
    sshd.ssh_config.write_text(config)
    for pid in ssh_masters_under(ms_dirs.root) + ssh_clients_in(term):
        with contextlib.suppress(ProcessLookupError):  # gone with the master
            os.kill(pid, signal.SIGKILL)
    await term.wait_screen("[reconnecting to db1...")
    term.type(sent)
    await term.wait_screen("[stopped reconnecting to db1; the session runs on there]")
    await term.wait_prompt(count=2)


def test_new_a_through_a_host_makes_it_once(ms_dirs: MsDirs, sshd: Remote) -> None:
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    for _ in range(2):
        made = run(ms_dirs, sshd, "new", "--host", "db1", "-A", "-d", "-n", "web", "--", "sh")
        assert (made.returncode, made.stdout) == (0, "web\n"), made.stderr
    listed = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    assert [s["name"] for s in listed if s.get("host") == "db1"] == ["web"]


@attrs.define
class CuttableLink:
    """A TCP proxy on loopback between ssh and sshd: ``cut()`` drops every
    connection through it at once (a network gone: the shared connection
    dies too, not only one ssh), and it takes new ones after."""

    target: int
    listener: socket.socket = attrs.Factory(socket.socket)
    live: list[socket.socket] = attrs.Factory(list)
    lock: threading.Lock = attrs.Factory(threading.Lock)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def start(self) -> None:
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return  # closed
            far = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.live += [near, far]
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with self.lock:
            cut, self.live = self.live, []
        for s in cut:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


async def test_a_network_cut_reconnects_through_a_new_connection_and_replays(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    """The link itself goes (a proxy between ssh and sshd drops every
    connection, the shared one too): attach makes a new connection and
    replays what the session wrote meanwhile."""
    link = CuttableLink(sshd.port)
    link.start()
    try:
        remote1 = sshd.ssh_config.read_text().split("Host ", 2)[1]
        proxied = remote1.replace("remote1", "lid", 1).replace(
            f"Port {sshd.port}", f"Port {link.port}\n  HostKeyAlias [127.0.0.1]:{sshd.port}"
        )
        sshd.ssh_config.write_text(sshd.ssh_config.read_text() + "Host " + proxied)
        for words in (
            ["host", "add", "lid", "--ssh", "lid", "--command", sshd.command],
            ["new", "--host", "lid", "-d", "-n", "web", "--", "sh"],
        ):
            done = run(ms_dirs, sshd, *words)
            assert done.returncode == 0, done.stderr
        term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
        await term.wait_prompt()
        term.line("multiserver attach lid:web")
        await wait_until(lambda: ssh_clients_in(term), "connected", 15)
        term.line("i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo tick-$i; sleep 0.1; done")
        await term.wait_screen("tick-3")
        masters = ssh_masters_under(ms_dirs.root)
        link.cut()
        await term.wait_screen("[reconnecting to lid... in 0.5 s; ^\\ to stop]")
        await term.wait_bytes(b"tick-40")
        shown = bytes(term.raw).decode(errors="replace")
        assert all(f"tick-{i}\r\n" in shown for i in range(1, 41)), shown[-2000:]
        # The shared connection died with the link; a new one carries it.
        assert set(ssh_masters_under(ms_dirs.root)).isdisjoint(masters)
        term.type(b"\x1c")
        await term.wait_screen("detached from web")
    finally:
        link.close()


async def test_peek_of_a_host_on_a_terminal_writes_no_query_and_to_a_pipe_every_byte(
    ms_dirs: MsDirs, sshd: Remote, open_terminal: Callable[..., Terminal]
) -> None:
    """``peek HOST:NAME`` writes to a terminal what a local peek would: the
    host's peek (to a pipe there, byte-exact) is cleaned here."""
    asks = r'printf "\033[6n\033[c\033]52;c;aGk=\007\033]11;?\007"; echo asked; exec sleep 600'
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "q", "--", "sh", "-c", asks)
    assert made.returncode == 0, made.stderr
    piped = run(ms_dirs, sshd, "peek", "db1:q")
    assert "\x1b[6n\x1b[c\x1b]52;c;aGk=\x07\x1b]11;?\x07asked" in piped.stdout
    term = open_terminal(env=person_ssh_env(ms_dirs, sshd))
    await term.wait_prompt()
    seen = len(term.raw)
    term.line("multiserver peek db1:q")
    await term.wait_prompt(count=2)
    shown = bytes(term.raw[seen:])
    assert b"asked" in shown
    for query in (b"\x1b[6n", b"\x1b[c", b"\x1b]52", b"\x1b]11;?"):
        assert query not in shown, shown


def test_upgrade_of_a_host_upgrades_its_daemon_in_place(ms_dirs: MsDirs, sshd: Remote) -> None:
    """``upgrade --host`` runs the host's own ``multiserver upgrade``: its
    daemon keeps its pid and its session; the line says which host."""
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web", "--", "sh")
    assert made.returncode == 0, made.stderr
    before = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    done = run(ms_dirs, sshd, "upgrade", "--host", "db1")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("db1: daemon 1 (pid ") and ", paused " in line, line
    after = json.loads(run(ms_dirs, sshd, "ls", "--json").stdout)
    assert [(s["name"], s["pid"]) for s in after if s.get("host") == "db1"] == [
        (s["name"], s["pid"]) for s in before if s.get("host") == "db1"
    ]
    # Not this machine's daemon: none runs here, and none was started.
    here = run(ms_dirs, sshd, "upgrade")
    assert (here.returncode, here.stderr) == (0, "no daemon running: nothing to upgrade\n")
