"""Each message says what happened: restore --no-relaunch, save, and the
help of every option against what the command prints."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import attrs
import pytest

from multiserver_cli._format import save_summary
from multiserver_cli.main import build_parser
from restore import ArrangementStore, RestorationRef
from tests.cli.conftest import listed, ms, ms_many
from tests.conftest import MsDirs, is_dead, wait_until


async def test_restore_no_relaunch_says_expired_and_starts_nothing(ms_dirs: MsDirs) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "r", "--", "sleep", "100")
    pid = (await listed(ms_dirs))["r"].pid
    await ms(ms_dirs, "stop", "--force")
    await wait_until(lambda: is_dead(pid), 10.0, "the session's program gone")

    result = await ms(ms_dirs, "restore", "--no-relaunch")
    err = result.stderr.decode().splitlines()
    assert err[:3] == [
        "restoring 1 session of 1 daemon within 10 s",
        "  multiserver-daemon-1.socket (1 session): its daemon is not running",
        "  r: expired (its daemon is not running; --no-relaunch: nothing started)",
    ]
    rows = result.stdout.decode().splitlines()
    assert re.split(r"\s{2,}", rows[1])[:4] == [
        "r",
        "expired",
        "multiserver-daemon-1.socket",
        "its daemon is not running; --no-relaunch: nothing started",
    ]
    assert "relaunched" not in result.stdout.decode() + result.stderr.decode()
    assert not ms_dirs.paths.socket.exists()  # nothing was started
    report = json.loads((await ms(ms_dirs, "restore", "--no-relaunch", "--json")).stdout)
    assert [(s["name"], s["outcome"]) for s in report["sessions"]] == [("r", "expired")]


def test_save_summary_counts_every_saved_session() -> None:
    assert save_summary(5, 5, 2) == "saved 5 sessions (2 updated)"
    assert save_summary(5, 4, 0) == "saved 5 sessions (0 updated; 1 not running, kept as it was)"
    assert save_summary(1, 0, 0) == "saved 1 session (0 updated; 1 not running, kept as it was)"
    assert save_summary(3, 1, 1) == (
        "saved 3 sessions (1 updated; 2 not running, kept as they were)"
    )
    assert save_summary(0, 0, 0) == "nothing to save: no saved sessions"


async def test_save_says_how_many_it_saved_and_updated(ms_dirs: MsDirs) -> None:
    await ms_many(
        ms_dirs,
        ["new", "-d", "-n", "a", "--", "sleep", "100"],
        ["new", "-d", "-n", "b", "--", "sh", "-c", "cd /; exec sleep 100"],
    )
    # b's shell must have become sleep, or the first save sees "sh" there.
    b_pid = (await listed(ms_dirs))["b"].pid
    await wait_until(lambda: _comm(b_pid) == "sleep", 5.0, "b's exec")
    with ArrangementStore.open() as store:
        leaf = store.load().find("a")
        assert leaf is not None
        gone = RestorationRef(str(ms_dirs.runtime / "multiserver-daemon-9.socket"), "x", 1, 1)
        store.add_session(attrs.evolve(leaf, name="c", ref=gone), window="main")
    # The first save gives a and b their titles, and b its cwd.
    first, second = [(await ms(ms_dirs, "save")).stderr for _ in range(2)]
    assert first == b"saved 3 sessions (2 updated; 1 not running, kept as it was)\n"
    assert second == b"saved 3 sessions (0 updated; 1 not running, kept as it was)\n"
    with ArrangementStore.open() as store:
        saved = {leaf.name: leaf for leaf in store.load().leaves()}
    assert (saved["b"].cwd, saved["b"].title) == ("/", "sleep 100")


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def _options() -> list[tuple[str, str, str]]:
    """(command, option, help) of every option of every subcommand."""
    parser = build_parser()
    (subs,) = [a for a in parser._actions if a.dest == "cmd"]
    assert subs.choices is not None
    return [
        (name, opt, action.help or "")
        for name, sub in subs.choices.items()
        for action in sub._actions
        for opt in action.option_strings[-1:]
    ]


@pytest.mark.parametrize(("command", "option", "text"), _options(), ids=lambda v: str(v)[:20])
def test_every_option_is_explained(command: str, option: str, text: str) -> None:
    assert text, f"multiserver {command} {option} has no help"


def test_json_help_says_what_is_printed() -> None:
    helps = {(c, o): t for c, o, t in _options()}
    assert "JSON array" in helps[("ls", "--json")] and "per session" in helps[("ls", "--json")]
    assert "JSON object" in helps[("restore", "--json")]
    assert "JSON array" in helps[("orphans", "--json")]
    assert "whole restore" in helps[("restore", "--timeout")]


async def test_ls_json_is_one_array_as_its_help_says(ms_dirs: MsDirs) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "j", "--", "sleep", "100")
    out = (await ms(ms_dirs, "ls", "--json")).stdout
    assert out.count(b"\n") == 1  # one line when piped
    parsed = json.loads(out)
    assert isinstance(parsed, list) and [s["name"] for s in parsed] == ["j"]


README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_command_table_names_every_command_and_option() -> None:
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(
            r"^\| `multiserver (\w+)[^|]*(?:\\\|[^|]*)*\|.*$", README.read_text(), re.M
        )
    }
    parser = build_parser()
    (subs,) = [a for a in parser._actions if a.dest == "cmd"]
    assert subs.choices is not None
    assert set(rows) == set(subs.choices), "README's table and the commands differ"
    for command, sub in subs.choices.items():
        row = rows[command]
        missing = [
            action.option_strings
            for action in sub._actions
            if action.option_strings
            and action.dest != "help"
            and action.help != argparse.SUPPRESS  # for our own use (attach --relay)
            and not any(re.search(rf"{re.escape(o)}[ \]]", row) for o in action.option_strings)
        ]
        assert not missing, f"README's row for {command} leaves out {missing}"
