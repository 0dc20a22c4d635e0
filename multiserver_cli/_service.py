"""``multiserver service install | uninstall | status``: the daemon as a
service of the user's service manager (systemd on Linux, launchd on macOS),
and ``multiserver restore`` at login. What is written is ``_units``'s;
here it is written, and systemctl or launchctl are run.

Blocking, no trio, like the other one-round-trip commands. Where no systemd
user manager answers (a container, a system without systemd), ``install``
says so in one line and prints the lines for ``~/.profile`` that restore at
login instead (the daemon is then started on demand, as without a service).

Neither ``install`` nor ``uninstall`` ever ends a session: a reinstall
leaves a running daemon alone (the new unit applies at its next start), and
``uninstall`` stops the service's daemon only when it runs no session (it
then says so, and ``multiserver stop`` ends it later).
"""

from __future__ import annotations

import os
import plistlib
import pwd
import shutil
import subprocess
import sys
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import attrs

from multiserver import DaemonPaths, MultiserverError, dial_blocking, read_origin
from multiserver_cli._commands import deadline, describe_daemon
from multiserver_cli._errors import CliError
from multiserver_cli._units import (
    DAEMON_AGENT,
    DAEMON_UNIT,
    RESTORE_AGENT,
    RESTORE_UNIT,
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

# A bound on each systemctl, loginctl or launchctl run.
TOOL_TIMEOUT = 30.0
ENABLE_LINGER = "turn it on once with: loginctl enable-linger"
LINGER_OFF = (
    "lingering is off: your service manager, and the daemon with it, stops at your last"
    f" logout, and your sessions end; {ENABLE_LINGER}"
)


def _tool(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run a service manager's tool; its status is the caller's to read."""
    try:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise CliError(f"{argv[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise CliError(f"{' '.join(argv)}: no answer within {TOOL_TIMEOUT:g} s") from None


def _checked(argv: Sequence[str]) -> str:
    """``_tool``, its failure one line: what it said."""
    done = _tool(argv)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise CliError(f"{' '.join(argv)} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


class Manager(Protocol):
    """A service manager, as the three commands use it."""

    name: str
    dir: Path

    def problem(self) -> str | None:
        """Why it cannot be used here (one line), or None."""

    def files(self, spec: ServiceSpec, paths: DaemonPaths) -> dict[Path, bytes]:
        """Every file install writes, by path."""

    def enable(self) -> None:
        """After the files are written: load, enable, start the daemon."""

    def disable(self, *, stop_daemon: bool) -> None:
        """Before the files are removed: unload, disable, and stop the
        daemon's job only if ``stop_daemon``."""

    def after_removal(self) -> None: ...

    def status(self) -> list[str]:
        """One line per job, and more if something needs doing."""


@attrs.define
class Systemd:
    """systemd user units in ``$XDG_CONFIG_HOME/systemd/user``."""

    dir: Path
    name: str = "systemd"

    @classmethod
    def for_user(cls) -> Systemd:
        config = os.environ.get("XDG_CONFIG_HOME", "")
        base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
        return cls(base / "systemd" / "user")

    def problem(self) -> str | None:
        if shutil.which("systemctl") is None:
            return "no systemd here (no systemctl)"
        done = _tool(["systemctl", "--user", "show", "--property=Version"])
        if done.returncode != 0:
            said = _first_line(done.stderr) or f"status {done.returncode}"
            return f"no systemd user manager answers here (systemctl --user: {said})"
        return None

    def files(self, spec: ServiceSpec, paths: DaemonPaths) -> dict[Path, bytes]:
        return {
            self.dir / DAEMON_UNIT: systemd_daemon_unit(spec).encode(),
            self.dir / RESTORE_UNIT: systemd_restore_unit(spec).encode(),
        }

    def enable(self) -> None:
        _checked(["systemctl", "--user", "daemon-reload"])
        # The restore runs at the next login, not now.
        _checked(["systemctl", "--user", "enable", RESTORE_UNIT])
        # Starts the daemon unless it runs (a running one is never restarted).
        _checked(["systemctl", "--user", "enable", "--now", DAEMON_UNIT])

    def disable(self, *, stop_daemon: bool) -> None:
        _checked(["systemctl", "--user", "disable", RESTORE_UNIT, DAEMON_UNIT])
        if stop_daemon:
            _checked(["systemctl", "--user", "stop", DAEMON_UNIT])

    def after_removal(self) -> None:
        _checked(["systemctl", "--user", "daemon-reload"])

    def status(self) -> list[str]:
        props = "LoadState,UnitFileState,ActiveState,SubState,MainPID,Result"
        done = _tool(
            ["systemctl", "--user", "show", f"--property={props}", DAEMON_UNIT, RESTORE_UNIT]
        )
        blocks = _show_blocks(done.stdout) if done.returncode == 0 else []
        lines = []
        for unit, block in zip((DAEMON_UNIT, RESTORE_UNIT), [*blocks, {}, {}], strict=False):
            lines.append(f"{unit}: {_unit_state(block, self.dir / unit)}")
        lines.append(linger_line(self.linger()))
        return lines

    def linger(self) -> bool | None:
        """Whether logind keeps this user's manager running past logout."""
        try:
            done = _tool(
                ["loginctl", "show-user", str(os.getuid()), "--property=Linger", "--value"]
            )
        except CliError:
            return None
        answer = done.stdout.strip()
        return {"yes": True, "no": False}.get(answer) if done.returncode == 0 else None


def linger_line(linger: bool | None) -> str:
    if linger is True:
        return "lingering: on (the daemon outlives your logout)"
    if linger is False:
        return LINGER_OFF
    return f"lingering: unknown (loginctl did not say); the daemon outlives your logout only with it: {ENABLE_LINGER}"


def _show_blocks(text: str) -> list[dict[str, str]]:
    """``systemctl show`` of several units: one block of KEY=VALUE each."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, _, value = line.partition("=")
        blocks[-1][key] = value
    return [b for b in blocks if b]


def _unit_state(block: dict[str, str], path: Path) -> str:
    if not path.exists():
        return "not installed"
    if not block or block.get("LoadState") == "not-found":
        return f"written ({path}), not loaded: systemctl --user daemon-reload"
    state = f"{block.get('UnitFileState', '?')}, {block.get('ActiveState', '?')}"
    state += f" ({block.get('SubState', '?')})"
    if block.get("MainPID", "0") not in ("", "0"):
        state += f", pid {block['MainPID']}"
    if block.get("Result", "success") != "success":
        state += f", last result: {block['Result']}"
    return state


@attrs.define
class Launchd:
    """launchd agents in ``~/Library/LaunchAgents``."""

    dir: Path
    name: str = "launchd"

    @classmethod
    def for_user(cls) -> Launchd:
        return cls(Path.home() / "Library" / "LaunchAgents")

    @property
    def domain(self) -> str:
        return f"gui/{os.getuid()}"

    def problem(self) -> str | None:
        return None if shutil.which("launchctl") else "no launchd here (no launchctl)"

    def files(self, spec: ServiceSpec, paths: DaemonPaths) -> dict[Path, bytes]:
        restore_log = paths.state_dir / "restore.log"
        return {
            self.dir / f"{DAEMON_AGENT}.plist": plistlib.dumps(
                launchd_daemon_agent(spec, paths.log)
            ),
            self.dir / f"{RESTORE_AGENT}.plist": plistlib.dumps(
                launchd_restore_agent(spec, restore_log)
            ),
        }

    def _loaded(self, label: str) -> subprocess.CompletedProcess[str]:
        return _tool(["launchctl", "print", f"{self.domain}/{label}"])

    def enable(self) -> None:
        for label in (DAEMON_AGENT, RESTORE_AGENT):
            _checked(["launchctl", "enable", f"{self.domain}/{label}"])
        # The daemon now, unless loaded (a running one is never restarted);
        # the restore at the next login, when launchd loads the agents.
        if self._loaded(DAEMON_AGENT).returncode != 0:
            _checked(
                ["launchctl", "bootstrap", self.domain, str(self.dir / f"{DAEMON_AGENT}.plist")]
            )

    def disable(self, *, stop_daemon: bool) -> None:
        labels = [RESTORE_AGENT, DAEMON_AGENT] if stop_daemon else [RESTORE_AGENT]
        for label in labels:
            if self._loaded(label).returncode == 0:
                _checked(["launchctl", "bootout", f"{self.domain}/{label}"])

    def after_removal(self) -> None:
        pass

    def status(self) -> list[str]:
        lines = []
        for label in (DAEMON_AGENT, RESTORE_AGENT):
            path = self.dir / f"{label}.plist"
            if not path.exists():
                lines.append(f"{label}: not installed")
                continue
            done = self._loaded(label)
            if done.returncode != 0:
                lines.append(f"{label}: installed ({path}), not loaded (it is at the next login)")
                continue
            fields = dict(
                (k.strip(), v.strip())
                for k, _, v in (ln.partition(" = ") for ln in done.stdout.splitlines())
                if v
            )
            state = f"loaded, {fields.get('state', '?')}"
            if "pid" in fields:
                state += f", pid {fields['pid']}"
            if fields.get("last exit code", "0") not in ("0", "(never exited)"):
                state += f", last exit code {fields['last exit code']}"
            lines.append(f"{label}: {state}")
        return lines


def service_manager() -> Manager:
    return Launchd.for_user() if sys.platform == "darwin" else Systemd.for_user()


def service_spec(args: Namespace) -> ServiceSpec:
    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = None
    return ServiceSpec(
        launcher=launcher(),
        daemon=args.daemon,
        settings=settings_from(os.environ),
        shell=login_shell(shell or os.environ.get("SHELL")),
        restore_timeout=args.timeout,
    )


@attrs.frozen
class _Running:
    """The daemon that answers on the service's socket now."""

    pid: int
    service: bool  # started by the service (its lock file says so)
    sessions: int
    line: str  # describe_daemon's


def _running(paths: DaemonPaths) -> _Running | None:
    """The daemon on ``paths`` (never started here), or None."""
    try:
        with dial_blocking(paths.socket, children=False, deadline=deadline()) as client:
            origin = read_origin(paths.lock)
            service = (
                origin is not None
                and origin.instance_id == client.instance_id
                and origin.started == "service"
            )
            return _Running(client.daemon_pid, service, len(client.list()), describe_daemon(client))
    except MultiserverError:
        return None


def cmd_service(args: Namespace) -> int:
    manager = service_manager()
    paths = DaemonPaths.for_number(args.daemon)
    if args.action == "install":
        return _install(manager, service_spec(args), paths)
    if args.action == "uninstall":
        return _uninstall(manager, paths)
    return _status(manager, paths)


def _install(manager: Manager, spec: ServiceSpec, paths: DaemonPaths) -> int:
    problem = manager.problem()
    if problem is not None:
        print(
            f"multiserver: {problem}; to restore at login all the same, add these lines to"
            " ~/.profile (the daemon is then started on demand):",
            file=sys.stderr,
        )
        print(profile_snippet(spec), end="")
        return 1
    for path, data in manager.files(spec, paths).items():
        _write(path, data)
    manager.enable()
    if isinstance(manager, Systemd):
        jobs = f"{DAEMON_UNIT} and {RESTORE_UNIT}"
    else:
        jobs = f"the agents {DAEMON_AGENT} and {RESTORE_AGENT}"
    print(
        f"installed {jobs} in {manager.dir}: daemon {spec.daemon} stays up, started by"
        f" {manager.name}, and `multiserver restore --timeout {spec.restore_timeout:g}` runs"
        " at login"
    )
    if isinstance(manager, Systemd) and (linger := manager.linger()) is not True:
        print(linger_line(linger))
    running = _running(paths)
    if running is not None and not running.service:
        print(
            f"{running.line}, with {running.sessions} session(s): the service's daemon takes"
            " over when it exits (idle, with no session left)"
        )
    return 0


def _uninstall(manager: Manager, paths: DaemonPaths) -> int:
    installed = [p for p in manager.files(_any_spec(), paths) if p.exists()]
    if not installed:
        print(f"nothing to remove: no multiserver service in {manager.dir}")
        return 0
    running = _running(paths)
    keep = running is not None and running.service and running.sessions > 0
    if manager.problem() is None:
        manager.disable(stop_daemon=not keep)
    for path in installed:
        path.unlink(missing_ok=True)
    if manager.problem() is None:
        manager.after_removal()
    print(f"removed {', '.join(p.name for p in installed)} from {manager.dir}")
    if keep:
        assert running is not None
        print(
            f"the service's daemon (pid {running.pid}) keeps running with its"
            f" {running.sessions} session(s), and does not start again at login;"
            " `multiserver stop` ends it once they are done"
        )
    return 0


def _status(manager: Manager, paths: DaemonPaths) -> int:
    problem = manager.problem()
    if problem is not None:
        print(f"{problem}: no service; `multiserver service install` says what to do instead")
    else:
        for line in manager.status():
            print(line)
    running = _running(paths)
    if running is None:
        print(f"daemon {paths.number}: not running ({paths.socket})")
    else:
        print(f"{running.line}; {running.sessions} session(s)")
    return 0


def _any_spec() -> ServiceSpec:
    """Only the file names matter (uninstall)."""
    return ServiceSpec(launcher=("multiserver",))


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a unit half-written is worse than none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
