"""What a command imports decides most of its start-up (issue 22;
docs/benchmarks.md, "command start-up"). Each command listed here ends, in
a fresh process, with none of attrs, cattrs, trio, typing or pyte imported:
``version``; ``ls`` and ``peek`` with a daemon holding a saved session
(the saved sessions read lightly, ``restore.read_saved``) and a hosts
file; ``new -d`` once the store exists (its session added lightly);
``daemon`` and ``stop``; ``restore`` with nothing to do; ``attach`` up to
raw mode. ``kill`` and
``attach``'s detach still open the store to change it; the blocking client
they all share is light (tests/multiserver/client/test_light_path.py)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from multiserver_cli.main import build_parser
from tests.conftest import MsDirs, daemon_pids_for, stop_daemon_sync, wait_until_sync

HEAVY = ("attr", "attrs", "cattrs", "trio", "typing", "typing_extensions", "pyte")

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


def _made(name: str, *argv: str) -> None:
    """A detached session ``name`` running ``argv``, made by the command
    (saved, as a person makes it)."""
    made = subprocess.run(
        [sys.executable, "-m", "multiserver_cli", "new", "-d", "-n", name, "--", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert made.returncode == 0, made.stderr


def _run(argv: list[str]) -> tuple[str, list[str]]:
    """What a fresh ``multiserver ARGV`` printed, and the heavy modules it
    imported."""
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
    return "\n".join(shown), json.loads(heavy)


@pytest.mark.parametrize("argv", [["version"], ["version", "--json"]])
def test_version_imports_nothing_heavy(argv: list[str]) -> None:
    shown, heavy = _run(argv)
    assert "0.1.0" in shown
    assert heavy == []


def test_ls_peek_and_new_import_nothing_heavy(ms_dirs: MsDirs, tmp_path: Path) -> None:
    os.environ["MULTISERVER_CONFIG_DIR"] = str(tmp_path)  # monkeypatched back by ms_dirs' env
    try:
        _made("lt", "sh", "-c", "echo light-$((6*7)); exec sleep 100")
        (tmp_path / "hosts.json").write_text(json.dumps({"format": 1, "hosts": []}))
        shown, heavy = _run(["ls"])
        assert "lt" in shown and heavy == []
        # What a host answers: written through its schema, as lightly.
        shown, heavy = _run(["ls", "--json"])
        assert json.loads(shown)[0]["name"] == "lt" and heavy == []
        deadline = time.monotonic() + 10
        while "light-42" not in (shown := _run(["peek", "lt"]))[0]:
            assert time.monotonic() < deadline, shown
        assert shown[1] == []
        # Once the store exists, a new session is saved lightly too.
        shown, heavy = _run(["new", "-d", "-n", "lt2", "--", "sleep", "100"])
        assert shown == "lt2" and heavy == []
        assert "lt2" in _run(["ls"])[0]
        from restore import read_saved

        assert [leaf.name for leaf in read_saved(ms_dirs.state) or []] == ["lt", "lt2"]
    finally:
        os.environ.pop("MULTISERVER_CONFIG_DIR", None)
        for pid in daemon_pids_for(ms_dirs.paths.socket):
            stop_daemon_sync(pid)


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
        ["--daemon=3", "ls"],
        ["--dae", "2", "ls"],
        ["bogus", "ls"],
        ["ls", "bogus"],
        ["--daemon", "x", "ls"],
        ["attach"],
    ],
)
def test_the_parser_of_one_command_parses_as_the_whole_parser(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``main`` builds only the command it runs (each sub-parser and its
    arguments cost start-up): what it parses is what the whole parser
    does, and a line it refuses is refused with the same words."""
    try:
        whole = vars(build_parser().parse_args(argv))
    except SystemExit:
        refused = capsys.readouterr().err
        assert refused.startswith("multiserver: ")
        with pytest.raises(SystemExit):
            build_parser(argv).parse_args(argv)
        assert capsys.readouterr().err == refused
        return
    assert vars(build_parser(argv).parse_args(argv)) == whole


