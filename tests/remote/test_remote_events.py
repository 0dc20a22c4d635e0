"""``multiserver events HOST:NAME``: the host's own ``events --json``
through ssh (a real sshd on loopback), shown here; it ends there when it
ends here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

from tests.conftest import MsDirs, wait_until
from tests.procs import cmdlines
from tests.remote.conftest import MULTISERVER, Remote
from tests.remote.test_hosts import person_ssh_env, run


def remote_followers(sshd: Remote) -> list[int]:
    """The host's ``events`` processes (their environment names its dirs)."""
    root = os.fsencode(str(sshd.root))
    found = []
    for pid, cmdline in cmdlines():
        if b"\0events\0" not in cmdline + b"\0":
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if root in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


async def test_a_host_s_events_come_through_ssh_and_end_with_the_command(
    ms_dirs: MsDirs, sshd: Remote
) -> None:
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web", "--", "sleep", "1000")
    assert made.returncode == 0, made.stderr
    proc = subprocess.Popen(
        [MULTISERVER, "events", "--json", "--since", "1", "db1:web"],
        env=person_ssh_env(ms_dirs, sshd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        lines.extend(line.decode() for line in proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        await wait_until(lambda: lines or proc.poll() is not None, 30, "the host's first event")
        if not lines:  # it ended before any: say what it said
            assert proc.stderr is not None
            raise AssertionError(f"events ended ({proc.wait()}): {proc.stderr.read()!r}")
        killed = run(ms_dirs, sshd, "kill", "db1:web")
        assert killed.returncode == 0, killed.stderr
        await wait_until(lambda: any('"exited"' in line for line in lines), 30, "web exited")
        assert remote_followers(sshd)
        proc.send_signal(signal.SIGINT)  # Ctrl-C, to its pid
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    events = [json.loads(line) for line in lines]
    assert [(e["kind"], e["name"], e["host"]) for e in events] == [
        ("created", "web", "db1"),
        ("killed", "web", "db1"),
        ("exited", "web", "db1"),
    ]
    assert events[1]["exit_code"] == events[2]["exit_code"] == -signal.SIGHUP
    assert events[0]["schema"] == 1
    # The host's events ended with this one: none is left following there.
    await wait_until(lambda: not remote_followers(sshd), 20, "the host's events to end")
