"""``multiserver service``: the files it writes, and what it asks of the
service manager.

The units are checked by ``systemd-analyze verify`` where it exists, and
parsed here in any case (their command lines and environment read back to
what was meant); the launchd agents by ``plistlib``. ``install`` and
``uninstall`` run with a recording ``systemctl`` (and ``loginctl``,
``launchctl``) first on PATH, a tiny script in the test's dir that appends
its arguments to a file, and a private XDG config home and HOME: nothing
here touches the user's real units or service manager.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from multiserver import DaemonPaths
from multiserver_cli.commands import service as service_command
from multiserver_cli.service._managers import Launchd, service_manager
from multiserver_cli.service._units import (
    RESTORE_START_LIMIT,
    ServiceSpec,
    launchd_daemon_agent,
    launchd_restore_agent,
    launcher,
    login_shell,
    profile_snippet,
    settings_from,
    systemd_daemon_unit,
    systemd_restore_unit,
)
from tests.cli.conftest import MULTISERVER, person_env
from tests.conftest import MsDirs

SPEC = ServiceSpec(
    launcher=(MULTISERVER,),
    daemon=2,
    settings=(
        ("MULTISERVER_RUNTIME_DIR", "/run/user/1000/multi server"),
        ("MULTISERVER_STRIP_ENV", 'AWS_*:100%:"q"\\b$HOME'),
    ),
    shell="/bin/sh",
)

# A systemctl that records its arguments; `show` prints $SYSTEMCTL_SHOW if
# set, and it fails as a missing user manager does with $SYSTEMCTL_FAIL.
FAKE_SYSTEMCTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$TOOL_LOG"
if [ -n "$SYSTEMCTL_FAIL" ]; then
    echo "Failed to connect to bus: No medium found" >&2
    exit 1
fi
case "$*" in *LoadState*) [ -n "$SYSTEMCTL_SHOW" ] && cat "$SYSTEMCTL_SHOW" ;; esac
exit 0
"""
FAKE_LOGINCTL = """#!/bin/sh
printf 'loginctl %s\\n' "$*" >> "$TOOL_LOG"
echo "${LINGER:-no}"
"""
# launchctl: `print LABEL` succeeds once `bootstrap` loaded it, until `bootout`.
FAKE_LAUNCHCTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$TOOL_LOG"
label=$(basename "${2##*/}" .plist)
case "$1" in
    print) [ -f "$TOOL_DIR/loaded-${2##*/}" ] && echo "state = running" && echo "pid = 77" ;;
    bootstrap) touch "$TOOL_DIR/loaded-$(basename "$3" .plist)" ;;
    bootout) rm -f "$TOOL_DIR/loaded-${2##*/}" ;;
