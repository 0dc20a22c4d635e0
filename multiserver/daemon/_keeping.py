"""The daemon's side of ``_durable``: what each child nobody holds writes
reaches its file within ``FLUSH_EVERY`` seconds, with where its
foreground process is and what it runs; nothing is written, and nothing
wakes, while no output comes.

``ChildTable`` tells the keeper what happens: output read (``wrote``), a
child handed to a client (``hold``: what waits is written first, the
client writes from there on) or given back (``unhold``), ended
(``exited``), forgotten by a client (``forget``: its files go). At
shutdown and before an upgrade's exec, ``flush_all``. A failure to write
is logged once a child until a write succeeds again; what waits is kept
(bounded) for the next try.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import trio

from multiserver._durable import DurableOutput, bounded_argv
from multiserver.system import _platform

log = logging.getLogger("multiserver.daemon")

# Seconds between output read and written: what a crash of the machine may
# lose; and the longest an idle daemon's flush task may sleep after output.
FLUSH_EVERY = 2.0


class KeptChild(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def master(self) -> int | None: ...

    @property
    def running(self) -> bool: ...


class OutputKeeper:
    """Every unheld child's output file in ``directory`` (None: none kept),
    the newest ``keep`` bytes each (the daemon's buffer limit)."""

    def __init__(self, directory: Path | None, keep: int) -> None:
        self._directory = directory
        self._keep = keep
        self._files: dict[int, DurableOutput] = {}
        self._dirty: dict[int, KeptChild] = {}
        self._wake = trio.Event()
        self._failing: set[int] = set()

    def _file(self, child: KeptChild) -> DurableOutput | None:
        if self._directory is None:
            return None
        found = self._files.get(child.id)
        if found is None:
            found = self._files[child.id] = DurableOutput(
                self._directory / f"{child.id}.out", self._keep
            )
        return found

    def wrote(self, child: KeptChild, data: bytes) -> None:
        """Output read from an unheld child: written within FLUSH_EVERY."""
        kept = self._file(child)
        if kept is None:
            return
        kept.append(data)
        self._dirty[child.id] = child
        self._wake.set()

    def exited(self, child: KeptChild, exit_code: int, exited_at: float) -> None:
        kept = self._file(child)
        if kept is None:
            return
        self._write(child, kept, exit_code=exit_code, exited_at=exited_at)

    def hold(self, child: KeptChild) -> None:
        """A client holds ``child`` from now: what waits is written first.
        Nothing else: a claim of a thousand idle children (a restore) costs
        no I/O here."""
        self._dirty.pop(child.id, None)
        kept = self._files.get(child.id)
        if kept is not None and kept.pending:
            self._write(child, kept)
            self._dirty.pop(child.id, None)  # a failed write is not tried while held

    def unhold(self, child: KeptChild) -> None:
        """Nobody holds ``child`` from now: its file is as its holder left it."""
        kept = self._files.get(child.id)
        if kept is not None:
            kept.resync()

    def forget(self, child: KeptChild) -> None:
        """A client forgot ``child`` (collected it): its files go."""
        self._dirty.pop(child.id, None)
        self._failing.discard(child.id)
        kept = self._files.pop(child.id, None)
        if kept is None and self._directory is not None:
            kept = DurableOutput(self._directory / f"{child.id}.out", self._keep)
        if kept is not None:
            kept.remove()

    def flush_all(self) -> None:
        """Everything that waits, now (shutdown, an upgrade's exec)."""
        dirty, self._dirty = self._dirty, {}
        for child in dirty.values():
            kept = self._files.get(child.id)
            if kept is not None:
                self._write(child, kept)

    async def run(self) -> None:
        """Write what waits, FLUSH_EVERY after output came; sleep while none does.

        Cancellation: what waits stays (``flush_all`` writes it).
        """
        while True:
            await self._wake.wait()
            await trio.sleep(FLUSH_EVERY)
            self._wake = trio.Event()
            self.flush_all()

    def _write(self, child: KeptChild, kept: DurableOutput, **state: object) -> None:
        try:
            kept.flush()
            if child.running and child.master is not None:
                _pid, cwd, argv = _platform.foreground(child.master)
                state = {"cwd": cwd, "argv": bounded_argv(argv), **state}
            kept.note(**state)
        except OSError as exc:
            if child.id not in self._failing:
                self._failing.add(child.id)
                log.warning("cannot keep child %d's output in %s: %s", child.id, kept.path, exc)
            self._dirty[child.id] = child  # tried again FLUSH_EVERY from now
            self._wake.set()
            return
        if child.id in self._failing:
            self._failing.discard(child.id)
            log.info("child %d's output is kept again", child.id)
