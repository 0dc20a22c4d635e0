"""What the terminal executors share: running a terminal's control command
under a bound, its failures as one line, the panes read back, and the
processes that run in a pane.

The seam between platforms is ``process_argvs``: where there is a
``/proc`` (Linux) it reads ``/proc/PID/cmdline`` (exact arguments),
elsewhere (macOS) it asks ``ps``
(arguments split at spaces, which session names never hold).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

import attrs

from restore.layout._layout import LayoutNode

# Linux's /proc holds each process's exact arguments; elsewhere, ps.
_PROC = os.path.exists("/proc/self/cmdline")
# How long one control command (tmux, kitty @) may take.
COMMAND_TIMEOUT = 10.0


class TerminalError(Exception):
    """A terminal's control command failed; the message is one line."""


def run_control(argv: Sequence[str], what: str, *, timeout: float = COMMAND_TIMEOUT) -> str:
    """Run ``argv`` (a terminal's control command) and return its output,
    decoded as the OS's strings are (``os.fsdecode``: a cwd that is not
    UTF-8 keeps its bytes); TerminalError, saying ``what`` was being done,
    if it cannot be run, fails or takes longer than ``timeout`` seconds."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise TerminalError(f"{what}: {argv[0]} is not installed (not on PATH)") from exc
    except subprocess.TimeoutExpired as exc:
        raise TerminalError(f"{what}: {argv[0]} did not answer within {timeout:g} s") from exc
    except OSError as exc:
        raise TerminalError(f"{what}: cannot run {argv[0]}: {exc.strerror}") from exc
    if done.returncode != 0:
        said = " ".join(os.fsdecode(done.stderr).split()) or f"exit status {done.returncode}"
        raise TerminalError(f"{what}: {said}")
    return os.fsdecode(done.stdout)


@attrs.frozen
class ReadPane:
    """A pane as its terminal reports it: its id, its size in cells, its
    cwd, and the arguments of each process running in it (a shell, the
    command it runs...)."""

    pane: int
    cols: int
    rows: int
    cwd: str
    argvs: tuple[tuple[str, ...], ...]


@attrs.frozen
class ReadTab:
    """A terminal's tab (kitty) or window (tmux): in which of its windows
    (kitty OS window, tmux session), its title, its split tree of pane ids,
    and each pane."""

    window: str
    title: str
    layout: LayoutNode
    panes: dict[int, ReadPane]


def _children(pid_ppid: str) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for line in pid_ppid.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            kids.setdefault(int(parts[1]), []).append(int(parts[0]))
    return kids


def process_tree() -> dict[int, list[int]]:
    """Every process's children (pid -> child pids), from one ``ps``."""
    return _children(run_control(["ps", "-A", "-o", "pid=,ppid="], "listing processes"))


def descendants(root: int, tree: dict[int, list[int]]) -> list[int]:
    """``root`` and every process under it, parents first."""
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop(0)
        if pid in out:
            continue
        out.append(pid)
        todo.extend(tree.get(pid, ()))
    return out


def process_argvs(pids: Sequence[int]) -> tuple[tuple[str, ...], ...]:
    """The arguments of each of ``pids`` that still runs and can be read."""
    out: list[tuple[str, ...]] = []
    for pid in pids:
        argv = _argv(pid)
        if argv:
            out.append(argv)
    return tuple(out)


def _argv(pid: int) -> tuple[str, ...]:
    if _PROC:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            return ()
        return tuple(os.fsdecode(a) for a in raw.split(b"\0")[:-1])
    try:
        text = run_control(["ps", "-o", "args=", "-p", str(pid)], "reading a process")
    except TerminalError:
        return ()
    return tuple(text.split())
