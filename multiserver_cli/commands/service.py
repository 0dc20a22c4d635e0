"""``multiserver service install | uninstall | status``: the daemon as a
service of the user's service manager (systemd on Linux, launchd on macOS),
and ``multiserver restore`` at login (an earlier version's scrollback
saver is retired: the daemon keeps what sessions show). What is written
is ``service/_units``'s; the manager, and its tool, ``service/_managers``'s
(the seam between the two); here the command says what it did.

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
import sys
from argparse import ArgumentParser, Namespace

from multiserver_cli._args import SettingFlag
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from multiserver import DaemonPaths
    from multiserver_cli.service._managers import Manager
    from multiserver_cli.service._units import ServiceSpec

NAME = "service"
HELP = (
    "run the daemon as a service of your login (systemd user units; launchd agents on"
    " macOS) that stays up, and `multiserver restore` at login"
)
EXAMPLE = "multiserver service install"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=["install", "uninstall", "status"],
        help="install: write and enable the units and start the daemon; uninstall: remove them"
        " (never ending a session); status: what is installed and whether it runs",
    )
    p.add_argument(
        "--timeout",
        action=SettingFlag,
        setting="restore_timeout",  # the restore's at login
        default=5.0,
        metavar="S",
        help="install: the deadline of the restore at login, in seconds (default 5)",
    )


def run(args: Namespace) -> int:
    from multiserver import DaemonPaths
    from multiserver_cli.service._managers import service_manager

    manager = service_manager()
    paths = DaemonPaths.for_number(args.daemon)
    if args.action == "install":
        return _install(manager, service_spec(args), paths)
    if args.action == "uninstall":
        return _uninstall(manager, paths)
    return _status(manager, paths)


def service_spec(args: Namespace) -> ServiceSpec:
    import pwd

    from multiserver_cli.service._units import ServiceSpec, launcher, login_shell, settings_from

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


def _install(manager: Manager, spec: ServiceSpec, paths: DaemonPaths) -> int:
    from multiserver_cli import _running
    from multiserver_cli.service._managers import Systemd, linger_line
    from multiserver_cli.service._units import profile_snippet

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
    retired = manager.retired()
    manager.retire()  # an earlier version's saver: the daemon keeps what sessions show
    for path in retired:
        path.unlink(missing_ok=True)
    manager.enable()
    print(
        f"installed {manager.jobs()} in {manager.dir}: daemon {spec.daemon} stays up, started"
        f" by {manager.name}, and `multiserver restore --timeout {spec.restore_timeout:g}`"
        " runs at login"
    )
    if retired:
        print(f"removed {', '.join(p.name for p in retired)}: the daemon keeps what sessions show")
    if isinstance(manager, Systemd) and (linger := manager.linger()) is not True:
        print(linger_line(linger))
    running = _running.running(paths)
    if running is not None and not running.service:
        print(
            f"{running.line}, with {running.sessions} session(s): the service's daemon takes"
            " over when it exits (idle, with no session left)"
        )
    return 0


def _uninstall(manager: Manager, paths: DaemonPaths) -> int:
    from multiserver_cli import _running

    installed = [p for p in manager.files(_any_spec(), paths) if p.exists()] + manager.retired()
    if not installed:
        print(f"nothing to remove: no multiserver service in {manager.dir}")
        return 0
    running = _running.running(paths)
    keep = running is not None and running.service and running.sessions > 0
    if manager.problem() is None:
        manager.retire()
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
    from multiserver_cli import _running

    problem = manager.problem()
    if problem is not None:
        print(f"{problem}: no service; `multiserver service install` says what to do instead")
    else:
        for line in manager.status():
            print(line)
    running = _running.running(paths)
    if running is None:
        print(f"daemon {paths.number}: not running ({paths.socket})")
    else:
        print(f"{running.line}; {running.sessions} session(s)")
    return 0


def _any_spec() -> ServiceSpec:
    """Only the file names matter (uninstall)."""
    from multiserver_cli.service._units import ServiceSpec

    return ServiceSpec(launcher=("multiserver",))


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a unit half-written is worse than none."""
    from multiserver.internal import write_whole

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, data)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
