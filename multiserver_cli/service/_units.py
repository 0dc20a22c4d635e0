"""What ``multiserver service install`` writes, as pure functions: the
systemd user units, the launchd agents, and the shell profile lines where
neither runs. The ``service`` command (``commands/service.py``) writes them;
``_managers`` drives systemctl or launchctl.

Three jobs, on each system:

- **The daemon** (``multiserver.service``; the agent ``multiserver.daemon``):
  ``multiserver daemon --service``, which never exits when idle. Started
  by the user's service manager, it is no process of the login session, so
  the session's end does not touch it (logind's ``KillUserProcesses``
  kills the session's processes; the daemon is the user manager's, which
  lives on past logout when lingering is on: ``loginctl enable-linger``).
  ``KillMode=process``: stopping or restarting the unit signals the daemon
  alone, never the sessions in its cgroup (their fate is the daemon's:
  those nobody holds end when it closes their terminals).
  ``systemctl --user reload multiserver`` runs ``multiserver upgrade``:
  after an upgrade of the installed code, the daemon takes it in place,
  keeping its pid (the unit's main process) and every session.
- **The restore** (``multiserver-restore.service``; ``multiserver.restore``):
  ``multiserver restore --timeout 5`` once at login, a unit of its own
  rather than the daemon unit's ``ExecStartPost``, because a failed
  ``ExecStartPost`` fails the daemon's unit (and stops the daemon that
  holds every other session), because it would run again at every restart
  of the daemon, and so that it has a status and a journal of its own.
  ``Type=oneshot``, ordered after the daemon unit (``Type=notify``: it is
  listening by then, so relaunches go to it instead of starting a daemon
  on demand). The login waits for the user manager's first units: the
  restore's deadline is short (5 s), and ``TimeoutStartSec`` caps what it
  may take at all. It runs through the user's login shell (``sh -lc``),
  so that relaunched sessions get the environment a login gives (``PATH``
  from ``~/.profile``...), not the service manager's bare one.
No saver: what sessions show, each daemon keeps on disk as it comes. The
saver of earlier versions (``multiserver-save.service``;
``multiserver.save``) is retired: ``install`` stops and removes it,
``uninstall`` too.

Both get the ``MULTISERVER_*`` settings of the shell that installs them
(the runtime and state dirs above all: a daemon that looked elsewhere
would not be found), except ``MULTISERVER_IDLE_EXIT``, which the
service's daemon ignores.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from multiserver.internal import escaped
from multiserver_cli._errors import CliError
from multiserver_cli._launcher import launcher as launcher

DAEMON_UNIT = "multiserver.service"
RESTORE_UNIT = "multiserver-restore.service"
RETIRED_SAVE_UNIT = "multiserver-save.service"  # an earlier version's saver
DAEMON_AGENT = "multiserver.daemon"
RESTORE_AGENT = "multiserver.restore"
RETIRED_SAVE_AGENT = "multiserver.save"
# The restore's own deadline at login, and what systemd allows the whole
# unit (a login shell's profile, the interpreter, the deadline, the sweep).
RESTORE_TIMEOUT = 5.0
RESTORE_START_LIMIT = 30
# Shells whose `-lc 'exec "$0" "$@"' ARGS` runs ARGS after the login profile.
POSIX_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "yash"})
HEADER = "Written by `multiserver service install`; `multiserver service uninstall` removes it."
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_+=:,./@-]+$")


@attrs.frozen
class ServiceSpec:
    """What the service runs: ``launcher`` is how to run ``multiserver``
    (its script, or ``python -m multiserver_cli``); ``settings`` are the
    ``MULTISERVER_*`` variables passed on."""

    launcher: tuple[str, ...]
    daemon: int = 1
    settings: tuple[tuple[str, str], ...] = ()
    shell: str = "/bin/sh"
    restore_timeout: float = RESTORE_TIMEOUT

    def daemon_argv(self) -> list[str]:
        return [*self.launcher, "--daemon", str(self.daemon), "daemon", "--service"]

    def upgrade_argv(self) -> list[str]:
        """What ``systemctl --user reload`` runs: the daemon takes the
        installed code in place (its sessions stay)."""
        return [*self.launcher, "--daemon", str(self.daemon), "upgrade"]

    def restore_argv(self) -> list[str]:
        """The restore, through a login shell (its profile read first)."""
        restore = [*self.launcher, "restore", "--timeout", f"{self.restore_timeout:g}"]
        return [self.shell, "-lc", 'exec "$0" "$@"', *restore]

    def environment(self) -> dict[str, str]:
        """The settings, and the daemon relaunched sessions go to."""
        return {**dict(self.settings), "MULTISERVER_DAEMON": str(self.daemon)}


def settings_from(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``MULTISERVER_*`` variables a service passes on, sorted."""
    skip = {"MULTISERVER_IDLE_EXIT", "MULTISERVER_DAEMON"}
    return tuple(
        sorted((k, v) for k, v in environ.items() if k.startswith("MULTISERVER_") and k not in skip)
    )


def login_shell(shell: str | None) -> str:
    """The user's shell when it takes ``-lc`` as ``sh`` does, else /bin/sh."""
    if shell and os.path.isabs(shell) and Path(shell).name in POSIX_SHELLS:
        return shell
    return "/bin/sh"


# --- systemd ---------------------------------------------------------------------------


class UnwritableUnit(CliError):
    """A word that no systemd unit can carry as it is (one line)."""


