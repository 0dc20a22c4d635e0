"""Observers of the blocking client: called with (the Welcome, the socket)
after each handshake of ``dial_blocking``. The command line uses it to
notice a daemon that runs older code than itself
(``multiserver_cli/_older.py``); the library itself prints nothing. A
module of its own so that registering costs no import of the client."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from multiserver.protocol._light_messages import Welcome

WELCOME_HOOKS: list[Callable[[Welcome, Path], None]] = []
