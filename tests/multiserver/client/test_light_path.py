"""The blocking client starts light: a fresh process that starts a daemon,
launches, lists, peeks, claims, resizes, releases, signals and collects
through ``dial_blocking`` ends with none of attrs, cattrs, trio or typing
imported (each costs a command a multiple of the interpreter's start-up:
docs/benchmarks.md, "command start-up")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import MsDirs, daemon_pids_for, stop_daemon_sync

HEAVY = ("attr", "attrs", "cattrs", "trio", "typing", "typing_extensions", "platformdirs")

SCRIPT = """
import json, os, signal, sys, time
import multiserver

paths = multiserver.DaemonPaths.for_number(1)
with multiserver.dial_blocking(paths, start=True, deadline=time.monotonic() + 20) as c:
    launched = c.launch(["sh", "-c", "echo light-$((20+22)); exec sleep 100"], name="lt")
    os.close(launched.master)
    c.release([launched.child.id])
    [child] = [x for x in c.list() if x.name == "lt"]
    deadline = time.monotonic() + 10
    while b"light-42" not in c.peek(child.id).output and time.monotonic() < deadline:
        time.sleep(0.01)
    peeked = c.peek(child.id).output
    [claimed] = c.claim([child.id])
    c.resize(child.id, 30, 100)
    os.close(claimed.master)
    c.release([child.id])
    c.signal(child.id, signal.SIGTERM)
    while c.wait_notice(time.monotonic() + 10) is None:
        pass
    collected = c.collect(child.id)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(json.dumps({{"peeked": peeked.decode(), "state": collected.state, "heavy": heavy,
                  "pid": c.daemon_pid}}))
"""


def test_the_blocking_client_imports_no_attrs_cattrs_trio_or_typing(ms_dirs: MsDirs) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env=dict(os.environ),
    )
    try:
        assert out.returncode == 0, out.stderr
        seen = json.loads(out.stdout)
        assert "light-42" in seen["peeked"]
        assert seen["state"] == "exited"
        assert seen["heavy"] == []
    finally:
        for pid in daemon_pids_for(ms_dirs.paths.socket):
            stop_daemon_sync(pid)