def test_daemon_and_stop_import_nothing_heavy(ms_dirs: MsDirs) -> None:
    """``daemon`` starts one and says how (its lock file, read lightly);
    ``stop`` stops it."""
    try:
        shown, heavy = _run(["--daemon", "3", "daemon"])
        assert shown.endswith("multiserver-daemon-3.socket") and heavy == []
        shown, heavy = _run(["daemon", "--json"])
        [row] = json.loads(shown)
        assert heavy == [] and (row["number"], row["started"]) == (3, "on-demand")
        shown, heavy = _run(["--daemon", "3", "stop"])
        assert heavy == []
        assert not (ms_dirs.runtime / "multiserver-daemon-3.socket").exists()
    finally:
        for pid in daemon_pids_for(ms_dirs.runtime / "multiserver-daemon-3.socket"):
            stop_daemon_sync(pid)


def test_restore_with_nothing_to_do_says_what_the_whole_restore_says(ms_dirs: MsDirs) -> None:
    """At every login: nothing saved and no daemon to sweep is answered
    without trio; a daemon to sweep takes the whole restore, which reports
    the same when that daemon holds nothing."""
    shown, heavy = _run(["restore", "--json"])
    quick = json.loads(shown)
    assert heavy == []
    assert (ms_dirs.state / "restore-report.json").exists()
    socket = ms_dirs.runtime / "multiserver-daemon-1.socket"
    try:
        assert _run(["daemon"])[0].endswith(socket.name)
        shown, heavy = _run(["restore", "--json"])
        assert "trio" in heavy
        whole = json.loads(shown)
        assert (
            {**quick, "seconds": 0}
            == {**whole, "seconds": 0}
            == {
                "sessions": [],
                "sweep": [],
                "seconds": 0,
                "ok": True,
                "saved": True,
            }
        )
    finally:
        for pid in daemon_pids_for(socket):
            stop_daemon_sync(pid)


ATTACH = """
import json, sys, termios
heavy = json.loads(sys.argv[2])
report = sys.argv[3]
_set = termios.tcsetattr


def spy(*args):
    # The first mode change is the client going raw: what is loaded then.
    try:
        with open(report, "x") as f:
            f.write(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
    except FileExistsError:
        pass
    return _set(*args)


termios.tcsetattr = spy
sys.argv = ["multiserver", *json.loads(sys.argv[1])]
from multiserver_cli.main import main
main()
"""


def test_attach_is_in_raw_mode_before_anything_heavy_is_imported(
    ms_dirs: MsDirs, tmp_path: Path
) -> None:
    """Up to raw mode (its first terminal mode change); the store is opened
    later, at the first save of what the terminal shows."""
    report = tmp_path / "raw.json"
    try:
        _made("at", "sleep", "100")
        pid, fd = pty.fork()
        if pid == 0:  # pragma: no cover - the child
            os.chdir("/")
            os.execv(
                sys.executable,
                [sys.executable, "-c", ATTACH, '["attach", "at"]', json.dumps(HEAVY), str(report)],
            )
        try:
            deadline = time.monotonic() + 20
            while termios.tcgetattr(fd)[3] & termios.ICANON:
                assert time.monotonic() < deadline, "attach never went raw"
                time.sleep(0.01)
            os.write(fd, b"\x1c")  # detach
            assert wait_until_sync(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 20)
        finally:
            os.close(fd)
        assert json.loads(report.read_text()) == []
    finally:
        for daemon in daemon_pids_for(ms_dirs.paths.socket):
            stop_daemon_sync(daemon)


@pytest.mark.parametrize(
    ("argv", "help_of"), [(["ls", "--bogus"], "multiserver ls"), (["--bogus"], "multiserver")]
)
def test_a_word_nobody_takes_points_to_the_help_of_its_command(
    argv: list[str], help_of: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser(argv).parse_args(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"multiserver: unrecognized arguments: --bogus (see: {help_of} --help)\n"
    )


def test_each_command_is_the_module_of_its_name_and_only_it_is_loaded() -> None:
    """``main`` names the commands; each is ``commands/NAME.py``, loaded
    when the command line names it, and every module there is one."""
    from multiserver_cli import commands
    from multiserver_cli.main import COMMAND_NAMES, load_command

    here = Path(commands.__file__).parent
    assert sorted(COMMAND_NAMES) == sorted(
        p.stem for p in here.glob("*.py") if not p.stem.startswith("_")
    )
    for name in COMMAND_NAMES:
        assert name == load_command(name).NAME
    code = (
        "import sys; from multiserver_cli.main import build_parser; "
        "build_parser(['peek', 'x']).parse_args(['peek', 'x']); "
        "print(sorted(m for m in sys.modules if m.startswith('multiserver_cli.commands.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['multiserver_cli.commands.peek']"