esac
"""


def unit_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file as systemd reads it: sections of (key, value), in order
    (a key may come more than once, as Environment= does)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            assert line.endswith("]"), line
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, line
        current.append((key, value))
    return sections


def values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in section if k == key]


def words(value: str, *, expands: bool = True) -> list[str]:
    """A setting's words as systemd splits them: quotes and escapes, then
    ``%%`` -> ``%`` and, where it expands variables, ``$$`` -> ``$``."""
    out = [w.replace("%%", "%") for w in shlex.split(value)]
    return [w.replace("$$", "$") for w in out] if expands else out


def test_systemd_units_say_what_was_meant() -> None:
    daemon = unit_sections(systemd_daemon_unit(SPEC))
    service = daemon["Service"]
    assert values(service, "Type") == ["notify"]
    assert words(values(service, "ExecStart")[0]) == [
        MULTISERVER,
        "--daemon",
        "2",
        "daemon",
        "--service",
    ]
    # A reload is an upgrade in place of the unit's own daemon.
    assert words(values(service, "ExecReload")[0]) == [MULTISERVER, "--daemon", "2", "upgrade"]
    assert values(service, "KillMode") == ["process"]
    assert values(service, "Restart") == ["on-failure"]
    env = [words(v, expands=False)[0] for v in values(service, "Environment")]
    assert env == [
        "MULTISERVER_DAEMON=2",
        "MULTISERVER_RUNTIME_DIR=/run/user/1000/multi server",
        'MULTISERVER_STRIP_ENV=AWS_*:100%:"q"\\b$HOME',
    ]
    assert values(daemon["Install"], "WantedBy") == ["default.target"]

    restore = unit_sections(systemd_restore_unit(SPEC))
    assert values(restore["Unit"], "After") == ["multiserver.service"]
    assert values(restore["Unit"], "Wants") == ["multiserver.service"]
    service = restore["Service"]
    assert values(service, "Type") == ["oneshot"]
    assert values(service, "TimeoutStartSec") == [str(RESTORE_START_LIMIT)]
    argv = words(values(service, "ExecStart")[0])
    assert argv == ["/bin/sh", "-lc", 'exec "$0" "$@"', MULTISERVER, "restore", "--timeout", "5"]
    # The login shell runs exactly the restore's argv.
    ran = subprocess.run(
        [*argv[:3], "printf", "%s|", *argv[3:]], capture_output=True, env={"HOME": "/nonexistent"}
    )
    assert ran.stdout.decode() == "|".join(argv[3:]) + "|"
    assert values(restore["Install"], "WantedBy") == ["default.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "multiserver.service").write_text(systemd_daemon_unit(SPEC))
    (units / "multiserver-restore.service").write_text(systemd_restore_unit(SPEC))
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)
    done = subprocess.run(
        [
            "systemd-analyze",
            "--user",
            "verify",
            str(units / "multiserver.service"),
            str(units / "multiserver-restore.service"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
    )
    # It warns, and goes on, about what it does not understand.
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_launchd_agents_are_plists(tmp_path: Path) -> None:
    log = tmp_path / "daemon-2.log"
    daemon = plistlib.loads(plistlib.dumps(launchd_daemon_agent(SPEC, log)))
    assert daemon["Label"] == "multiserver.daemon"
    assert daemon["ProgramArguments"] == [MULTISERVER, "--daemon", "2", "daemon", "--service"]
    assert daemon["RunAtLoad"] is True
    assert daemon["KeepAlive"] == {"SuccessfulExit": False}
    assert daemon["AbandonProcessGroup"] is True
    assert daemon["EnvironmentVariables"]["MULTISERVER_DAEMON"] == "2"
    assert daemon["StandardErrorPath"] == str(log)
    restore = plistlib.loads(plistlib.dumps(launchd_restore_agent(SPEC, log)))
    assert restore["Label"] == "multiserver.restore"
    assert restore["ProgramArguments"] == [
        "/bin/sh",
        "-lc",
        'exec "$0" "$@"',
        MULTISERVER,
        "restore",
        "--timeout",
        "5",
    ]
    assert restore["RunAtLoad"] is True and "KeepAlive" not in restore


def test_profile_lines_restore_in_interactive_shells_only(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    fake = tmp_path / "fake multiserver"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(marker))}\n')
    fake.chmod(0o755)
    profile = tmp_path / "profile"
    profile.write_text(profile_snippet(ServiceSpec(launcher=(str(fake),))))
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run(["sh", "-c", f". {shlex.quote(str(profile))}"], env=env, check=True)
    assert not marker.exists()
    subprocess.run(["sh", "-i", "-c", f". {shlex.quote(str(profile))}"], env=env, check=True)
    assert marker.read_text() == "restore --timeout 5\n"


def test_the_launcher_runs_this_multiserver(tmp_path: Path) -> None:
    """The script beside the interpreter, else ``python -P -m
    multiserver_cli``, which runs the same command."""
    assert launcher(sys.executable) == (MULTISERVER,)
    bare = str(tmp_path / "python3")
    assert launcher(bare) == (bare, "-P", "-m", "multiserver_cli")
    done = subprocess.run(
        [sys.executable, "-P", "-m", "multiserver_cli", "service", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: multiserver service [-h]")


def test_settings_and_shell() -> None:
    env = {
        "MULTISERVER_RUNTIME_DIR": "/r",
        "MULTISERVER_IDLE_EXIT": "never",
        "MULTISERVER_DAEMON": "3",
        "HOME": "/h",
    }
    assert settings_from(env) == (("MULTISERVER_RUNTIME_DIR", "/r"),)
    assert login_shell("/bin/bash") == "/bin/bash"
    assert login_shell("/usr/bin/fish") == "/bin/sh"  # no `sh -lc` semantics
    assert login_shell(None) == "/bin/sh"


# --- install and uninstall, with a recording systemctl ------------------------------


def tools(ms_dirs: MsDirs, **extra: str) -> dict[str, str]:
    """The person's environment with the fake tools first on PATH and a
    private XDG config home."""
    bin_dir = ms_dirs.root / "tools"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for name, text in (("systemctl", FAKE_SYSTEMCTL), ("loginctl", FAKE_LOGINCTL)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    env = person_env(ms_dirs)
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        XDG_CONFIG_HOME=str(ms_dirs.root / "config"),
        TOOL_LOG=str(ms_dirs.root / "tools.log"),
    )
    env.update(extra)
    return env


def run_service(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MULTISERVER, "service", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def logged(ms_dirs: MsDirs) -> list[str]:
    path = ms_dirs.root / "tools.log"
    lines = path.read_text().splitlines() if path.exists() else []
    path.unlink(missing_ok=True)
    return lines


def test_install_then_uninstall_with_systemd(ms_dirs: MsDirs) -> None:
    env = tools(ms_dirs)
    units = ms_dirs.root / "config" / "systemd" / "user"
    done = run_service(env, "install")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"installed multiserver.service and multiserver-restore.service in {units}: daemon 1"
        " stays up, started by systemd, and `multiserver restore --timeout 5` runs at login",
        "lingering is off: your service manager, and the daemon with it, stops at your last"
        " logout, and your sessions end; turn it on once with: loginctl enable-linger",
    ]
    assert logged(ms_dirs) == [
        "--user show --property=Version",
        "--user daemon-reload",
        "--user enable multiserver-restore.service",
        "--user enable --now multiserver.service",
        f"loginctl show-user {os.getuid()} --property=Linger --value",
    ]
    daemon = unit_sections((units / "multiserver.service").read_text())["Service"]
    assert words(values(daemon, "ExecStart")[0]) == [
        MULTISERVER,
        "--daemon",
        "1",
        "daemon",
        "--service",
    ]
    # The dirs of the shell that installed it: the daemon is found there.
    assert f"MULTISERVER_RUNTIME_DIR={ms_dirs.runtime}" in values(daemon, "Environment")
    assert (units / "multiserver-restore.service").is_file()
    assert sorted(os.listdir(units)) == ["multiserver-restore.service", "multiserver.service"]

    show = ms_dirs.root / "show"
    show.write_text(
        "LoadState=loaded\nUnitFileState=enabled\nActiveState=active\nSubState=running\n"
        "MainPID=4242\nResult=success\n\n"
        "LoadState=loaded\nUnitFileState=enabled\nActiveState=inactive\nSubState=dead\n"
        "MainPID=0\nResult=exit-code\n"
    )
    status = run_service(tools(ms_dirs, SYSTEMCTL_SHOW=str(show), LINGER="yes"), "status")
    assert status.stdout.splitlines() == [
        "multiserver.service: enabled, active (running), pid 4242",
        "multiserver-restore.service: enabled, inactive (dead), last result: exit-code",
        "lingering: on (the daemon outlives your logout)",
        f"daemon 1: not running ({ms_dirs.paths.socket})",
    ]
    logged(ms_dirs)

    gone = run_service(env, "uninstall")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.splitlines() == [
        f"removed multiserver.service, multiserver-restore.service from {units}"
    ]
    assert logged(ms_dirs) == [
        "--user show --property=Version",
        "--user disable multiserver-restore.service multiserver.service",
        # No daemon runs sessions: nothing is lost by stopping it.
        "--user stop multiserver.service",
        "--user show --property=Version",
        "--user daemon-reload",
    ]
    assert sorted(os.listdir(units)) == []
    again = run_service(env, "uninstall")
    assert again.stdout == f"nothing to remove: no multiserver service in {units}\n"


def test_install_retires_an_earlier_version_s_saver(ms_dirs: MsDirs) -> None:
    """An earlier version installed a saver unit (``save --scrollback
    --every 5``): install stops, disables and removes it, saying so once;
    uninstall removes one too."""
    env = tools(ms_dirs)
    units = ms_dirs.root / "config" / "systemd" / "user"
    units.mkdir(parents=True)
    old = units / "multiserver-save.service"
    old.write_text("[Service]\nExecStart=multiserver save --scrollback --every 5\n")
    done = run_service(env, "install")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == (
        "removed multiserver-save.service: the daemon keeps what sessions show"
    )
    assert not old.exists()
    assert "--user disable --now multiserver-save.service" in logged(ms_dirs)
    old.write_text("[Service]\n")
    gone = run_service(env, "uninstall")
    assert gone.returncode == 0, gone.stderr
    assert not old.exists() and sorted(os.listdir(units)) == []


def test_install_without_a_systemd_user_manager_says_what_to_do_instead(
    ms_dirs: MsDirs,
) -> None:
    said = []
    for env in (tools(ms_dirs, SYSTEMCTL_FAIL="1"), {**tools(ms_dirs), "PATH": "/nonexistent"}):
        done = run_service(env, "install")
        assert done.returncode == 1
        [line] = done.stderr.splitlines()
        said.append(line)
        assert line.startswith("multiserver: no systemd ")
        assert line.endswith(
            "; to restore at login all the same, add these lines to ~/.profile"
            " (the daemon is then started on demand):"
        )
        assert done.stdout == (
            "# multiserver: bring back the saved sessions at login (interactive login shells)\n"
            f"case $- in *i*) {MULTISERVER} restore --timeout 5 ;; esac\n"
        )
        assert not (ms_dirs.root / "config").exists()
    assert said[0].startswith(
        "multiserver: no systemd user manager answers here (systemctl --user: Failed to connect"
        " to bus: No medium found); "
    )
    assert said[1].startswith("multiserver: no systemd here (no systemctl); ")


def test_install_then_uninstall_with_launchd(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The macOS path, run here as on macOS (``sys.platform`` says darwin)
    with a recording launchctl first on PATH and a private HOME."""
    bin_dir = ms_dirs.root / "tools"
    bin_dir.mkdir()
    (bin_dir / "launchctl").write_text(FAKE_LAUNCHCTL)
    (bin_dir / "launchctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("TOOL_LOG", str(ms_dirs.root / "tools.log"))
    monkeypatch.setenv("TOOL_DIR", str(bin_dir))
    monkeypatch.setenv("HOME", str(ms_dirs.root / "home"))
    monkeypatch.setattr(sys, "platform", "darwin")
    agents = ms_dirs.root / "home" / "Library" / "LaunchAgents"
    assert service_manager() == Launchd(agents)
    paths = DaemonPaths.for_number(1)
    domain = f"gui/{os.getuid()}"

    def service(action: str) -> list[str]:
        assert service_command.run(Namespace(action=action, daemon=1, timeout=5.0)) == 0
        return capsys.readouterr().out.splitlines()

    assert service("install") == [
        f"installed the agents multiserver.daemon and multiserver.restore in {agents}: daemon 1"
        " stays up, started by launchd, and `multiserver restore --timeout 5` runs at login"
    ]
    assert logged(ms_dirs) == [
        f"enable {domain}/multiserver.daemon",
        f"enable {domain}/multiserver.restore",
        f"print {domain}/multiserver.daemon",
        f"bootstrap {domain} {agents}/multiserver.daemon.plist",
    ]
    daemon = plistlib.loads((agents / "multiserver.daemon.plist").read_bytes())
    assert daemon["ProgramArguments"][-2:] == ["daemon", "--service"]
    assert daemon["StandardErrorPath"] == str(paths.log)
    assert daemon["EnvironmentVariables"]["MULTISERVER_RUNTIME_DIR"] == str(ms_dirs.runtime)
    restore = plistlib.loads((agents / "multiserver.restore.plist").read_bytes())
    assert restore["ProgramArguments"][-3:] == ["restore", "--timeout", "5"]
    assert service("status") == [
        "multiserver.daemon: loaded, running, pid 77",
        f"multiserver.restore: installed ({agents}/multiserver.restore.plist), not loaded"
        " (it is at the next login)",
        f"daemon 1: not running ({paths.socket})",
    ]
    logged(ms_dirs)

    assert service("uninstall") == [
        f"removed multiserver.daemon.plist, multiserver.restore.plist from {agents}"
    ]
    assert logged(ms_dirs) == [
        f"print {domain}/multiserver.restore",
        f"print {domain}/multiserver.daemon",
        f"bootout {domain}/multiserver.daemon",
    ]
    assert os.listdir(agents) == []
