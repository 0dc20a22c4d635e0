"""Nothing a program or a file put in a name, an argv, a cwd or a detail
acts on the person's terminal (issue 24): ``printable`` is the one rule
(``\\x1b``, ``\\x07``, ``\\u202e``), and every place such text is printed
uses it. The end-to-end tests run the real command on a real daemon and
check the bytes: piped, and on a PTY (a person's terminal).

Every process a test starts is stopped by pid (``ms_dirs`` stops the
daemons of the test's dirs, and their children, at teardown)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from multiserver.internal import printable
from multiserver_cli._format import table
from multiserver_cli._layouts import _one_line
from multiserver_cli.commands import _report
from tests.cli.conftest import MULTISERVER, on_a_terminal, person_env
from tests.conftest import MsDirs

# What retitles a window today: OSC 0 ... BEL, in a comment of sh -c.
TITLE = "\x1b]0;T\x07"
HOSTILE = f"sleep 1000 # {TITLE}"
# Bytes a terminal acts on: ESC, BEL, CSI in C1, and a bidi override.
ACTING = (b"\x1b", b"\x07", b"\xc2\x9b", "\u202e".encode())


def _acts(out: bytes) -> list[bytes]:
    return [b for b in ACTING if b in out]


def test_printable_escapes_what_a_terminal_acts_on() -> None:
    assert printable(TITLE) == "\\x1b]0;T\\x07"
    assert printable("a\u202eb\x9bc\x7f\td") == "a\\u202eb\\x9bc\\x7f\\td"
    # Not UTF-8: as `escaped` shows it, one rule for both.
    assert printable(os.fsdecode(b"caf\xe9\x1b")) == "caf\\xe9\\x1b"
    # Ours of several lines keep their lines; a name's newline does not.
    assert printable("one\ntwo\x1b", lines=True) == "one\ntwo\\x1b"
    assert printable("one\ntwo") == "one\\ntwo"
    # Plain text is itself, and printing twice changes nothing.
    assert printable("café naïve ~/x y") == "café naïve ~/x y"
    assert printable(printable(TITLE)) == printable(TITLE)


def test_tables_and_layout_comments_use_it() -> None:
    shown = table(["NAME", "DETAIL"], [[f"a{TITLE}", "b\u202e"]])
    assert "a\\x1b]0;T\\x07" in shown and "b\\u202e" in shown
    assert _one_line(f"x\n{TITLE}") == "x\\n\\x1b]0;T\\x07"


def test_restore_report_progress_and_sweep_rows(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    out = {
        "ok": True,
        "opened": [f"opened {TITLE}"],
        "sessions": [
            {
                "name": f"n{TITLE}",
                "outcome": "relaunched",
                "daemon": f"/run/x{TITLE}",
                "detail": f"argv {TITLE}",
                "seconds": 0.1,
            }
        ],
        "sweep": [
            {"name": f"s{TITLE}", "action": "adopted", "socket": "/r/s.sock", "detail": TITLE}
        ],
    }
    assert _report.show(out, as_json=False) == 0
    got = capsysbinary.readouterr()
    assert _acts(got.out + got.err) == []
    assert b"n\\x1b]0;T\\x07" in got.out and b"s\\x1b]0;T\\x07" in got.out
    assert b"opened \\x1b]0;T\\x07" in got.err


def test_status_lines_of_attach(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    from multiserver_cli.attach._tty import say

    say(f"[detached from a{TITLE}]")
    assert capfdbinary.readouterr().out == b"[detached from a\\x1b]0;T\\x07]\n"


def test_error_lines(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    from multiserver_cli._errors import CliError
    from multiserver_cli.main import _say_error

    _say_error(CliError(f"no session named 'a{TITLE}'"))
    assert capsysbinary.readouterr().err == b"multiserver: no session named 'a\\x1b]0;T\\x07'\n"


def _hostile_session(ms_dirs: MsDirs) -> tuple[dict[str, str], Path]:
    """A detached session whose argv and cwd hold a title-setting OSC."""
    env = person_env(ms_dirs)
    where = ms_dirs.root / f"dir{TITLE}"
    where.mkdir()
    made = subprocess.run(
        [MULTISERVER, "new", "-d", "-n", "esc", "--", "sh", "-c", HOSTILE],
        cwd=where,
        env=env,
        capture_output=True,
        timeout=30,
    )
    assert made.returncode == 0, made.stderr
    return env, where


def test_ls_piped_shows_no_escape(ms_dirs: MsDirs) -> None:
    env, _ = _hostile_session(ms_dirs)
    listed = subprocess.run(
        [MULTISERVER, "ls"], cwd=ms_dirs.root, env=env, capture_output=True, timeout=30
    )
    assert listed.returncode == 0, listed.stderr
    assert _acts(listed.stdout + listed.stderr) == []
    assert b"\\x1b]0;T\\x07" in listed.stdout  # the argv, shown escaped
    assert b"dir\\x1b" in listed.stdout  # the cwd


def test_ls_on_a_terminal_shows_no_escape(ms_dirs: MsDirs) -> None:
    env, _ = _hostile_session(ms_dirs)
    seen = on_a_terminal([MULTISERVER, "ls"], {**env, "COLUMNS": "200"})
    assert _acts(seen) == []
    assert b"\\x1b]0;T\\x07" in seen


def test_an_error_naming_such_a_session_is_escaped(ms_dirs: MsDirs) -> None:
    env = person_env(ms_dirs)
    refused = subprocess.run(
        [MULTISERVER, "kill", f"none{TITLE}"],
        cwd=ms_dirs.root,
        env=env,
        capture_output=True,
        timeout=30,
    )
    assert refused.returncode != 0
    assert refused.stderr.startswith(b"multiserver: ")
    assert _acts(refused.stdout + refused.stderr) == []
    assert b"none\\x1b]0;T\\x07" in refused.stderr
