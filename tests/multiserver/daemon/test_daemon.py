"""The daemon end to end: real detached daemons, real PTYs, real processes.

Every test is bounded (``trio.fail_after`` or ``wait_until``); nothing sleeps
to wait for readiness. A few *negative* checks ("the daemon is still there
after its idle period") must let time pass; they say so where they do.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest
import trio

from multiserver import ChildTaken, Client, RequestFailed, open_client
from tests.conftest import (
    MsDirs,
    RunningDaemon,
    close_fd,
    connected_clients,
    daemon_pids_for,
    fd_count,
    fd_links,
    is_alive,
    is_dead,
    proc_status,
    read_to_eof,
    read_until,
    wait_exit_notice,
    wait_exit_notices,
    wait_listed_exited,
    wait_until,
    zombies,
)

StartDaemon = Callable[[], Awaitable[RunningDaemon]]
# Bits of /proc/PID/status signal masks for every signal a program can use.
USABLE_SIGNALS = sum(1 << (s - 1) for s in signal.valid_signals())


def seq_output(n: int) -> bytes:
    """What ``seq 1 n`` looks like from the master: the PTY turns \\n into \\r\\n."""
    return b"".join(b"%d\r\n" % i for i in range(1, n + 1))


async def wait_buffered(client: Client, child_id: int, size: int, timeout: float = 10.0) -> None:
    """Poll ``list`` until the daemon has buffered ``size`` bytes of the child."""
    with trio.fail_after(timeout):
        while True:
            [info] = [c for c in await client.list() if c.id == child_id]
            if info.buffered_bytes + info.dropped_bytes >= size:
                return
            await trio.sleep(0.005)


async def receive_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some()
        if not chunk:
            raise AssertionError(f"stream ended after {data!r}")
        data += chunk
    return data


# --- the child's terminal and environment --------------------------------------------


async def test_child_controlling_terminal_is_its_pty(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as client:
        launched = await client.launch(
            ["sh", "-c", "exec 3</dev/tty && echo tty-ok; exec sleep 30"]
        )
        try:
            assert launched.master is not None
            await read_until(launched.master, b"tty-ok")
            pid, tty = launched.child.pid, launched.child.tty
            assert tty.startswith("/dev/pts/")
            ps = await trio.run_process(["ps", "-o", "tty=", "-p", str(pid)], capture_stdout=True)
            assert ps.stdout.decode().strip() == tty.removeprefix("/dev/")
            # A session leader whose process group is the terminal's foreground.
            assert os.getsid(pid) == pid
            assert os.tcgetpgrp(launched.master) == pid
        finally:
            close_fd(launched.master)


async def test_ctrl_c_reaches_the_foreground_job(daemon: RunningDaemon) -> None:
    script = 'trap "echo got-int; exit 7" INT; echo ready; while :; do sleep 0.05; done'
    async with open_client(daemon.paths) as client:
        launched = await client.launch(["sh", "-c", script])
        assert launched.master is not None
        try:
            await read_until(launched.master, b"ready")
            os.write(launched.master, b"\x03")
            await read_until(launched.master, b"got-int")
            assert await wait_exit_notice(client, launched.child.id) == 7
        finally:
            close_fd(launched.master)


async def test_child_env_fds_and_signal_dispositions(daemon: RunningDaemon) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "KEEP_ME": "1",
        "MULTISERVER_RUNTIME_DIR": "/not/for/children",
        "MULTISERVER_ANYTHING": "x",
        # The client's terminal multiplexer: never the session's.
        "TMUX": "/tmp/tmux-1000/default,42,0",
        "TMUX_PANE": "%1",
        "STY": "42.pts-1.host",
        "WINDOW": "0",
    }
    async with open_client(daemon.paths) as client:
        bare = await client.launch(["sleep", "30"], env=env)
        own_term = await client.launch(["sleep", "30"], env={**env, "TERM": "vt100"}, hold=False)
        # env=None sends this process's environment, MULTISERVER_* included.
        inherited = await client.launch(["sleep", "30"], hold=False)
        try:
            for launched in (bare, own_term, inherited):
                pid = launched.child.pid
                # Until it has exec'd, /proc shows the spawning daemon's own
                # environment: wait for the program itself.
                await wait_until(lambda p=pid: _comm(p) == "sleep", message=f"{pid} exec")
                child_env = _environ(pid)
                assert child_env.get("TERM"), child_env
                assert not [k for k in child_env if k.startswith("MULTISERVER_")]
                assert not child_env.keys() & {"TMUX", "TMUX_PANE", "STY", "WINDOW"}
                # Only stdin, stdout, stderr, all on its own tty.
                assert fd_links(pid) == dict.fromkeys((0, 1, 2), launched.child.tty)
                # Default dispositions: no usable signal ignored (Python
                # ignores SIGPIPE and SIGXFSZ), none blocked. glibc's
                # posix_spawn leaves its own internal signals 32 and 33 ignored;
                # no program can use those, so they are masked out.
                status = proc_status(pid)
                assert int(status["SigIgn"], 16) & USABLE_SIGNALS == 0
                assert int(status["SigBlk"], 16) == 0
            assert _environ(bare.child.pid)["KEEP_ME"] == "1"
            assert _environ(own_term.child.pid)["TERM"] == "vt100"
        finally:
            close_fd(bare.master)


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [p.split(b"=", 1) for p in f.read().split(b"\0") if p]
    return {k.decode(): v.decode() for k, v in pairs}


# --- clients come and go; children stay -----------------------------------------------

HOLDER = """
import json, os, trio
from multiserver import DaemonPaths, open_client

