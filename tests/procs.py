"""/proc probes for tests and benchmarks (no pytest here: ``tests.remote.sshd``
and the benchmarks use them too; ``tests.conftest`` re-exports them)."""

from __future__ import annotations

import os
from collections.abc import Iterator


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data.rsplit(")", 1)[1].split()


def proc_state(pid: int) -> str | None:
    """The state letter of ``pid`` (R, S, Z, ...), or None if it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    return proc_state(pid) not in (None, "Z", "X")


def is_dead(pid: int) -> bool:
    return not is_alive(pid)


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def child_pids(pid: int) -> list[int]:
    """Every process whose parent is ``pid`` (zombies included)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and parent_pid(int(name)) == pid:
            found.append(int(name))
    return sorted(found)


def zombies(pid: int) -> list[int]:
    """Children of ``pid`` that exited and were not reaped."""
    return [c for c in child_pids(pid) if proc_state(c) == "Z"]


def cmdlines() -> Iterator[tuple[int, bytes]]:
    """(pid, its NUL-separated command line) of every process that can be
    read now."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                yield int(name), f.read()
        except OSError:
            continue


def cmdline_of(pid: int) -> bytes:
    """The NUL-separated command line of ``pid`` (empty once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def check_process(daemon_pid: int) -> int | None:
    """The daemon's child that runs the installed code in check mode on its
    snapshot (an upgrade's first step), if one runs."""
    for pid in child_pids(daemon_pid):
        if b"--check-snapshot" in cmdline_of(pid):
            return pid
    return None
