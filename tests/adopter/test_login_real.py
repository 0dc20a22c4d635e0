"""The login procedure against real daemons: the example in docs/
(docs/examples/login_at_launch.py, shown in docs/restore.md) run as an
app would run it at its launch, in the test's own runtime and state dirs
(``ms_dirs``). Daemons are stopped by pid (``start_daemon``, ``ms_dirs``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from multiserver import open_client
from tests.cli.conftest import ms
from tests.conftest import MsDirs, RunningDaemon
from tests.timing import restore_command_bound

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "login_at_launch.py"
EXAMPLE_TIMEOUT = 5.0  # the example's deadline


async def test_the_documented_example_restores_at_an_apps_launch(
    ms_dirs: MsDirs, start_daemon: Callable[[], Awaitable[RunningDaemon]]
) -> None:
    """Three kinds of session: one whose program runs (attached), one whose
    daemon is gone (relaunched on daemon 1), and one nobody saved (adopted
    by the sweep). The example prints each step, and afterwards every
    session runs detached, saved."""
    await start_daemon()
    await ms(ms_dirs, "new", "-d", "-n", "edit", "--", "sleep", "600")
    await ms(ms_dirs, "--daemon", "2", "new", "-d", "-n", "build", "--", "sleep", "600")
    await ms(ms_dirs, "--daemon", "2", "stop", "--force")
    async with open_client(ms_dirs.paths) as client:
        await client.launch(["sleep", "600"], name="stray", hold=False)

    with trio.fail_after(restore_command_bound(EXAMPLE_TIMEOUT)):
        done = await trio.run_process(
            [sys.executable, str(EXAMPLE)],
            env=dict(os.environ),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = done.stdout.decode().splitlines()
    assert done.returncode == 0, (out, done.stderr.decode())
    assert out[0] == "restoring 2 sessions of 2 daemons within 5 s", out
    # Each daemon's answer, in the order they come; then the sessions, in
    # the arrangement's order; then the sweep, and the end.
    arrivals = sorted(out[1:3])
    assert re.fullmatch(r"multiserver-daemon-1\.socket: answered in \d+\.\d{3} s", arrivals[0])
    assert arrivals[1] == "multiserver-daemon-2.socket: its daemon is not running"
    assert re.fullmatch(r"edit: attached \(pid \d+\)", out[3]), out
    assert (
        out[4] == "build: relaunched (its daemon is not running; session expired, new one started)"
    )
    assert out[5:] == ["adopted: stray", "every session is back"]

    listed = json.loads((await ms(ms_dirs, "ls", "--json")).stdout)
    assert sorted((s["name"], s["state"], s["held"], s["saved"]) for s in listed) == [
        ("build", "running", False, True),
        ("edit", "running", False, True),
        ("stray", "running", False, True),
    ]


def test_restore_md_shows_the_example_as_it_is() -> None:
    """The code docs/restore.md shows is the file the test above runs."""
    shown = (ROOT / "docs" / "restore.md").read_text()
    code = EXAMPLE.read_text().split('"""\n\n', 1)[1]
    assert f"```python\n{code}```" in shown