async def main():
    async with open_client(DaemonPaths.for_number(1)) as client:
        ids = [(await client.launch(["cat"])).child.id for _ in range(2)]
        print(json.dumps(ids), flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_sigkilled_client_leaves_children_running_and_claimable(
    daemon: RunningDaemon,
) -> None:
    holder = await trio.lowlevel.open_process(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        with trio.fail_after(15):
            ids = json.loads(await receive_line(holder.stdout))
        async with open_client(daemon.paths) as client:
            listed = {c.id: c for c in await client.list()}
            assert all(listed[i].held for i in ids)
            busy = await client.claim(ids)
            assert [r.error.errno for r in busy if r.error] == [errno.EBUSY] * len(ids)

            os.kill(holder.pid, signal.SIGKILL)
            with trio.fail_after(5):
                await holder.wait()

            async def unheld() -> bool:
                return not any(c.held for c in await client.list() if c.id in ids)

            with trio.fail_after(5):
                while not await unheld():
                    await trio.sleep(0.005)
            for child_id in ids:
                assert is_alive(listed[child_id].pid)

            claimed = await client.claim(ids)
            try:
                for result in claimed:
                    assert result.ok, result.error
                    assert result.master is not None
                    line = b"ping-%d\n" % result.id
                    os.write(result.master, line)
                    # The terminal echoes the line, then cat writes it back.
                    echo = line.replace(b"\n", b"\r\n")
                    await read_until(result.master, echo + echo)
            finally:
                for result in claimed:
                    close_fd(result.master)
    finally:
        if holder.returncode is None:
            holder.kill()
            with trio.CancelScope(shield=True):
                await holder.wait()


async def test_claim_with_steal_takes_over_and_tells_the_holder(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as a, open_client(daemon.paths) as b:
        launched = await a.launch(["cat"])
        child_id = launched.child.id
        [refused] = await b.claim([child_id])
        assert refused.error is not None
        assert refused.error.errno == errno.EBUSY
        assert "held by another client" in refused.error.message
        [stolen] = await b.claim([child_id], steal=True)
        try:
            assert stolen.ok and stolen.master is not None
            with trio.fail_after(5):
                notice = await a.notices.receive()
            assert notice == ChildTaken(id=child_id)
            [info] = await b.list()
            assert info.held
            os.write(stolen.master, b"from-b\n")
            await read_until(stolen.master, b"from-b\r\nfrom-b\r\n")
            # A lost it: it can no longer release it.
            released, failures = await a.release([child_id])
            assert released == []
            assert [f.errno for f in failures] == [errno.EPERM]
        finally:
            close_fd(launched.master)
            close_fd(stolen.master)


# --- output while unheld ------------------------------------------------------------------


async def test_unheld_output_is_replayed_byte_exact(
    ms_dirs: MsDirs, start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", str(4 * 1024 * 1024))
    daemon = await start_daemon()
    expected = seq_output(200_000)
    async with open_client(daemon.paths) as client:
        launched = await client.launch(["sh", "-c", "seq 1 200000; exec sleep 30"], hold=False)
        assert launched.master is None
        child_id = launched.child.id
        await wait_buffered(client, child_id, len(expected))
        peeked = await client.peek(child_id)
        assert (peeked.output, peeked.dropped) == (expected, 0)
        [claimed] = await client.claim([child_id])
        try:
            assert claimed.ok and claimed.master is not None
            assert claimed.dropped == 0
            assert claimed.output == expected
            # Not a byte more waits in the kernel: none lost, none duplicated.
            with pytest.raises(BlockingIOError):
                os.read(claimed.master, 1)
        finally:
            close_fd(claimed.master)


async def test_dropped_count_is_exact_past_the_bound(
    ms_dirs: MsDirs, start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 64 * 1024
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", str(limit))
    daemon = await start_daemon()
    expected = seq_output(200_000)
    async with open_client(daemon.paths) as client:
        launched = await client.launch(["seq", "1", "200000"], hold=False)
        child_id = launched.child.id
        assert await wait_exit_notice(client, child_id) == 0
        peeked = await client.peek(child_id)
        [claimed] = await client.claim([child_id])
        assert claimed.ok and claimed.master is None  # exited: no fd
        for output, dropped in ((peeked.output, peeked.dropped), (claimed.output, claimed.dropped)):
            assert 0 < len(output) <= limit
            assert dropped + len(output) == len(expected)
            assert expected.endswith(output)
            # The replay starts on a line, never mid-sequence.
            assert expected[dropped - 1 : dropped] == b"\n"
        info = await client.collect(child_id)
        assert info.exit_code == 0


async def test_handover_under_load_is_byte_exact(
    ms_dirs: MsDirs, start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child writes a numbered stream while the test claims and releases it
    200 times, reading its fd while it holds it: every byte arrives once."""
    monkeypatch.setenv("MULTISERVER_BUFFER_LIMIT", str(8 * 1024 * 1024))
    daemon = await start_daemon()
    lines = 100_000
    producer = (
        "import os, time\n"
        f"for start in range(0, {lines}, 200):\n"
        f"    os.write(1, b''.join(b'%d\\n' % i for i in range(start, min({lines}, start + 200))))\n"
        "    time.sleep(0.002)\n"
    )
    expected = b"".join(b"%d\r\n" % i for i in range(lines))
    chunks: list[bytes] = []
    replays = held_reads = 0  # cycles whose claim replayed bytes / whose fd had bytes
    async with open_client(daemon.paths) as client:
        launched = await client.launch([sys.executable, "-c", producer], hold=False)
        child_id = launched.child.id
        await wait_buffered(client, child_id, 1)  # the producer runs
        for _ in range(200):
            [claimed] = await client.claim([child_id])
            assert claimed.ok, claimed.error
            assert claimed.dropped == 0
            got = [claimed.output]
            if claimed.master is not None:
                fd = claimed.master
                try:
                    while True:
                        try:
                            data = os.read(fd, 65536)
                        except BlockingIOError:
                            break
                        except OSError as exc:  # EIO: the producer is done
                            assert exc.errno == errno.EIO
                            break
                        if not data:
                            break
                        got.append(data)
                    # Stop reading, give it back, then close our copy.
                    released, failures = await client.release([child_id])
                    assert (released, failures) == ([child_id], [])
                finally:
                    close_fd(fd)
            else:
                await client.release([child_id])
            chunks.extend(got)
            replays += bool(got[0])
            held_reads += any(got[1:])
        assert await wait_listed_exited(client, child_id, timeout=15) == 0
        [last] = await client.claim([child_id])
        assert last.ok and last.dropped == 0
        chunks.append(last.output)
        if last.master is not None:
            chunks.append(await read_to_eof(last.master))
            close_fd(last.master)
        await client.collect(child_id)
    stream = b"".join(chunks)
    assert len(stream) == len(expected)
    assert stream == expected
    # The handovers overlapped the output both ways. Measured on 2 busy
    # cores, 10 runs (2026-12-05): replays 12-40, held reads 13-51 of 200;
    # before the daemon kept output on disk, replays 18-45. The bound only
    # says both paths ran: it was 10, which a busy run met with 9.
    assert replays >= 3 and held_reads >= 1, (replays, held_reads)


# --- exit statuses -----------------------------------------------------------------------------


async def test_exit_status_kept_until_collected_with_no_client_connected(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    async with open_client(daemon.paths) as client:
        launched = await client.launch(
            ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done; exit 3"], hold=False
        )
    child_id, pid = launched.child.id, launched.child.pid
    # No client is connected when the child exits.
    await wait_until(lambda: daemon_has_no_clients(daemon), message="client disconnected")
    go.touch()
    await wait_until(lambda: not os.path.exists(f"/proc/{pid}"), message="child reaped")
    async with open_client(daemon.paths) as client:
        [welcomed] = client.welcome.children
        assert (welcomed.id, welcomed.state, welcomed.exit_code) == (child_id, "exited", 3)
        [listed] = await client.list()
        assert (listed.state, listed.exit_code, listed.held) == ("exited", 3, False)
        # Still there for a second look, until collected.
        assert [c.exit_code for c in await client.list()] == [3]
        collected = await client.collect(child_id)
        assert collected.exit_code == 3
        assert await client.list() == []
        with pytest.raises(RequestFailed) as exc_info:
            await client.collect(child_id)
        assert exc_info.value.errno == errno.ENOENT


def daemon_has_no_clients(daemon: RunningDaemon) -> bool:
    return connected_clients(daemon.pid, daemon.paths.socket) == 0


async def test_signal_killed_child_has_negative_exit_code(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as client:
        held = await client.launch(["sleep", "30"])
        detached = await client.launch(["sleep", "30"], hold=False)
        close_fd(held.master)
        await client.signal(held.child.id, signal.SIGTERM)
        os.kill(detached.child.pid, signal.SIGKILL)  # from outside the daemon
        codes = await wait_exit_notices(client, [held.child.id, detached.child.id])
        assert codes == {held.child.id: -signal.SIGTERM, detached.child.id: -signal.SIGKILL}
        assert (await client.collect(held.child.id)).exit_code == -signal.SIGTERM
        assert (await client.collect(detached.child.id)).exit_code == -signal.SIGKILL
        with pytest.raises(RequestFailed) as exc_info:
            await client.signal(held.child.id, signal.SIGTERM)
        assert exc_info.value.errno == errno.ENOENT


async def test_collect_refused_while_running(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as client:
        launched = await client.launch(["sleep", "30"], hold=False)
        with pytest.raises(RequestFailed) as exc_info:
            await client.collect(launched.child.id)
        assert exc_info.value.errno == errno.EBUSY
        [info] = await client.list()
        assert info.state == "running"


# --- launch errors -----------------------------------------------------------------------------


async def test_launch_errors_leave_the_connection_healthy(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\n")
    not_executable.chmod(0o644)
    cases = [
        (
            ["foo-multiserver-missing"],
            {},
            errno.ENOENT,
            "command not found: foo-multiserver-missing",
        ),
        (["./nope"], {"cwd": str(tmp_path)}, errno.ENOENT, "command not found: ./nope"),
        (["true"], {"cwd": "/no/such/dir"}, errno.ENOENT, "no such directory: /no/such/dir"),
        (["true"], {"cwd": "relative/dir"}, errno.EINVAL, "cwd must be absolute: relative/dir"),
        ([str(not_executable)], {}, errno.EACCES, f"permission denied: {not_executable}"),
        ([], {}, errno.EINVAL, "empty command"),
        (["true"], {"rows": 0}, errno.EINVAL, "bad terminal size 0x80"),
        (["echo", "a\0b"], {}, errno.EINVAL, "a NUL byte in the command, cwd or environment"),
        (
            ["true"],
            {"env": {"X": "1\0"}},
            errno.EINVAL,
            "a NUL byte in the command, cwd or environment",
        ),
        (
            ["true"],
            {"env": {"A=B": "1"}},
            errno.EINVAL,
            "an environment variable with an empty name or '=' in it",
        ),
    ]
    async with open_client(daemon.paths) as client:
        for argv, kwargs, err, message in cases:
            with pytest.raises(RequestFailed) as exc_info:
                await client.launch(argv, **kwargs)  # type: ignore[arg-type]
            assert (exc_info.value.errno, exc_info.value.message) == (err, message)
        # Nothing half-started, and the same connection still serves.
        assert await client.list() == []
        launched = await client.launch(["true"], hold=False)
        assert await wait_exit_notice(client, launched.child.id) == 0


# --- linger ------------------------------------------------------------------------------------


async def test_linger_ends_unheld_children_only(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as client:
        released = await client.launch(["sleep", "30"], linger=0.5)
        held = await client.launch(["sleep", "30"], linger=0.5)
        detached = await client.launch(["sleep", "30"], linger=0.5, hold=False)
        try:
            t0 = trio.current_time()
            await client.release([released.child.id])
            close_fd(released.master)
            codes = await wait_exit_notices(client, [released.child.id, detached.child.id])
            assert codes == {
                released.child.id: -signal.SIGHUP,
                detached.child.id: -signal.SIGHUP,
            }
            assert trio.current_time() - t0 >= 0.5  # not before its linger
            # Held all along, for longer than its linger: untouched.
            [info] = [c for c in await client.list() if c.id == held.child.id]
            assert info.state == "running"
            assert is_alive(held.child.pid)
        finally:
            close_fd(held.master)


# --- the daemon's own life ------------------------------------------------------------------------


async def test_idle_exit_after_last_child_collected_and_clients_gone(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MULTISERVER_IDLE_EXIT", "0.5")
    paths = ms_dirs.paths
    with trio.fail_after(15):
        async with open_client(paths, start=True) as client:
            pid = client.daemon_pid
            launched = await client.launch(["true"], hold=False)
            assert await wait_exit_notice(client, launched.child.id) == 0
            # Negative check: an uncollected child keeps the daemon (time must pass).
            await trio.sleep(0.8)
            assert is_alive(pid)
        await trio.sleep(0.8)  # no client, but still an uncollected child
        assert is_alive(pid)
        async with open_client(paths) as client:
            assert client.daemon_pid == pid
            await client.collect(launched.child.id)
        await wait_until(lambda: not is_alive(pid), timeout=5, message="daemon idle exit")
    assert not paths.socket.exists()
    assert not paths.lock.exists()
    assert "idle for 0.5 s: exiting" in paths.log.read_text()


async def test_racing_clients_in_one_process_start_one_daemon(ms_dirs: MsDirs) -> None:
    seen: list[tuple[str, int]] = []

    async def connect() -> None:
        async with open_client(ms_dirs.paths, start=True) as client:
            seen.append((client.instance_id, client.daemon_pid))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(connect)
    assert len(seen) == 8
    assert len(set(seen)) == 1, seen
    assert daemon_pids_for(ms_dirs.paths.socket) == [seen[0][1]]


RACER = """
import json, os, sys, trio
from multiserver import DaemonPaths, open_client

print("ready", flush=True)
os.read(int(sys.argv[1]), 1)  # returns at EOF: when the test says go

async def main():
    async with open_client(DaemonPaths.for_number(1), start=True) as client:
        print(json.dumps([client.instance_id, client.daemon_pid]), flush=True)

trio.run(main)
"""


async def test_racing_processes_start_one_daemon(ms_dirs: MsDirs) -> None:
    go_read, go_write = os.pipe()
    racers: list[trio.Process] = []
    try:
        for _ in range(4):
            racers.append(
                await trio.lowlevel.open_process(
                    [sys.executable, "-c", RACER, str(go_read)],
                    stdout=subprocess.PIPE,
                    pass_fds=(go_read,),
                )
            )
        with trio.fail_after(20):
            for racer in racers:
                assert racer.stdout is not None
                assert await receive_line(racer.stdout) == b"ready\n"
            os.close(go_write)  # all four wake at once
            go_write = -1
            seen = set()
            for racer in racers:
                assert racer.stdout is not None
                seen.add(tuple(json.loads(await receive_line(racer.stdout))))
                assert await racer.wait() == 0
        assert len(seen) == 1, seen
        [(_, pid)] = seen
        assert daemon_pids_for(ms_dirs.paths.socket) == [pid]
    finally:
        os.close(go_read)
        if go_write >= 0:
            os.close(go_write)
        for racer in racers:
            if racer.returncode is None:
                racer.kill()
                with trio.CancelScope(shield=True):
                    await racer.wait()


async def test_shutdown_refused_while_children_run_then_forced(daemon: RunningDaemon) -> None:
    paths = daemon.paths
    async with open_client(paths) as client:
        held = await client.launch(["sleep", "30"])
        detached = await client.launch(["sleep", "30"], hold=False)
        done = await client.launch(["true"], hold=False)
        await wait_exit_notice(client, done.child.id)
        with pytest.raises(RequestFailed) as exc_info:
            await client.shutdown()
        assert exc_info.value.errno == errno.EBUSY
        assert "2 session(s) still running" in exc_info.value.message
        assert len(await client.list()) == 3  # refused: nothing changed
        with trio.fail_after(10):
            await client.shutdown(force=True)
        close_fd(held.master)
    for pid in (held.child.pid, detached.child.pid):
        await wait_until(partial(is_dead, pid), message=f"child {pid} ended")
    await wait_until(lambda: not is_alive(daemon.pid), timeout=10, message="daemon exit")
    assert not paths.socket.exists()
    assert not paths.lock.exists()


# --- no leaks ----------------------------------------------------------------------------------------


async def test_no_leaked_fds_or_zombies_after_1000_cycles(daemon: RunningDaemon) -> None:
    """1,000 launch/claim/release/collect cycles, in batches of 50 (half
    launched held, half detached): the daemon's fd count is back where it was,
    no zombie is left and the child table is empty."""

    async def cycle_batch(client: Client, n: int) -> None:
        ids = []
        for i in range(n):
            launched = await client.launch(["true"], hold=i % 2 == 0)
            close_fd(launched.master)
            ids.append(launched.child.id)
        for result in await client.claim(ids):
            assert result.ok, result.error
            close_fd(result.master)
        released, failures = await client.release(ids)
        assert (sorted(released), failures) == (sorted(ids), [])
        codes = await wait_exit_notices(client, ids, timeout=10)
        assert set(codes.values()) == {0}
        for child_id in ids:
            assert (await client.collect(child_id)).exit_code == 0

    own_fds_before = len(os.listdir("/proc/self/fd"))
    async with open_client(daemon.paths) as client:
        await cycle_batch(client, 10)  # warm up whatever the daemon opens lazily
        before = fd_count(daemon.pid)
        with trio.fail_after(60):
            for _ in range(20):
                await cycle_batch(client, 50)
        assert await client.list() == []
        await wait_until(
            lambda: fd_count(daemon.pid) == before,
            timeout=5,
            message=f"daemon fd count back to {before}",
        )
        assert zombies(daemon.pid) == []
    assert len(os.listdir("/proc/self/fd")) == own_fds_before


def rss_kib(pid: int) -> int:
    return int(proc_status(pid)["VmRSS"].split()[0])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="giving freed heap back is glibc's malloc_trim",
)
async def test_memory_of_collected_output_goes_back_to_the_os(daemon: RunningDaemon) -> None:
    """30 children write 3 MiB each, of which the daemon keeps the newest
    1 MiB (the bound), and exit; once they are collected the daemon's
    resident memory comes back down. (Without a trim, glibc kept the pages
    that the cut-back buffers and the reads had fragmented: 72 MiB stayed.)"""
    n, size = 30, 3 * 1024 * 1024
    writer = ["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' x"]
    async with open_client(daemon.paths) as client:
        ids = [(await client.launch(writer, hold=False)).child.id for _ in range(n)]
        for child_id in ids:
            assert await wait_listed_exited(client, child_id, timeout=30) == 0
        listed = await client.list()
        buffered = sum(c.buffered_bytes for c in listed)
        assert buffered >= n * 1024 * 1024 * 9 // 10, buffered
        peak = rss_kib(daemon.pid)
        for child_id in ids:
            await client.collect(child_id)
        assert await client.list() == []
        # At least two thirds of what was buffered leaves the daemon's RSS.
        target = peak - buffered * 2 // 3 // 1024
        await wait_until(
            lambda: rss_kib(daemon.pid) <= target,
            timeout=10,
            message=f"RSS <= {target} KiB (peak {peak} KiB, buffered {buffered >> 10} KiB)",
        )
