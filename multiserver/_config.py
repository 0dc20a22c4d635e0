"""The daemon's settings, apart from the daemon: a client needs them to
start one, and should not import the daemon to do so."""

from __future__ import annotations

import os

import attrs

MAX_BUFFER_LIMIT = 8 * 1024 * 1024  # a Claimed frame must stay under MAX_FRAME


@attrs.frozen
class DaemonConfig:
    buffer_limit: int = attrs.field(
        default=1024 * 1024,
        validator=attrs.validators.and_(
            attrs.validators.ge(0), attrs.validators.le(MAX_BUFFER_LIMIT)
        ),
    )
    idle_exit: float | None = 5.0  # seconds with no child and no client; None: never
    stall_timeout: float = 10.0
    max_queued_notices: int = 10_000
    outbox_high_water: int = 8 * 1024 * 1024
    # Bounds on what clients send. A frame must be whole this long after its
    # first byte arrived; a new connection must say Hello this soon.
    frame_timeout: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    hello_timeout: float = 10.0
    max_connections: int = attrs.field(default=512, validator=attrs.validators.ge(1))
    # Incomplete frames: each connection may hold ``intake_free`` bytes of
    # one; beyond that, all connections share ``intake_limit`` bytes, and a
    # connection waits (its data stays in the kernel) until there is room.
    intake_free: int = 64 * 1024
    # At least one frame of the largest size (16 MiB), or such a frame
    # could never be read.
    intake_limit: int = attrs.field(
        default=24 * 1024 * 1024, validator=attrs.validators.ge(16 * 1024 * 1024)
    )


def config_from_env() -> DaemonConfig:
    """Daemon settings from MULTISERVER_BUFFER_LIMIT, MULTISERVER_IDLE_EXIT,
    MULTISERVER_FRAME_TIMEOUT and MULTISERVER_MAX_CONNECTIONS."""
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
    return DaemonConfig(**kwargs)  # type: ignore[arg-type]


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


def config_args(config: DaemonConfig) -> list[str]:
    """The daemon's command line for ``config`` (what ``_daemon_main`` reads)."""
    idle = "never" if config.idle_exit is None else repr(config.idle_exit)
    return [
        "--buffer-limit",
        str(config.buffer_limit),
        "--idle-exit",
        idle,
        "--frame-timeout",
        repr(config.frame_timeout),
        "--max-connections",
        str(config.max_connections),
    ]
