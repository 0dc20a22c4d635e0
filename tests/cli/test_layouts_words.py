"""What restore --open print prints, and which process is attached to what."""

from __future__ import annotations

import pytest

from multiserver_cli._layouts import print_plan, tmux_hint
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


def test_the_tmux_line_names_every_tmux_session_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions made with `new -d` are in window "main", others in theirs:
    one tmux session each, all detached, and the line names them all."""
    monkeypatch.delenv("TMUX", raising=False)
    arr = Arrangement(
        [
            Window(
                "main", [Tab(SessionLeaf("a", ["sh"], "/")), Tab(SessionLeaf("b", ["sh"], "/"))]
            ),
            Window("w 2", [Tab(SessionLeaf("c", ["sh"], "/"))]),
        ]
    )
    ops = open_plan(arr, lambda leaf: ("multiserver", "attach", leaf.name))
    assert tmux_hint(ops, "/tmp/t.sock") == (
        "in tmux, detached: tmux sessions main, 'w 2'; see one with"
        " `tmux -S /tmp/t.sock attach -t main`"
    )
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    assert tmux_hint(ops[2:], None) == (
        "in tmux, detached: tmux session 'w 2'; see one with `tmux switch-client -t 'w 2'`"
    )
