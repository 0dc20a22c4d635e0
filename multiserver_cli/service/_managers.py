"""The user's service manager, as ``multiserver service`` drives it: the
one seam between systemd (Linux) and launchd (macOS).

``service_manager()`` chooses; each manager knows where its files go,
which files ``_units`` gives it, and how to load, start, stop and report
them with its own tool (``systemctl --user``, ``launchctl``). Everything
here blocks, each tool run bounded by ``TOOL_TIMEOUT``; a tool that is
missing, hangs or fails is one line (``CliError``).
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import attrs

from multiserver import DaemonPaths
from multiserver_cli._errors import CliError
from multiserver_cli.service._units import (
    DAEMON_AGENT,
    DAEMON_UNIT,
    RESTORE_AGENT,
    RESTORE_UNIT,
    RETIRED_SAVE_AGENT,
    RETIRED_SAVE_UNIT,
    ServiceSpec,
    launchd_daemon_agent,
    launchd_restore_agent,
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

    def jobs(self) -> str:
        """What install sets up, for a person."""

    def files(self, spec: ServiceSpec, paths: DaemonPaths) -> dict[Path, bytes]:
        """Every file install writes, by path."""

    def retired(self) -> list[Path]:
        """The files of an earlier version's jobs this one has not (the saver)."""

    def retire(self) -> None:
        """Stop and unload those jobs; their files are removed after."""

    def enable(self) -> None:
        """After the files are written: load and enable them; start the
        daemon (unless it runs) now, the restore at login."""

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

    def jobs(self) -> str:
        return f"{DAEMON_UNIT} and {RESTORE_UNIT}"

    def files(self, spec: ServiceSpec, paths: DaemonPaths) -> dict[Path, bytes]:
        return {
            self.dir / DAEMON_UNIT: systemd_daemon_unit(spec).encode(),
            self.dir / RESTORE_UNIT: systemd_restore_unit(spec).encode(),
        }

    def retired(self) -> list[Path]:
        """What an earlier version installed and this one does not (the saver)."""
        return [p for p in [self.dir / RETIRED_SAVE_UNIT] if p.exists()]

    def retire(self) -> None:
        """Stop and disable what ``retired`` lists (its files are the caller's)."""
        if self.retired():
            _tool(["systemctl", "--user", "disable", "--now", RETIRED_SAVE_UNIT])

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
        units = (DAEMON_UNIT, RESTORE_UNIT)
        done = _tool(["systemctl", "--user", "show", f"--property={props}", *units])
        blocks = _show_blocks(done.stdout) if done.returncode == 0 else []
        blocks += [{}] * (len(units) - len(blocks))
        lines = [
            f"{unit}: {_unit_state(block, self.dir / unit)}"
            for unit, block in zip(units, blocks, strict=False)
        ]
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
    return (
        "lingering: unknown (loginctl did not say); the daemon outlives your logout only"
        f" with it: {ENABLE_LINGER}"
    )


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

    def jobs(self) -> str:
        return f"the agents {DAEMON_AGENT} and {RESTORE_AGENT}"

    def files(self, spec: ServiceSpec, paths: DaemonPaths) -> dict[Path, bytes]:
        logs = paths.state_dir
        return {
            self.dir / f"{DAEMON_AGENT}.plist": plistlib.dumps(
                launchd_daemon_agent(spec, paths.log)
            ),
            self.dir / f"{RESTORE_AGENT}.plist": plistlib.dumps(
                launchd_restore_agent(spec, logs / "restore.log")
            ),
        }

    def retired(self) -> list[Path]:
        """What an earlier version installed and this one does not (the saver)."""
        return [p for p in [self.dir / f"{RETIRED_SAVE_AGENT}.plist"] if p.exists()]

    def retire(self) -> None:
        """Unload what ``retired`` lists (its files are the caller's)."""
        if self.retired() and self._loaded(RETIRED_SAVE_AGENT).returncode == 0:
            _tool(["launchctl", "bootout", f"{self.domain}/{RETIRED_SAVE_AGENT}"])

    def _loaded(self, label: str) -> subprocess.CompletedProcess[str]:
        return _tool(["launchctl", "print", f"{self.domain}/{label}"])

    def enable(self) -> None:
        for label in (DAEMON_AGENT, RESTORE_AGENT):
            _checked(["launchctl", "enable", f"{self.domain}/{label}"])
        # The daemon now (unless loaded: a running one is never restarted);
        # the restore at the next login, when launchd loads the agents.
        if self._loaded(DAEMON_AGENT).returncode != 0:
            _checked(
                ["launchctl", "bootstrap", self.domain, str(self.dir / f"{DAEMON_AGENT}.plist")]
            )

    def disable(self, *, stop_daemon: bool) -> None:
        labels = [RESTORE_AGENT]
        if stop_daemon:
            labels.append(DAEMON_AGENT)
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
    """The seam: launchd on macOS, systemd elsewhere."""
    return Launchd.for_user() if sys.platform == "darwin" else Systemd.for_user()
