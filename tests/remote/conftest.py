"""The real sshd of ``tests.remote.sshd`` as a fixture, and the person's
terminal (``open_terminal``) for attaching through it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cli.conftest import open_terminal  # noqa: F401 - the person's terminal, a fixture
from tests.conftest import MsDirs, daemon_pids_under, stop_daemon_sync
from tests.remote.sshd import MULTISERVER, Remote, ssh_masters_under, start_sshd, usable

__all__ = ["MULTISERVER", "Remote", "ssh_masters_under"]


@pytest.fixture
def sshd(ms_dirs: MsDirs) -> Iterator[Remote]:
    why = usable()
    if why is not None:
        pytest.skip(why)
    remote = start_sshd(ms_dirs.root / "ssh", ms_dirs.root / "remote", ms_dirs.root)
    try:
        yield remote
    finally:
        remote.stop()
        for pid in daemon_pids_under(ms_dirs.root / "remote"):
            stop_daemon_sync(pid)
