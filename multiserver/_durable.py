"""What a session showed, kept on disk as it comes, so that a reboot does
not take it: one file per child, appended to, compacted now and then.

Where: ``STATE/output/INSTANCE/CHILD.out``, the newest output of child
CHILD of the daemon instance INSTANCE, raw, as the program wrote it; and
``CHILD.json`` beside it: where the child's foreground process was
(``cwd``), what it ran (``title``), and once it ended ``exit_code`` and
``exited_at``. The daemon knows no saved arrangement: restore maps the
files to its saved sessions by their refs (daemon instance, child id).

Who writes: the daemon while nobody holds the child, the attach client
while it holds it (it alone sees the output then); never both. The daemon
writes all it has before it hands a child over, the client before it
gives one back.

What it costs the disk (``DurableOutput``): output is appended (batched by
the writer, a flush every few seconds while it flows, none while it does
not); once the file reaches twice ``keep`` bytes it is compacted to its
newest ``keep`` bytes (a new file renamed over it). A compaction writes at
most ``keep`` bytes and comes after at least ``keep`` appended ones, so
the bytes written are at most twice the output, plus a file's metadata a
flush, whatever the output's pattern (a clock, a flood, a redraw). The
state file is written only when what it says changes.

Blocking I/O, small and bounded; the daemon calls it from its event loop
(a write to the page cache, a compaction of ``keep`` bytes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from pathlib import Path

from multiserver.system._paths import write_whole
from multiserver.terminal._buffer import safe_start

OUTPUT_DIR = "output"
# The newest bytes a file keeps: what a restore replays of a session
# (``restore``'s SCROLLBACK_LIMIT is this figure).
KEPT_OUTPUT = 256 * 1024
_ROOM = 4096  # what ``safe_start`` looks past a cut for a line's start
_INSTANCE_RE = re.compile(r"^[0-9a-f]{8,64}$")


def instance_dir(state_dir: Path, instance_id: str) -> Path:
    """Where daemon instance ``instance_id`` keeps its children's output.
    ValueError for an id that is no instance id (it names a path)."""
    if not _INSTANCE_RE.match(instance_id):
        raise ValueError(f"not a daemon instance id: {instance_id!r}")
    return state_dir / OUTPUT_DIR / instance_id


def output_path(state_dir: Path, instance_id: str, child_id: int) -> Path:
    return instance_dir(state_dir, instance_id) / f"{int(child_id)}.out"


def _state_path(output: Path) -> Path:
    return output.with_suffix(".json")


class DurableOutput:
    """One child's output file, as one writer keeps it (see the module's
    docstring). ``append`` only collects; ``flush`` writes; ``written``
    counts every byte written to disk (the benchmark reads it). One thread
    may ``append`` while another flushes (the attach client's copy loop
    and its main thread); everything else is the flushing thread's."""

    def __init__(self, path: Path, keep: int) -> None:
        self.path = path
        self.keep = max(1, keep)
        self.written = 0
        self._lock = threading.Lock()
        self._pending = bytearray()
        self._cut = False  # what waits supersedes the whole file
        self._size: int | None = None  # the file's, as of the last flush; None: not looked
        self._state: dict[str, object] | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def append(self, data: bytes) -> None:
        """Output to write at the next flush. What waits is bounded: past
        twice ``keep`` only the newest ``keep`` can matter."""
        with self._lock:
            self._pending += data
            if len(self._pending) >= 2 * self.keep:
                del self._pending[: safe_start(self._pending, len(self._pending) - self.keep)]
                self._cut = True

    def flush(self) -> None:
        """Write what waits. Raises OSError (what waits is kept for the
        next try)."""
        with self._lock:
            data, cut = self._pending, self._cut
            self._pending, self._cut = bytearray(), False
        if not data:
            return
        try:
            self._write(data, cut)
        except BaseException:
            with self._lock:
                self._pending[:0] = data
                self._cut = self._cut or cut
            raise

    def _write(self, data: bytearray, cut: bool) -> None:
        if self._size is None:
            self._make_dir()
            try:
                self._size = os.stat(self.path).st_size
            except FileNotFoundError:
                self._size = 0
        if cut or self._size + len(data) >= 2 * self.keep:
            self._compact(data, 0 if cut else self._size)
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        with open(fd, "ab") as f:
            f.write(data)
        self.written += len(data)
        self._size += len(data)

    def _compact(self, data: bytearray, size: int) -> None:
        """The file becomes its newest ``keep`` bytes (of its ``size``
        bytes, then ``data``)."""
        if size and len(data) < self.keep:
            with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as f:
                # A little more than is kept: room to start it at a line.
                f.seek(max(0, size - (self.keep - len(data)) - _ROOM))
                data = bytearray(f.read()) + data
        if len(data) > self.keep:
            data = data[safe_start(data, len(data) - self.keep) :]
        write_whole(self.path, bytes(data))
        self.written += len(data)
        self._size = len(data)

    def resync(self) -> None:
        """Another writer had the file (a client held the child): look at
        it again before the next write."""
        self._size = None
        self._state = None

    def note(self, **state: object) -> None:
        """Keep ``state`` (cwd, argv, exit_code, exited_at) in the state
        file, written only if something in it changed. Raises OSError."""
        given = {k: v for k, v in state.items() if v is not None}
        if self._state is not None and {**self._state, **given} == self._state:
            return
        # Read again before a write: the daemon notes an exit while a
        # client holds the child (and notes where it is).
        self._state = read_state(self.path) or {}
        merged = {**self._state, **given}
        if merged == self._state:
            return
        self._make_dir()
        data = json.dumps(merged, sort_keys=True).encode()
        write_whole(_state_path(self.path), data)
        self.written += len(data)
        self._state = merged

    def remove(self) -> None:
        """Forget the child: its files go (and its instance's dir, once empty)."""
        with self._lock:
            self._pending.clear()
        for path in (self.path, _state_path(self.path)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(self.path.parent)  # only once empty

    def _make_dir(self) -> None:
        from multiserver.system._trust import ensure_private_dir

        ensure_private_dir(self.path.parent)


# The most characters of a foreground process's argv a state file keeps (a
# title; an argv may run to megabytes).
ARGV_KEPT = 1024


def bounded_argv(argv: list[str] | None) -> list[str] | None:
    """``argv`` cut to ARGV_KEPT characters in all (whole words first)."""
    if argv is None:
        return None
    kept: list[str] = []
    left = ARGV_KEPT
    for word in argv:
        if left <= 0:
            break
        kept.append(word[:left])
        left -= len(word) + 1
    return kept


# --- reading, for restore -------------------------------------------------------------


def read_output(path: Path, limit: int) -> bytes | None:
    """The newest ``limit`` bytes of an output file (from a safe start), or
    None if there is none or it cannot be read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - limit - _ROOM))
            data = f.read()
    except OSError:
        return None
    if len(data) <= limit:
        return data
    return data[safe_start(data, len(data) - limit) :]


def read_state(output: Path) -> dict[str, object] | None:
    """What the state file beside ``output`` says, or None (none, or not
    readable as a JSON object: a state file is never trusted beyond that)."""
    try:
        raw = _state_path(output).read_bytes()
        found = json.loads(raw)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None
