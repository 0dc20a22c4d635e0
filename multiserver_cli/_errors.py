"""The command line's own error: one line for the user, and an exit status."""

from __future__ import annotations

from multiserver import MultiserverError


class CliError(MultiserverError):
    """An error for the user: one line, exit status ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
