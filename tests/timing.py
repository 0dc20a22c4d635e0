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
- ``still_while_threads_run``: a worker thread (the store's SQLite writes)
  takes no virtual time. Otherwise the autojump clock jumps to the next
  deadline whenever every task waits on a thread, and that deadline may be
  the outer bound.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

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
