"""A command that meets a daemon running older code than itself says so
once (per daemon and version), with the command that upgrades it in place.

Called on every handshake of the blocking client (``dial_blocking``'s
``on_welcome``, through ``_dial``); ``upgrade`` and ``daemon`` say versions
themselves and are left out. What is met is said when the command is done
(``say_pending``, from ``main``): an ``attach`` meets its daemon before the
replay, which would paint over a line said then (issue 36). It counts as
told once said."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from multiserver import Welcome


# What was said already: one line per daemon instance and version.
TOLD = "told-older-daemon"
# Met in this command, said at its end: (key, line).
_pending: list[tuple[str, str]] = []


def version_key(version: str) -> tuple[int, ...] | None:
    """The leading numbers of a version ("0.5.1+local" -> (0, 5, 1)); None
    when it starts with none."""
    numbers = []
    for part in version.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(numbers) or None


def is_older(theirs: str, mine: str) -> bool:
    """Whether the daemon's version ``theirs`` is older than ``mine``: by
    its numbers, or, with the same numbers, a different local build."""
    a, b = version_key(theirs), version_key(mine)
    if a is None or b is None:
        return False
    # The same numbers: two local builds ("+upgrade.a"), told apart as text.
    return a < b or (a == b and theirs < mine)


def notice(welcome: Welcome, socket: Path) -> None:
    from multiserver import __version__

    server = welcome.server
    if not server.startswith("multiserver/"):
        return
    theirs = server.partition("/")[2]
    if theirs == __version__ or not is_older(theirs, __version__):
        return
    key = f"{welcome.instance_id} {server}"
    if any(k == key for k, _ in _pending) or _told(key):
        return
    _pending.append(
        (
            key,
            f"multiserver: the daemon on {socket} runs multiserver {theirs}, older than this"
            f" command ({__version__}); `multiserver upgrade` brings it up to date, keeping its"
            " sessions",
        )
    )


def say_pending() -> None:
    """Say what this command met, once each, and record it as told."""
    while _pending:
        key, line = _pending.pop(0)
        print(line, file=sys.stderr)
        _record(key)


def _told_path() -> Path | None:
    from multiserver import MultiserverError
    from multiserver.internal import ensure_private_dir, state_dir

    try:
        return ensure_private_dir(state_dir()) / TOLD
    except MultiserverError:
        return None  # a state dir the checks refuse: said each time


def _told_lines(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def _told(key: str) -> bool:
    """Whether ``key`` was said before."""
    path = _told_path()
    return path is not None and key in _told_lines(path)


def _record(key: str) -> None:
    """``key`` said (best effort: a state dir that cannot be written says it
    again next time)."""
    path = _told_path()
    if path is None:
        return
    lines = _told_lines(path)
    if key in lines:
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join([*lines[-99:], key]) + "\n")
    except OSError:
        pass
