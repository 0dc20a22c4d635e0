"""The daemon's settings as the environment gives them, and as the daemon's
command line carries them, without ``DaemonConfig`` (attrs): a command that
starts a daemon on demand passes them on without importing attrs."""

from __future__ import annotations

import os

MAX_BUFFER_LIMIT = 8 * 1024 * 1024  # a Claimed frame must stay under MAX_FRAME


def env_settings() -> dict[str, object]:
    """``DaemonConfig`` fields from MULTISERVER_BUFFER_LIMIT,
    MULTISERVER_IDLE_EXIT, MULTISERVER_FRAME_TIMEOUT and
    MULTISERVER_MAX_CONNECTIONS: those set. Raises ValueError (one line)."""
    kwargs: dict[str, object] = {}
    raw = os.environ.get("MULTISERVER_BUFFER_LIMIT")
    if raw:
        kwargs["buffer_limit"] = _parse_int("MULTISERVER_BUFFER_LIMIT", raw, 0, MAX_BUFFER_LIMIT)
    raw = os.environ.get("MULTISERVER_IDLE_EXIT")
    if raw:
        kwargs["idle_exit"] = None if raw in ("never", "none") else float(raw)
    raw = os.environ.get("MULTISERVER_FRAME_TIMEOUT")
    if raw:
        kwargs["frame_timeout"] = kwargs["hello_timeout"] = _parse_seconds(
            "MULTISERVER_FRAME_TIMEOUT", raw
        )
    raw = os.environ.get("MULTISERVER_MAX_CONNECTIONS")
    if raw:
        kwargs["max_connections"] = _parse_int("MULTISERVER_MAX_CONNECTIONS", raw, 1, 1_000_000)
    return kwargs


def _parse_seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not 0 < value < 10**6:
        raise ValueError(f"{name} must be within 0..1000000 seconds, got {raw}")
    return value


def _parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be within {lo}..{hi}, got {value}")
    return value


# The daemon's options, by field; a field not given takes the daemon's default.
_OPTIONS = {
    "buffer_limit": "--buffer-limit",
    "idle_exit": "--idle-exit",
    "frame_timeout": "--frame-timeout",
    "max_connections": "--max-connections",
}


def settings_args(settings: dict[str, object]) -> list[str]:
    """The daemon's command line for ``settings`` (``DaemonConfig`` fields;
    what ``_daemon_main`` reads)."""
    args: list[str] = []
    for field, option in _OPTIONS.items():
        if field not in settings:
            continue
        value = settings[field]
        if field == "idle_exit" and value is None:
            args += [option, "never"]
        else:
            args += [option, repr(value)]
    return args
