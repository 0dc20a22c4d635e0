"""``capture HOST:NAME`` through a host (a real sshd on loopback): the
host's own ``capture --json``, read strictly here and shown as a local
capture is; its failures passed on as the host's."""

from __future__ import annotations

import json
import time

from tests.conftest import MsDirs
from tests.remote.conftest import Remote
from tests.remote.test_hosts import run

SHOWS = "printf 'A\\033[2K\\rB\\n\\033[31mred\\033[0m\\n'; seq 1 30; exec sleep 100"


def test_a_session_on_a_host_is_captured(ms_dirs: MsDirs, sshd: Remote) -> None:
    added = run(ms_dirs, sshd, "host", "add", "db1", "--ssh", sshd.alias, "--command", sshd.command)
    assert added.returncode == 0, added.stderr
    made = run(ms_dirs, sshd, "new", "--host", "db1", "-d", "-n", "web", "--", "sh", "-c", SHOWS)
    assert made.returncode == 0, made.stderr
    deadline = time.monotonic() + 15
    while "30" not in (shown := run(ms_dirs, sshd, "capture", "db1:web")).stdout.split("\n"):
        assert shown.returncode == 0 and time.monotonic() < deadline, shown
    lines = shown.stdout.split("\n")
    assert lines[:-1] == [*(str(k) for k in range(8, 31)), ""]  # 24 rows; 1 to 7 scrolled off
    there = json.loads(run(ms_dirs, sshd, "capture", "--json", "-e", "-S", "-", "db1:web").stdout)
    assert (there["schema"], there["rows"], there["history"], there["styled"]) == (1, 24, 9, True)
    assert there["lines"][:2] == ["B", "\x1b[0;31mred\x1b[0m"]
    missing = run(ms_dirs, sshd, "capture", "db1:nosuch")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == "multiserver: db1: no session named 'nosuch'\n"
