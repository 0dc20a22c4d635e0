"""The package's public face: every name in ``__all__`` resolves, and the
daemon's process does not load the client library."""

from __future__ import annotations

import ast
import subprocess
import sys

import multiserver


def test_every_public_name_resolves_from_its_home() -> None:
    assert sorted(multiserver.__all__) == sorted(
        n for ns in multiserver.EXPORTS.values() for n in ns
    )
    for name in multiserver.__all__:
        assert getattr(multiserver, name) is not None
    assert "open_client" in dir(multiserver)


def test_the_daemon_does_not_import_the_client_library() -> None:
    code = (
        "import sys, multiserver.daemon._daemon_main; "
        "print(sorted(m for m in sys.modules if m.startswith('multiserver')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = ast.literal_eval(out)
    assert "multiserver.daemon._daemon_main" in loaded
    assert [m for m in loaded if m.startswith("multiserver.client")] == []


def test_the_fast_commands_import_no_trio() -> None:
    """attach, new, ls, peek, kill, stop, daemon and save run on the blocking
    client: trio alone would double their start-up. Every command's module
    is loaded for the parser; these commands' own code, and what it runs
    with, loads no trio either."""
    fast = ("daemon", "new", "attach", "ls", "peek", "kill", "stop", "save")
    runs_with = (
        "_sessions",
        "_state",
        "_scrollback",
        "_saver",
        "attach._attached",
        "attach._relay",
    )
    modules = [f"multiserver_cli.commands.{m}" for m in fast]
    modules += [f"multiserver_cli.{m}" for m in runs_with]
    code = (
        "import sys, importlib; "
        "from multiserver_cli import main; main.build_parser(); "
        f"[importlib.import_module(m) for m in {modules!r}]; "
        "print(sorted(m for m in ('trio', 'restore._restore', 'adopter') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
