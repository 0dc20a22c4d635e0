"""Security items of the issue that tests/multiserver/daemon/test_security.py and
test_daemon.py do not already cover:

- children inherit no fd but their PTY, checked in /proc/PID/fd for nine
  children launched by three connected clients, held and detached, while
  the daemon holds every other child's master, pidfd and client socket (and
  has just passed fds to clients);
- children get exactly the environment their client sent (plus TERM): none
  of the daemon's own variables, whether MULTISERVER_* or any other;
- the daemon's log never holds a child's environment values: a secret-looking
  value goes through successful launches, failed launches (every check that
  has a message) and malformed Launch frames, and is not in the log.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Awaitable, Callable

import pytest
import trio

from multiserver import RequestFailed, open_client
from multiserver.protocol._codec import HEADER, MAGIC
from multiserver.protocol._messages import PROTOCOL_VERSION, Error, Launch
from tests.conftest import MsDirs, RunningDaemon, close_fd, fd_links, wait_listed_exited
from tests.reliability._raw import RawConnection
from tests.reliability._report import record

StartDaemon = Callable[[], Awaitable[RunningDaemon]]


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [p.split(b"=", 1) for p in f.read().split(b"\0") if p]
    return {k.decode(): v.decode() for k, v in pairs}


async def test_children_inherit_only_their_pty_and_none_of_the_daemons_variables(
    ms_dirs: MsDirs, start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = "RELIABILITY_DAEMON_ONLY"
    monkeypatch.setenv(marker, secrets.token_hex(8))
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", "65536")
    daemon = await start_daemon()
    daemon_env = environ(daemon.pid)
    assert marker in daemon_env and "MULTISERVER_RUNTIME_DIR" in daemon_env
    env = {"PATH": os.environ["PATH"], "ONLY_THIS": "1"}
    masters: list[int | None] = []
    async with (
        open_client(daemon.paths) as a,
        open_client(daemon.paths) as b,
        open_client(daemon.paths) as c,
    ):
        try:
            children = []
            for i, client in enumerate([a, b, c] * 3):
                launched = await client.launch(["sleep", "1000"], env=env, hold=i % 2 == 0)
                masters.append(launched.master)
                children.append(launched.child)
                if i == 4:  # fds in flight between launches: a claims b's detached child
                    [claimed] = await a.claim([children[1].id])
                    assert claimed.ok
                    masters.append(claimed.master)
            assert len({child.tty for child in children}) == len(children)
            for client in (a, b, c):  # a reply without fds: the dups sent are closed
                await client.list()
            daemon_fds = fd_links(daemon.pid)
            # The daemon holds a master per child and a socket per client...
            assert sum(link in ("/dev/ptmx", "/dev/pts/ptmx") for link in daemon_fds.values()) == 9
            for child in children:
                # ...and each child holds only its own terminal.
                assert fd_links(child.pid) == dict.fromkeys((0, 1, 2), child.tty), child
                assert environ(child.pid) == {**env, "TERM": "xterm-256color"}, child
            record(
                "child_isolation",
                children=len(children),
                clients=3,
                daemon_fds=len(daemon_fds),
                daemon_variables=len(daemon_env),
            )
        finally:
            for fd in masters:
                close_fd(fd)


def launch_frame(body: bytes) -> bytes:
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, Launch.TYPE, 0, len(body), 0) + body


async def test_the_log_never_holds_a_childs_environment_values(daemon: RunningDaemon) -> None:
    secret = "s3cr3t-" + secrets.token_hex(16)
    env = {"PATH": os.environ["PATH"], "API_TOKEN": secret}
    async with open_client(daemon.paths) as client:
        held = await client.launch(["sh", "-c", 'echo "$API_TOKEN"; exit 3'], env=env)
        close_fd(held.master)
        detached = await client.launch(["cat"], env=env, hold=False)
        failing = [
            dict(argv=["no-such-command-here"], env=env),
            dict(argv=["cat"], env=env, cwd="/no/such/dir"),
            dict(argv=["cat"], env=env, cwd="relative"),
            dict(argv=["cat"], env=env, name="bad name!"),
            dict(argv=["cat"], env=env, rows=0),
            dict(argv=["cat"], env={**env, "NUL": secret + "\0"}),
            dict(argv=["cat"], env={**env, "A=B": secret}),
            dict(argv=["cat"], env={**env, "": secret}),
            dict(argv=[], env=env),
        ]
        for kwargs in failing:
            with pytest.raises(RequestFailed):
                await client.launch(**kwargs)  # type: ignore[arg-type]
        await client.signal(detached.child.id, 15)
        for child_id in (held.child.id, detached.child.id):
            await wait_listed_exited(client, child_id)
            await client.collect(child_id)
    # Malformed Launch frames that carry the secret: protocol errors.
    bodies = [
        b'{"req":1,"argv":["cat"],"env":{"K":["%s"]},"cwd":"/"}' % secret.encode(),
        b'{"req":1,"argv":["cat"],"env":{"K":"%s"},"cwd":"/","extra":1}' % secret.encode(),
        b'{"req":1,"argv":["cat"],"env":{"K":"%s"},"cwd":1}' % secret.encode(),
        b'{"req":1,"argv":["cat"],"env":{"K":"%s"' % secret.encode() + b"\xff}",
        b'{"req":1,"argv":["cat"],"env":{"K":"%s\\ud800"},"cwd":"/"}' % secret.encode(),
    ]
    for body in bodies:
        conn = RawConnection.connect(str(daemon.paths.socket))
        try:
            conn.hello()
            conn.send_raw(launch_frame(body))
            with trio.fail_after(10):
                [error] = await trio.to_thread.run_sync(conn.until_closed)
            assert isinstance(error, Error) and error.req is None, error
            assert secret not in error.message
        except (TimeoutError, ConnectionResetError) as exc:
            pytest.fail(f"no clear error for {body!r}: {exc}")
        finally:
            conn.close()
    log = daemon.paths.log.read_text()
    assert "launched on" in log and "protocol error" in log  # the log is written
    assert secret not in log
    record(
        "log_secrets",
        launches_ok=2,
        launches_refused=len(failing),
        malformed_frames=len(bodies),
        log_lines=len(log.splitlines()),
    )
