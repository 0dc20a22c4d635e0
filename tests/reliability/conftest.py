"""The person's terminal (``open_terminal``), for the tests here that run
the command as a person would."""

from tests.cli.conftest import open_terminal  # noqa: F401 - a fixture
