"""The daemon's settings, apart from the daemon: a client needs them to
start one, and should not import the daemon to do so."""

from __future__ import annotations

import attrs

from multiserver._envconfig import MAX_BUFFER_LIMIT, env_settings, settings_args


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
    return DaemonConfig(**env_settings())  # type: ignore[arg-type]


def config_args(config: DaemonConfig) -> list[str]:
    """The daemon's command line for ``config`` (what ``_daemon_main`` reads)."""
    return settings_args(
        {
            "buffer_limit": config.buffer_limit,
            "idle_exit": config.idle_exit,
            "frame_timeout": config.frame_timeout,
            "max_connections": config.max_connections,
        }
    )
