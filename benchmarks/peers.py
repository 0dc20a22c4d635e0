"""The other session keepers, measured in the same run: how to start a
detached session with each, and which of their processes are the server side.

Each peer runs with its sockets, config and HOME in the benchmark's scratch
dir (never the user's), with an empty config file where it reads one.
A peer that is not installed is reported as such, never required.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from benchmarks.common import (
    SESSION_ARGV,
    SESSION_COMM,
    Scratch,
    comm,
    marked_pids,
    run_command,
    session_pids,
    wait_for,
)


@attrs.frozen
class Peer:
    name: str
    binary: str
    shape: str  # the start command, for the report
    version_argv: tuple[str, ...]
    # (scratch root, session name, program argv) -> the command that starts
    # one detached session running the program
    new_argv: Callable[[Path, str, Sequence[str]], list[str]]
    # (scratch root, session name) -> the client that attaches the terminal
    # it runs on to that session
    attach_argv: Callable[[Path, str], list[str]]
    attach_shape: str  # the attach command, for the report
    # scratch root -> extra environment (and dirs it needs, created on demand)
    extra_env: Callable[[Path], dict[str, str]]
    # The client passes bytes through unchanged (a proxy), rather than
    # drawing its own screen (a terminal emulator: tmux, screen).
    transparent: bool

    def start_argv(self, root: Path, i: int) -> list[str]:
        """Start session number ``i`` running ``sleep 1000``."""
        return self.new_argv(root, f"s{i}", SESSION_ARGV)

    def installed(self) -> bool:
        return shutil.which(self.binary) is not None

    def version(self) -> str:
        if not self.installed():
            return "not installed"
        try:
            out = subprocess.run(
                list(self.version_argv), capture_output=True, text=True, timeout=5, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unknown ({exc})"
        text = (out.stdout or out.stderr).strip().splitlines()
        return text[0].strip() if text else "unknown"

    def env(self, sc: Scratch) -> dict[str, str]:
        return sc.env(HOME=str(sc.root), TERM=TERM, **self.extra_env(sc.root))


# Every attach client (and the raw baseline) runs with this TERM.
TERM = "xterm-256color"


def _home_only(_root: Path) -> dict[str, str]:
    return {}


def _screen_env(root: Path) -> dict[str, str]:
    screendir = root / "screen"
    screendir.mkdir(mode=0o700, exist_ok=True)  # screen refuses a group/other-readable dir
    return {"SCREENDIR": str(screendir)}


def _abduco_env(root: Path) -> dict[str, str]:
    return {"ABDUCO_SOCKET_DIR": str(root)}


def _tmux(root: Path) -> list[str]:
    return ["tmux", "-S", f"{root}/tmux.sock", "-f", "/dev/null"]


PEERS: tuple[Peer, ...] = (
    Peer(
        "dtach",
        "dtach",
        "dtach -n SOCKET sleep 1000",
        ("dtach", "--version"),
        lambda root, name, argv: ["dtach", "-n", f"{root}/{name}.dtach", *argv],
        lambda root, name: ["dtach", "-a", f"{root}/{name}.dtach", "-r", "none"],
        "dtach -a SOCKET -r none",
        _home_only,
        transparent=True,
    ),
    Peer(
        "tmux",
        "tmux",
        "tmux -S SOCKET -f /dev/null new-session -d -s NAME -x 80 -y 24 sleep 1000",
        ("tmux", "-V"),
        lambda root, name, argv: [
            *_tmux(root),
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "80",
            "-y",
            "24",
            *argv,
        ],
        lambda root, name: [*_tmux(root), "attach-session", "-t", name],
        "tmux -S SOCKET -f /dev/null attach-session -t NAME",
        _home_only,
        transparent=False,
    ),
    Peer(
        "screen",
        "screen",
        "screen -c /dev/null -dmS NAME sleep 1000",
        ("screen", "-v"),
        lambda root, name, argv: ["screen", "-c", "/dev/null", "-dmS", name, *argv],
        lambda root, name: ["screen", "-c", "/dev/null", "-r", name],
        "screen -c /dev/null -r NAME",
        _screen_env,
        transparent=False,
    ),
    Peer(
        "abduco",
        "abduco",
        "abduco -n NAME sleep 1000",
        ("abduco", "-v"),
        lambda root, name, argv: ["abduco", "-n", name, *argv],
        lambda root, name: ["abduco", "-a", name],
        "abduco -a NAME",
        _abduco_env,
        transparent=True,
    ),
)


def peer(name: str) -> Peer:
    return next(p for p in PEERS if p.name == name)


def start_sessions(peer: Peer, sc: Scratch, count: int) -> float:
    """Start ``count`` detached sessions one after another, as a script
    would; returns the seconds from the first command to the last one's exit.
    Raises RuntimeError if a command fails."""
    env = peer.env(sc)
    argvs = [peer.start_argv(sc.root, i) for i in range(count)]
    t0 = time.perf_counter()
    for argv in argvs:
        code = run_command(argv, env)
        if code != 0:
            raise RuntimeError(f"{peer.name}: {' '.join(argv)} exited with {code}")
    return time.perf_counter() - t0


def wait_sessions(sc: Scratch, count: int, timeout: float = 10.0) -> int:
    """Wait (bounded) until ``count`` session children run; returns how many do."""
    wait_for(lambda: len(session_pids(sc.marker)) >= count, timeout)
    return len(session_pids(sc.marker))


def server_pids(sc: Scratch) -> list[int]:
    """The peer's own processes: everything marked but the session children."""
    return [pid for pid in marked_pids(sc.marker) if comm(pid) != SESSION_COMM]
