"""The daemon's settings, apart from the daemon: a client needs them to
start one, and should not import the daemon to do so. Each field that is a
setting is checked by its row of ``_settings`` (the kind that checks the
environment and the daemon's command line), so a config no daemon would
serve with cannot be made."""

from __future__ import annotations

import attrs

from multiserver.settings._settings import BY_NAME, DAEMON_FIELDS, env_settings, settings_args

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _setting(name: str) -> Any:
    """The field of setting ``name``: its default, checked by its kind."""
    setting = BY_NAME[name]

    def check(instance: object, attribute: object, value: object) -> None:
        setting.check(value)

    return attrs.field(default=setting.default, validator=check)


@attrs.frozen
class DaemonConfig:
    buffer_limit: int = _setting("buffer_limit")
    idle_exit: float | None = _setting("idle_exit")  # None: never
    stall_timeout: float = 10.0
    max_queued_notices: int = 10_000
    outbox_high_water: int = 8 * 1024 * 1024
    # Bounds on what clients send. A frame must be whole this long after its
    # first byte arrived; a new connection must say Hello this soon.
    frame_timeout: float = _setting("frame_timeout")
    hello_timeout: float = 10.0
    max_connections: int = _setting("max_connections")
    # With several holders, whose size a session takes (docs/sharing.md).
    share_size: str = _setting("share_size")
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
    """Daemon settings from the environment (``_settings.env_settings``).
    Raises SettingError (one line) for a bad variable."""
    return DaemonConfig(**env_settings())  # type: ignore[arg-type]


def config_args(config: DaemonConfig) -> list[str]:
    """The daemon's command line for ``config`` (what ``_daemon_main`` reads)."""
    return settings_args({field: getattr(config, field) for field in DAEMON_FIELDS})
