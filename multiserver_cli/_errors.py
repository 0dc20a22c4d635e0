"""The command line's own errors: one line for the user, and an exit status."""

from __future__ import annotations

from multiserver import MultiserverError


class CliError(MultiserverError):
    """An error for the user: one line, exit status ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class UsageError(CliError):
    """Arguments the parser took but a command cannot: said as the parser
    says its own (``main``), with status 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 2)
