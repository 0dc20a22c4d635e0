"""The ``multiserver`` command, run in this process with its store writes
counted, for the ``scrollback`` figure::

    python -m benchmarks._counted LOG [--no-screen-saving] -- ARGS...

Every write transaction of the store (``ArrangementStore._write``: one
``BEGIN IMMEDIATE`` ... ``COMMIT``, whether or not it changed a page)
appends one line to LOG: the CLOCK_MONOTONIC time it ended, which every
process on the machine shares, so the benchmark counts the lines that fall
in its window; and the CPU seconds the writing thread spent in it
(``time.thread_time``, nanosecond resolution). ``--no-screen-saving``: the attach client saves nothing of
what its terminal shows (the baseline: the client as it was before
scrollback was kept). Nothing else changes: no environment variable, no
hook in the command itself.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from multiserver_cli import _scrollback, main
from restore import ArrangementStore


def _count_writes(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    write = ArrangementStore._write

    def counted(self: ArrangementStore, op: Callable[..., Any]) -> Any:
        cpu = time.thread_time()
        try:
            return write(self, op)
        finally:
            cpu = time.thread_time() - cpu
            os.write(fd, f"{time.monotonic():.6f} {cpu:.6f}\n".encode())

    ArrangementStore._write = counted  # type: ignore[method-assign]


def run(argv: list[str]) -> None:
    if len(argv) < 2 or "--" not in argv:
        sys.exit("usage: python -m benchmarks._counted LOG [--no-screen-saving] -- ARGS...")
    split = argv.index("--")
    log, options, args = argv[0], argv[1:split], argv[split + 1 :]
    _count_writes(log)
    if "--no-screen-saving" in options:
        _scrollback.screen_saver = lambda *_args: None
    main.main(args)


if __name__ == "__main__":
    run(sys.argv[1:])
