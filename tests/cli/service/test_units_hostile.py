"""Units written for paths and settings that systemd reads otherwise than
a shell (issue 23): a ``$`` in the executable's path, a quote in it, a
newline in a ``MULTISERVER_*`` value. Each unit is either what was meant,
as ``systemd-analyze verify`` and systemd's quoting rules read it, or
refused in one line; never a unit with a line of its own injected."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from multiserver_cli.service._units import (
    ServiceSpec,
    UnwritableUnit,
    systemd_daemon_unit,
    systemd_restore_unit,
)
from tests.cli.service.test_service import unit_sections, values

INJECTED = "v\nExecStartPre=/usr/bin/touch /tmp/pwned-by-a-setting"
_UNESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


def unquoted(value: str) -> list[str]:
    """A setting's words as systemd.syntax(7) splits them: double quotes,
    C escapes undone (``\\n``, ``\\xNN``), specifiers' ``%%`` as ``%``."""
    words: list[str] = []
    word: list[str] | None = None
    quoted = False
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "x":
                ch, i = chr(int(value[i + 2 : i + 4], 16)), i + 3
            else:
                ch, i = _UNESCAPES[nxt], i + 1
            word = (word or []) + [ch]
        elif ch == '"':
            quoted = not quoted
            word = word or []
        elif ch.isspace() and not quoted:
            if word is not None:
                words.append("".join(word))
            word = None
        else:
            word = (word or []) + [ch]
        i += 1
    assert not quoted, value
    if word is not None:
        words.append("".join(word))
    return [w.replace("%%", "%") for w in words]


def command_line(value: str) -> tuple[str, list[str]]:
    """An ``ExecStart=`` as systemd runs it: the executable (never
    expanded) and argv (``$$`` as ``$``)."""
    words = unquoted(value)
    if words[0].startswith("@"):
        exe, argv = words[0][1:], words[1:]
    else:
        exe, argv = words[0], words
    return exe, [w.replace("$$", "$") for w in argv]


def units(spec: ServiceSpec) -> dict[str, str]:
    return {
        "multiserver.service": systemd_daemon_unit(spec),
        "multiserver-restore.service": systemd_restore_unit(spec),
    }


def executable(tmp_path: Path, directory: str) -> str:
    where = tmp_path / directory
    where.mkdir()
    script = where / "multiserver"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    return str(script)


def verified(tmp_path: Path, texts: dict[str, str]) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "units"
    folder.mkdir()
    for name, text in texts.items():
        (folder / name).write_text(text)
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)
    return subprocess.run(
        ["systemd-analyze", "--user", "verify", *(str(folder / n) for n in texts)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
    )


def test_a_dollar_in_the_executable_s_path_runs_that_executable(tmp_path: Path) -> None:
    exe = executable(tmp_path, "opt$HOME%x")
    spec = ServiceSpec(launcher=(exe,), settings=(("MULTISERVER_STATE_DIR", "/s$t"),))
    ran = {
        name: command_line(values(unit_sections(text)["Service"], "ExecStart")[0])
        for name, text in units(spec).items()
    }
    assert ran["multiserver.service"] == (exe, [exe, "--daemon", "1", "daemon", "--service"])
    shell = ["/bin/sh", "-lc", 'exec "$0" "$@"']
    restore = [exe, "restore", "--timeout", "5"]
    assert ran["multiserver-restore.service"] == ("/bin/sh", [*shell, *restore])
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze")
    done = verified(tmp_path, units(spec))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_a_newline_in_a_setting_stays_in_its_value(tmp_path: Path) -> None:
    spec = ServiceSpec(launcher=("/usr/bin/true",), settings=(("MULTISERVER_STATE_DIR", INJECTED),))
    for text in units(spec).values():
        service = unit_sections(text)["Service"]
        assert values(service, "ExecStartPre") == []
        env = [unquoted(v) for v in values(service, "Environment")]
        assert [f"MULTISERVER_STATE_DIR={INJECTED}"] in env, env
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze")
    done = verified(tmp_path, units(spec))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


@pytest.mark.parametrize("directory", ['a"q', "a'q", "a\\q", "a\nq"])
def test_an_executable_systemd_cannot_run_is_refused_in_one_line(
    tmp_path: Path, directory: str
) -> None:
    exe = str(tmp_path / directory / "multiserver")
    with pytest.raises(UnwritableUnit) as caught:
        systemd_daemon_unit(ServiceSpec(launcher=(exe,)))
    (line,) = str(caught.value).splitlines()
    assert line.startswith("cannot write a systemd unit that runs "), line
    assert "a quote, a backslash or a control character" in line, line


def test_a_setting_that_is_not_utf8_is_refused_in_one_line() -> None:
    bad = os.fsdecode(b"/state/caf\xe9")
    spec = ServiceSpec(launcher=("/usr/bin/true",), settings=(("MULTISERVER_STATE_DIR", bad),))
    with pytest.raises(UnwritableUnit) as caught:
        systemd_daemon_unit(spec)
    assert str(caught.value) == (
        "cannot write 'MULTISERVER_STATE_DIR=/state/caf\\\\xe9' in a systemd unit: it holds a"
        " NUL or bytes that are not UTF-8"
    )
