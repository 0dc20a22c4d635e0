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


def config_from_env() -> DaemonConfig:
    """Daemon settings from MULTISERVER_BUFFER_LIMIT / MULTISERVER_IDLE_EXIT."""
    kwargs: dict[str, object] = {}
    raw = os.environ.get("MULTISERVER_BUFFER_LIMIT")
    if raw:
        kwargs["buffer_limit"] = _parse_int("MULTISERVER_BUFFER_LIMIT", raw, 0, MAX_BUFFER_LIMIT)
    raw = os.environ.get("MULTISERVER_IDLE_EXIT")
    if raw:
        kwargs["idle_exit"] = None if raw in ("never", "none") else float(raw)
    return DaemonConfig(**kwargs)  # type: ignore[arg-type]


def _parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be within {lo}..{hi}, got {value}")
    return value


def config_args(config: DaemonConfig) -> list[str]:
    idle = "never" if config.idle_exit is None else repr(config.idle_exit)
    return ["--buffer-limit", str(config.buffer_limit), "--idle-exit", idle]
