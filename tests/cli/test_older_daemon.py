"""A command that meets a daemon running older code says so once, with
the command that upgrades it (``multiserver_cli/_older.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from multiserver import __version__
from multiserver.protocol._messages import Welcome
from multiserver_cli._older import is_older, notice, say_pending, version_key
from tests.conftest import MsDirs, RunningDaemon


@pytest.mark.parametrize(
    ("theirs", "mine", "older"),
    [
        ("0.1.0", "0.2.0", True),
        ("0.2.0", "0.1.0", False),
        ("0.9", "0.10", True),
        ("1.0.0", "1.0.0", False),
        ("0.1.0+upgrade.a", "0.1.0+upgrade.b", True),
        ("0.1.0+upgrade.b", "0.1.0+upgrade.a", False),
        ("dev", "0.1.0", False),
    ],
)
def test_which_daemon_is_older(theirs: str, mine: str, older: bool) -> None:
    assert is_older(theirs, mine) is older


def test_version_key_reads_the_leading_numbers() -> None:
    assert version_key("0.5.1rc1+local") == (0, 5, 1)
    assert version_key("x") is None


def welcome(server: str, instance: str = "a" * 32) -> Welcome:
    return Welcome(version=6, instance_id=instance, pid=1, server=server, children=[])


def test_an_older_daemon_is_named_once_with_the_upgrade_command(
    ms_dirs: MsDirs, capsys: pytest.CaptureFixture[str]
) -> None:
    socket = Path("/run/x.socket")
    notice(welcome("multiserver/0.0.1"), socket)
    notice(welcome("multiserver/0.0.1"), socket)  # met twice in one command
    assert capsys.readouterr().err == ""  # kept until the command is done
    say_pending()
    first = capsys.readouterr().err
    assert first.count("\n") == 1
    assert "runs multiserver 0.0.1, older than this command" in first
    assert f"({__version__})" in first and "`multiserver upgrade`" in first
    notice(welcome("multiserver/0.0.1"), socket)
    say_pending()
    assert capsys.readouterr().err == ""
    # Another daemon (or the same one at another old version) is news again.
    notice(welcome("multiserver/0.0.1", "b" * 32), socket)
    say_pending()
    assert "older than this command" in capsys.readouterr().err


def test_a_notice_never_said_is_not_told(
    ms_dirs: MsDirs, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36: an attach met the older daemon, the replay painted over
    the line, and it counted as told. Told is what was said."""
    import multiserver_cli._older as older

    notice(welcome("multiserver/0.0.1", "c" * 32), Path("/run/x.socket"))
    older._pending.clear()  # the command died before its end: nothing said
    notice(welcome("multiserver/0.0.1", "c" * 32), Path("/run/x.socket"))
    say_pending()
    assert "older than this command" in capsys.readouterr().err


def test_a_daemon_as_new_or_newer_is_not_mentioned(
    ms_dirs: MsDirs, capsys: pytest.CaptureFixture[str]
) -> None:
    for server in (f"multiserver/{__version__}", "multiserver/999.0", "other/1.0"):
        notice(welcome(server), Path("/run/x.socket"))
    say_pending()
    assert capsys.readouterr().err == ""


async def test_every_command_that_talks_to_the_daemon_notices(
    daemon: RunningDaemon, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Wired where a command dials (``_dial``): an ``ls`` built as a newer
    version than the daemon's says so, once."""
    import multiserver
    from multiserver_cli.main import main

    monkeypatch.setattr(multiserver, "__version__", "999.0")
    for _ in range(2):
        with pytest.raises(SystemExit) as done:
            await trio.to_thread.run_sync(main, ["ls"])
        assert done.value.code == 0
    err = capfd.readouterr().err
    assert err.count("older than this command (999.0)") == 1, err


def test_an_upgrade_to_older_code_says_it_is_a_downgrade() -> None:
    """Issue 36: `upgrade` to an older version said "0.1.4 -> 0.1.0" and no more."""
    from multiserver_cli.commands.upgrade import _direction

    assert (
        _direction("0.1.4", "0.1.0") == " (a downgrade: the installed code is older than what ran)"
    )
    assert _direction("0.1.0", "0.1.4") == _direction("0.1.4", "0.1.4") == ""
