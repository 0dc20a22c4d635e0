"""What restore --open print prints, and which process is attached to what."""

from __future__ import annotations

import pytest

from multiserver_cli._layouts import print_plan
from multiserver_cli.commands.save import attached_session
from restore.layout._layout import open_plan
from restore.store._model import Arrangement, SessionLeaf, Split, Tab, Window


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["/venv/bin/python", "/venv/bin/multiserver", "attach", "web"], "web"),
        (["multiserver", "attach", "-e", "^A", "web"], "web"),
        (["multiserver", "--daemon", "2", "attach", "db"], "db"),
        (["python3", "-m", "multiserver_cli", "attach", "x"], "x"),
        (["multiserver", "new", "-n", "build", "--", "make"], "build"),
        (["multiserver", "new", "-A", "-n", "build"], "build"),
        (["multiserver"], "main"),
        (["multiserver", "--daemon", "3"], "main"),
        (["multiserver", "new", "-d", "-n", "build"], None),  # detached: not shown here
        (["multiserver", "new"], None),  # a default name, not known from argv
        (["multiserver", "ls"], None),
        (["multiserver", "attach"], None),  # a usage error
        (["multiserver", "attach", "bad name"], None),
        (["vim", "multiserver"], None),
        (["sh", "-c", "multiserver attach x"], None),  # a shell's argument, not a process
        (["zsh"], None),
    ],
)
def test_the_session_a_process_attaches_to(argv: list[str], name: str | None) -> None:
    assert attached_session(argv) == name


def test_print_gives_wezterm_commands_for_each_tab_and_split() -> None:
    root = Split(True, [SessionLeaf("a", ["sh"], "/w a"), SessionLeaf("b", ["sh"], "/w")], [3, 1])
    arr = Arrangement([Window("main", [Tab(root, "code"), Tab(SessionLeaf("c", ["sh"], "/"))])])
    script = print_plan(open_plan(arr, lambda leaf: ("multiserver", "attach", leaf.name)))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert "p1=$(wezterm cli spawn --new-window --cwd '/w a' -- multiserver attach a)" in lines
    assert (
        'p2=$(wezterm cli split-pane --pane-id "$p1" --right --percent 25 --cwd /w'
        " -- multiserver attach b)" in lines
    )
    assert 'p3=$(wezterm cli spawn --pane-id "$p1" --cwd / -- multiserver attach c)' in lines
