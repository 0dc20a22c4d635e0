"""Time in tests: the deadlines they give, and the bounds they hold them to.

Simulated daemons (``multiserver.testing``) run under trio's autojump clock,
where time is exact:

- ``HARNESS_TIMEOUT``: the deadline a harness test gives a restore. It is
  no default of anything, so a restore that ignores the deadline it is
  given, and uses a default instead, misses it.
- ``within`` / ``by_deadline``: the outer bound. A deadline that never
  fires would leave the test waiting, on a clock with nothing left to jump
  to, until pytest-timeout kills the run (a ``TrioInternalError``). Under
  the outer bound it is a failure that names the deadline, ``OUTER_SLACK``
  virtual seconds after it.
- ``connections_settle``: a simulated daemon's connections down (or up) to
  a count, within ``CLOSE_BOUND``. A connection the code leaked fails the
  test, naming the daemon, instead of waiting for pytest-timeout.
- ``still_while_threads_run``: a worker thread (the store's SQLite writes)
  takes no virtual time. Otherwise the autojump clock jumps to the next
  deadline whenever every task waits on a thread, and that deadline may be
  the outer bound.

Real processes take real time, and a busy machine adds to it. A bound on
one is what the product promises plus a slack measured here, never a bare
number:

- ``TIMER_SLACK``: a deadline inside a running process, acted on (a host's
  own timeout, the daemon's frame timeout, restore's ``seconds``). Small:
  it is what catches a deadline twice as long as promised.
- ``COMMAND_SLACK``: a whole ``multiserver`` command, start to exit, around
  what it promises. Large (Python's start-up and shutdown starved of CPU):
  it catches a command that hangs, or waits for ssh's own 60 s.
  ``restore_command_bound`` is the restore command's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

from adopter import SWEEP_BOUND
from multiserver.testing import SimDaemon

T = TypeVar("T")

# A harness test's restore deadline: none of restore's (10 s), the login
# service's (5 s) or a host's (15 s), nor any phase of those (80 %: 8, 4,
# 12 s; 25 %: 2.5, 1.25, 3.75 s), nor the sweep's bound (2 s). Its phase
# ends at 6 s, exact in binary.
HARNESS_TIMEOUT = 7.5

# How far past a deadline the outer bound waits, in virtual seconds. On the
# autojump clock a deadline that fires does so exactly; any slack above
# zero tells "late" from "never", and this much reads plainly in a failure.
OUTER_SLACK = 1.0


@contextlib.contextmanager
def within(what: str, seconds: float) -> Iterator[None]:
    """The block promises to be done within ``seconds`` of now: if it is not
    done ``OUTER_SLACK`` after that, it is cancelled and the test fails,
    naming ``what`` and its deadline."""
    with trio.move_on_after(seconds + OUTER_SLACK) as scope:
        yield
    if scope.cancelled_caught:
        pytest.fail(
            f"{what} was not done by its deadline, {seconds:g} s from its start"
            f" (cancelled {OUTER_SLACK:g} s after it, virtual time)"
        )


async def by_deadline(what: str, seconds: float, work: Awaitable[T]) -> T:
    """``await work`` ``within(what, seconds)``.

    Cancellation: ``work`` is cancelled with the caller."""
    with within(what, seconds):
        return await work
    raise AssertionError("within() fails the test when it cuts the work off")


# How long a simulated daemon may take to see a connection the code closed
# (or opened). It sees one at once, or when a delay it was given ends (the
# tests' longest is 20 s): the bound tells "in time" from "never".
CLOSE_BOUND = 60.0


async def connections_settle(sim: SimDaemon, count: int) -> None:
    """Wait until ``sim`` has exactly ``count`` connections open, failing
    the test if that takes more than ``CLOSE_BOUND``.

    Cancellation: nothing happened."""
    what = (
        f"{sim.socket_path.name} with {count} connection(s) open"
        f" ({sim.connections} when the wait began)"
    )
    await by_deadline(what, CLOSE_BOUND, sim.wait_connections(count))


def still_while_threads_run(clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop ``clock`` from jumping while any ``trio.to_thread.run_sync``
    call of the test runs. A threshold the test sets meanwhile (other than
    to infinity) is left as it set it."""
    real = trio.to_thread.run_sync
    running = 0
    threshold = clock.autojump_threshold

    async def run_sync(fn: Callable[..., T], *args: object, **kw: Any) -> T:
        nonlocal running, threshold
        if running == 0:
            threshold = clock.autojump_threshold
            clock.autojump_threshold = math.inf
        running += 1
        try:
            return await real(fn, *args, **kw)
        finally:
            running -= 1
            if running == 0 and clock.autojump_threshold == math.inf:
                clock.autojump_threshold = threshold

    monkeypatch.setattr(trio.to_thread, "run_sync", run_sync)


# --- real processes ----------------------------------------------------------------
#
# Measured on this 2-core machine with the tests under `nice` against two
# busy loops at nice 0 (`nice -n 0 sh -c 'while :; do :; done'`, twice), in
# 10 to 15 runs of each test whose bounds use them, while another
# engineer's tests (and in some runs two more busy loops) ran too. A test's
# processes then got a tenth of a core or less. The tests:
# tests/remote/test_remote_restore.py, test_late_host.py, test_remote_ls.py,
# test_hosts_hostile.py, tests/restore/test_restore_real.py,
# tests/adopter/test_sweep_real.py, tests/reliability/test_daemon_edges.py,
# tests/cli/test_layout_hostile.py.

# Past a deadline inside a running process: a host's own timeout (median
# 0.005 s, at most 0.21 s), the daemon's frame and hello timeouts (at most
# 0.06 s), restore's own deadline, as its report's "seconds" say (at most
# 0.08 s), a kitty call's bound (at most 0.01 s). Below the smallest of
# those deadlines (1 s), so that a deadline twice as long fails.
TIMER_SLACK = 0.75

# A `multiserver` command, start to exit, past what it promises: Python's
# start-up and shutdown (1.4 s of interpreter shutdown seen in one
# restore), the ssh it starts. `host add` and `ls`: median 1.5 s, at most
# 2.6 s. `restore`, past its deadline and its sweep's bound: median 3.5 s,
# at most 10.4 s (38 commands). Below 15 s, the default host timeout that
# `host add --timeout 2` must not wait for.
COMMAND_SLACK = 13.0


# The --timeout of a real restore that waits out a stopped daemon, then
# relaunches its sessions elsewhere: its phase's 80 % leave the relaunches
# 0.9 s, where two or three took up to 0.57 s on a busy machine (a 1 s
# deadline left them 0.2 s, and failed).
STOPPED_DAEMON_TIMEOUT = 4.5


def restore_command_bound(timeout: float) -> float:
    """How long ``multiserver restore --timeout TIMEOUT`` may take, start to
    exit: its deadline, then its sweep (at most ``SWEEP_BOUND``), and
    ``COMMAND_SLACK``."""
    return timeout + SWEEP_BOUND + COMMAND_SLACK