# systemd.syntax(7), "Quoting": in double quotes a C escape (\\n, \\", \\\\,
# \\xNN) is undone, so no byte of a value ever ends its line or its quotes.
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def systemd_word(word: str, *, expands: bool = True) -> str:
    """One word of a unit's setting: as is when plain, else in double
    quotes with C escapes for ``\\``, ``"`` and every control character;
    ``%`` (specifiers) doubled, and ``$`` too where the setting ``expands``
    variables (a command line's arguments do; ``Environment=`` and the
    executable do not). UnwritableUnit for what systemd cannot be given:
    a NUL, or bytes that are not UTF-8."""
    # escaped() changes exactly the strings whose bytes are not UTF-8.
    if "\0" in word or escaped(word) != word:
        raise UnwritableUnit(
            f"cannot write {escaped(word)!r} in a systemd unit: it holds a NUL or bytes that"
            " are not UTF-8"
        )
    if _SAFE_WORD.match(word):
        return word
    out = []
    for ch in word:
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif ch < " " or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        elif ch == "%":
            out.append("%%")
        elif ch == "$" and expands:
            out.append("$$")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def systemd_command(argv: Sequence[str]) -> str:
    """A command line (``ExecStart=``), per systemd.service(5): systemd
    refuses an executable whose path holds a quote, a backslash or a
    control character (UnwritableUnit, saying so), and never expands
    ``$`` in it (``$$`` would stay two), while it does in argv[0]: an
    executable with a ``$`` is given apart from its argv[0] (``@``)."""
    exe, *rest = argv
    if any(ch in "\"'\\" or ch < " " or ch == "\x7f" for ch in exe):
        raise UnwritableUnit(
            f"cannot write a systemd unit that runs {escaped(exe)!r}: systemd refuses an"
            " executable whose path holds a quote, a backslash or a control character"
            " (install multiserver where its path has none)"
        )
    words = [systemd_word(w) for w in rest]
    if "$" in exe:
        return " ".join(["@" + systemd_word(exe, expands=False), systemd_word(exe), *words])
    return " ".join([systemd_word(exe), *words])


def _environment_lines(env: Mapping[str, str]) -> list[str]:
    return [
        f"Environment={systemd_word(f'{k}={v}', expands=False)}" for k, v in sorted(env.items())
    ]


def systemd_daemon_unit(spec: ServiceSpec) -> str:
    lines = [
        f"# {HEADER}",
        "[Unit]",
        f"Description=multiserver daemon {spec.daemon}: terminal sessions that outlive their"
        " terminal",
        "",
        "[Service]",
        # Ready once it listens (or waits for a daemon started on demand).
        "Type=notify",
        "NotifyAccess=main",
        "ExecStart=" + systemd_command(spec.daemon_argv()),
        # A reload is an upgrade in place: the same pid, every session kept.
        "ExecReload=" + systemd_command(spec.upgrade_argv()),
        "WorkingDirectory=/",
        *_environment_lines(spec.environment()),
        # The sessions are the daemon's children, in this unit's cgroup:
        # stopping the unit signals the daemon, never them.
        "KillMode=process",
        "Restart=on-failure",
        "RestartSec=2",
        "",
        "[Install]",
        "WantedBy=default.target",
    ]
    return "\n".join(lines) + "\n"


def systemd_restore_unit(spec: ServiceSpec) -> str:
    lines = [
        f"# {HEADER}",
        "[Unit]",
        "Description=multiserver: bring back the saved sessions at login",
        f"Wants={DAEMON_UNIT}",
        f"After={DAEMON_UNIT}",
        "",
        "[Service]",
        "Type=oneshot",
        "ExecStart=" + systemd_command(spec.restore_argv()),
        # A login shell reads the profile where a login would: at home.
        "WorkingDirectory=~",
        *_environment_lines(spec.environment()),
        f"TimeoutStartSec={RESTORE_START_LIMIT}",
        "",
        "[Install]",
        "WantedBy=default.target",
    ]
    return "\n".join(lines) + "\n"


# --- launchd ---------------------------------------------------------------------------


def launchd_daemon_agent(spec: ServiceSpec, log: Path) -> dict[str, Any]:
    """The daemon's launchd agent (a plist's dict): started at login, again
    if it fails; its process group is not killed when it exits
    (``AbandonProcessGroup``, as ``KillMode=process``)."""
    agent: dict[str, Any] = {
        "Label": DAEMON_AGENT,
        "ProgramArguments": spec.daemon_argv(),
        "WorkingDirectory": "/",
        "EnvironmentVariables": spec.environment(),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "AbandonProcessGroup": True,
        "ProcessType": "Interactive",
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
    }
    return agent


def launchd_restore_agent(spec: ServiceSpec, log: Path) -> dict[str, Any]:
    """The restore's agent: once at login (when the agents are loaded)."""
    return {
        "Label": RESTORE_AGENT,
        "ProgramArguments": spec.restore_argv(),
        "EnvironmentVariables": spec.environment(),
        "RunAtLoad": True,
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
    }


# --- neither ---------------------------------------------------------------------------


def profile_snippet(spec: ServiceSpec) -> str:
    """Lines for ~/.profile (read by login shells): the restore, in
    interactive ones only (not in a script's ``sh -l``)."""
    restore = shlex.join([*spec.launcher, "restore", "--timeout", f"{spec.restore_timeout:g}"])
    return (
        "# multiserver: bring back the saved sessions at login (interactive login shells)\n"
        f"case $- in *i*) {restore} ;; esac\n"
    )
