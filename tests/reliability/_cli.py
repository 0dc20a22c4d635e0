"""The ``multiserver`` command as the reliability tests run it: with the
test's environment (its private dirs, from ``ms_dirs``), bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trio

MULTISERVER = str(Path(sys.executable).with_name("multiserver"))
COMMAND_TIMEOUT = 30.0  # a bound on one command's run, not a delay


async def ms_run(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run the `multiserver` command with the test's environment."""
    with trio.fail_after(COMMAND_TIMEOUT):
        return await trio.run_process(
            [MULTISERVER, *args],
            env=dict(os.environ),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def ms_ok(*args: str) -> bytes:
    """``ms_run`` that must succeed; returns its stdout."""
    result = await ms_run(*args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout
