"""The blocking client against a real daemon: the same answers as the trio
client, deadlines that hold, notices kept in order, and no trio."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest
import trio

from multiserver import ChildExited, ChildTaken, RequestFailed
from multiserver.client._spawn import TimedOut
from multiserver.client._sync import dial_blocking
from tests.conftest import MsDirs, RunningDaemon


def test_the_blocking_client_imports_no_trio() -> None:
    code = "import sys, multiserver.client._sync; print('trio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_requests_answer_as_the_trio_client_does(daemon: RunningDaemon) -> None:
    def work() -> None:
        with dial_blocking(daemon.paths, deadline=time.monotonic() + 10) as client:
            assert client.instance_id == daemon.instance_id
            launched = client.launch(["sh", "-c", "echo hi; exec cat"], name="s", hold=False)
            assert launched.master is None and launched.child.name == "s"
            kid = launched.child.id
            deadline = time.monotonic() + 5
            while b"hi" not in client.peek(kid).output:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            [result] = client.claim([kid], keep_output=True)
            assert result.master is not None and b"hi" in result.output
            os.close(result.master)
            with pytest.raises(RequestFailed) as busy:
                client.collect(kid)
            assert busy.value.errno == errno.EBUSY
            assert client.release([kid]) == ([kid], [])
            [listed] = client.list()
            assert listed.id == kid and not listed.held
            client.resize(kid, 30, 100)
            client.signal(kid, signal.SIGKILL)
            notice = client.wait_notice(time.monotonic() + 5)
            assert isinstance(notice, ChildExited) and notice.id == kid
            assert client.collect(kid).exit_code == -signal.SIGKILL

    await trio.to_thread.run_sync(work)


async def test_a_steal_reaches_the_other_client_as_a_notice(daemon: RunningDaemon) -> None:
    def work() -> None:
        end = time.monotonic() + 10
        with (
            dial_blocking(daemon.paths, deadline=end) as a,
            dial_blocking(daemon.paths, deadline=end) as b,
        ):
            kid = a.launch(["cat"], hold=False).child.id
            [mine] = a.claim([kid])
            [theirs] = b.claim([kid], steal=True)
            for r in (mine, theirs):
                assert r.master is not None
                os.close(r.master)
            assert a.wait_notice(time.monotonic() + 5) == ChildTaken(id=kid)
            a.send_resize(kid, 20, 20)  # answered with an error (not held): dropped
            a.read_notices()
            assert [c.id for c in a.list()] == [kid]

    await trio.to_thread.run_sync(work)


async def test_a_start_and_a_deadline_that_passes(ms_dirs: MsDirs) -> None:
    def work() -> int:
        with dial_blocking(ms_dirs.paths, start=True, deadline=time.monotonic() + 15) as c:
            pid = c.daemon_pid
            c.deadline = time.monotonic() - 1
            with pytest.raises(TimedOut):
                c.list()
            return pid

    pid = await trio.to_thread.run_sync(work)
    os.kill(pid, signal.SIGTERM)  # ms_dirs' teardown waits for it by pid
