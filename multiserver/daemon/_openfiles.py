"""The daemon's open files: what a session costs, and the rule that keeps
fds free for its clients. Pure, but for ``FileBudget``'s count.

A login's soft ``RLIMIT_NOFILE`` is 1024 on most systems (the hard one is
often far higher), and a session costs the daemon two fds for as long as
it runs (its PTY master, the pidfd its exit is waited on by) and a third
while a claim hands it to a client (the master's copy, until the frame is
sent: a restore claims every session at once). At 1024 a daemon ran out
near 500 sessions, and then could not even accept a connection. So:

- **Raised at start.** The daemon raises its soft limit to the hard one
  (``_platform.raise_nofile_limit``; macOS caps it at ``OPEN_MAX``), at
  start and again in the new code after an upgrade.
- **Not for its children.** Its children get the soft limit the daemon
  found: a program that uses ``select()`` breaks on an fd past 1024
  (systemd keeps 1024 for its services' children for the same reason).
  The daemon lowers its own soft limit around the spawn, in the same
  synchronous step (``_platform.spawn_on_pty``).
- **A launch that would leave no room is refused** (``launch_problem``):
  each session counted at ``PER_SESSION`` fds, and ``FOR_CLIENTS`` more
  kept free for connections, the accept path's spare fd and an upgrade's
  snapshot file and check run. One line, ``EMFILE``.
- **Counted only near the limit** (``FileBudget``): counting costs about a
  microsecond a fd (2 ms at 2,000, as much as a launch); far from the
  limit a launch adds its fds to the last count instead.
"""

from __future__ import annotations

from multiserver.system import _platform

# What a session holds (its master, its pidfd), and the copy of its master
# a claim makes while it hands it over.
HELD = 2
HANDED = 1
PER_SESSION = HELD + HANDED
# Kept free besides: client connections, the accept path's spare fd, an
# upgrade's snapshot file and check run.
FOR_CLIENTS = 64
# Far from the limit, a launch counts again only this often.
RECOUNT_EVERY = 64


def kept_for_clients(sessions: int) -> int:
    """The fds a daemon with ``sessions`` sessions keeps free: the copy of
    each master a claim hands over, and ``FOR_CLIENTS``."""
    return sessions * HANDED + FOR_CLIENTS


def launch_problem(in_use: int, limit: int, sessions: int) -> str | None:
    """Why one more session does not fit a daemon with ``in_use`` of
    ``limit`` fds open and ``sessions`` sessions (one line), or None."""
    kept = kept_for_clients(sessions + 1)
    if in_use + HELD + kept <= limit:
        return None
    return (
        f"cannot start a session: the daemon has {in_use} of its {limit} open files in use"
        f" and keeps {kept} free for its clients ({PER_SESSION} a session); raise its hard"
        " limit (ulimit -Hn, LimitNOFILE= for the service) for its next start"
    )


class FileBudget:
    """Whether a launch fits (``launch_problem``), counting the fds open
    only near the limit, or every ``RECOUNT_EVERY`` launches: in between,
    each launch adds its fds to the last count (fds closed since make the
    estimate high, never low)."""

    def __init__(self) -> None:
        self._counted = 0
        self._launches = RECOUNT_EVERY  # counts at the first launch

    def problem(self, sessions: int) -> str | None:
        limit = _platform.nofile_limit()
        estimate = self._counted + HELD * self._launches
        near = launch_problem(estimate + limit // 8, limit, sessions) is not None
        if near or self._launches >= RECOUNT_EVERY:
            self._counted = _platform.open_fd_count() or 0
            self._launches = 0
            estimate = self._counted
        return launch_problem(estimate, limit, sessions)

    def launched(self) -> None:
        self._launches += 1
