"""What a command imports decides most of its start-up (issue 22;
docs/benchmarks.md, "command start-up"). Each command listed here ends, in
a fresh process, with none of attrs, cattrs, trio, typing or the restore
package imported. The everyday commands join the list as their paths
become light; the blocking client they share already is
(tests/multiserver/test_light_path.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from multiserver_cli.main import build_parser

HEAVY = ("attr", "attrs", "cattrs", "trio", "typing", "typing_extensions", "restore", "adopter")

SCRIPT = """
import json, sys
heavy = json.loads(sys.argv[2])
sys.argv = ["multiserver", *json.loads(sys.argv[1])]
from multiserver_cli.main import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


@pytest.mark.parametrize("argv", [["version"], ["version", "--json"]])
def test_a_light_command_imports_nothing_heavy(argv: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    *shown, heavy = out.stdout.splitlines()
    assert "0.1.0" in "".join(shown)
    assert json.loads(heavy) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["ls", "--json"],
        ["--daemon", "2", "new", "-d", "-n", "b", "--", "make", "ls"],
        ["attach", "new"],
        ["new", "-A", "-n", "main"],
        ["kill", "--signal", "TERM", "x"],
        ["peek", "-n", "5", "x"],
        ["stop", "--force"],
        ["version", "--json"],
    ],
)
def test_the_parser_of_one_command_parses_as_the_whole_parser(argv: list[str]) -> None:
    """``main`` builds the arguments of the command it runs only (9 ms of
    every start-up otherwise): what it parses is what the whole parser does."""
    try:
        whole = vars(build_parser().parse_args(argv))
    except SystemExit:
        with pytest.raises(SystemExit):
            build_parser(argv).parse_args(argv)
        return
    assert vars(build_parser(argv).parse_args(argv)) == whole
