"""Running the daemon process: in the foreground (by hand, tests), for a
service manager (``service=True``: systemd, launchd), or detached (started
on demand by a client, ``python -m multiserver``). Each daemon writes which
in its lock file (``_origin.py``).

Detached start, as the client drives it (see ``_start.py``)::

    client: take lock -> unlink stale socket -> posix_spawn(setsid) ------+
    daemon (session leader): fork, exit --------------------------------+ |
    daemon (grandchild): chdir /, umask 077, stdio -> /dev/null + log,  | |
        close every fd but lock + ready pipe, bind, listen,             | |
        write "ready" to the pipe -> client connects                    v v

The ready pipe carries one line: ``R<pid>`` (listening), ``L<reason>``
(another daemon answers on the socket: the client connects to it) or
``E<reason>`` (failed).

The lock is held for the daemon's whole life and taken before a stale socket
is unlinked; the daemon keeps lock and socket in place while it runs, and on
the way out unlinks them, if they are still its own, while it still holds
the lock (``_files.py``).

The service's daemon never exits when idle. It starts at login, maybe while
a daemon started on demand runs (with sessions, that one lives on): it
waits for that one's lock rather than fail and be restarted over and over,
and tells the service manager it is up meanwhile (``sd_notify``: else
systemd would hold the login's other units, the restore among them, until
its start timed out).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from multiserver._durable import instance_dir
from multiserver._errors import DaemonAlreadyRunning
from multiserver.daemon._files import DaemonFiles
from multiserver.daemon._origin import DaemonOrigin, Started, read_origin
from multiserver.daemon._server import SERVER_NAME, Daemon
from multiserver.daemon._snapshot import Snapshot, SnapshotError, blob_view
from multiserver.daemon._upgrade import SnapshotFile
from multiserver.settings._config import DaemonConfig
from multiserver.settings._settings import DAEMON_FIELDS, daemon_options, option
from multiserver.system import _platform
from multiserver.system._paths import DaemonPaths, LockBusy, try_lock, wait_lock

log = logging.getLogger("multiserver.daemon")


def _setup_logging() -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s multiserver[%(process)d] %(levelname)s %(message)s",
    )


async def _run(
    paths: DaemonPaths,
    config: DaemonConfig,
    lock_fd: int,
    ready: Callable[[], None],
    started: Started,
) -> None:
    """Serve on ``paths`` holding the lock ``lock_fd`` (taken over). Raises
    DaemonAlreadyRunning if a live daemon answers on the socket path."""
    found, limit = _platform.raise_nofile_limit()
    daemon = Daemon(config, child_nofile=found)
    daemon.output_dir = instance_dir(paths.state_dir, daemon.instance_id)
    origin = DaemonOrigin(
        os.getpid(),
        daemon.instance_id,
        started,
        config.idle_exit,
        started_at=time.time(),
        open_files=limit,
    )
    try:
        files = DaemonFiles.bind(paths, lock_fd, origin)
    except BaseException:
        os.close(lock_fd)
        raise
    # What start-up allocated and freed: 0.1 MiB, 1 MiB when modules were
    # compiled from source (no bytecode cache).
    _platform.release_free_memory()
    log.info(
        "listening on %s (instance %s, %s; %d open files at most, its children %d)",
        paths.socket,
        daemon.instance_id,
        origin.lifetime(),
        limit,
        found,
    )
    await _serve(daemon, files, ready)


async def _serve(
    daemon: Daemon,
    files: DaemonFiles,
    ready: Callable[[], None],
    resume: SnapshotFile | None = None,
) -> None:
    """Serve on ``files`` until stopped (a signal, idle, a Shutdown); then
    unlink socket and lock if they are still its own."""
    daemon.files = files
    try:
        async with trio.open_nursery() as nursery:

            async def on_signals() -> None:
                with trio.open_signal_receiver(
                    signal.SIGTERM, signal.SIGINT, signal.SIGHUP
                ) as sigs:
                    async for signum in sigs:
                        if signum == signal.SIGHUP:
                            continue  # no terminal to lose; keep serving
                        log.info("signal %d: exiting", signum)
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(on_signals)
            await nursery.start(functools.partial(daemon.serve, files.listener, resume=resume))
            await nursery.start(files.watch)
            ready()
            await daemon.wait_stopped()
            nursery.cancel_scope.cancel()
    finally:
        # Unlinks only what is still its own, while the lock is still held.
        files.close()
        log.info("stopped")


def run_foreground(
    paths: DaemonPaths,
    config: DaemonConfig,
    *,
    on_ready: Callable[[], None] | None = None,
    service: bool = False,
) -> None:
    """Run the daemon in this process until it stops. Raises LockBusy if a
    daemon holds the lock, DaemonAlreadyRunning if one answers on the
    socket path (its lock file was deleted), UnsafeDirectory if the dirs are
    unsafe.

    ``service``: run as the service manager's daemon: never exit when idle
    (whatever ``config`` says), wait for a daemon that holds the lock to
    exit (instead of LockBusy), and tell the service manager when it is up
    (``sd_notify``, where ``$NOTIFY_SOCKET`` is set).
    """
    # Never hold the directory this was started from (a removable disk
    # would stay busy for as long as the daemon lives); its paths are
    # absolute.
    os.chdir("/")
    paths.prepare()
    if service:
        config = attrs.evolve(config, idle_exit=None)
    try:
        lock_fd = try_lock(paths.lock)
    except LockBusy:
        if not service:
            raise
        other = read_origin(paths.lock)
        who = f" (pid {other.pid}, {other.lifetime()})" if other else ""
        sd_notify(f"READY=1\nSTATUS=waiting for the daemon on {paths.socket}{who} to exit")
        log.info("waiting for the daemon on %s%s to exit", paths.socket, who)
        lock_fd = wait_lock(paths.lock)

    def ready() -> None:
        if service:
            sd_notify(f"READY=1\nSTATUS=listening on {paths.socket}")
        if on_ready is not None:
            on_ready()

    trio.run(_run, paths, config, lock_fd, ready, "service" if service else "foreground")


async def _resumed(paths: DaemonPaths, config: DaemonConfig, file: SnapshotFile) -> None:
    """The new code after an upgrade: take over the daemon's files, children
    and connections from the snapshot ``file`` (closed once taken over:
    nothing of it is kept), and serve."""
    snapshot = file.snapshot
    found, limit = _platform.raise_nofile_limit()
    children = found if snapshot.child_nofile is None else snapshot.child_nofile
    daemon = Daemon(config, instance_id=snapshot.instance_id, child_nofile=children)
    daemon.output_dir = instance_dir(paths.state_dir, daemon.instance_id)
    started = (
        snapshot.started
        if snapshot.started in ("on-demand", "service", "foreground")
        else "on-demand"
    )
    origin = DaemonOrigin(
        os.getpid(),
        snapshot.instance_id,
        started,  # type: ignore[arg-type]  # checked just above
        config.idle_exit,
        started_at=snapshot.started_at,
        upgraded_at=snapshot.upgraded_at,
        open_files=limit,
    )
    files = DaemonFiles.adopt(
        paths, snapshot.lock, snapshot.listener, os.stat_result(snapshot.socket_stat), origin
    )
    del snapshot  # the file's, closed once taken over

    def ready() -> None:
        if started == "service":
            sd_notify(f"READY=1\nSTATUS=listening on {paths.socket} ({SERVER_NAME})")

    await _serve(daemon, files, ready, file)


def _config_of(snapshot: Snapshot) -> DaemonConfig:
    """The daemon's settings as the snapshot has them; a setting this code
    does not know is left out, one it has and the snapshot not is its default."""
    known = attrs.fields_dict(DaemonConfig)
    try:
        return DaemonConfig(**{k: v for k, v in snapshot.config.items() if k in known})
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"the daemon's settings do not read: {exc}") from None


def _check(snapshot: Snapshot, area: memoryview) -> None:
    """What the new code checks before it is exec'd: settings, paths and
    every blob readable. Raises SnapshotError."""
    _config_of(snapshot)
    DaemonPaths.for_socket(Path(snapshot.socket), Path(snapshot.state_dir))
    if len(snapshot.socket_stat) != 10:
        raise SnapshotError("the socket's stat has not 10 fields")
    blobs = [c.buffer for c in snapshot.children] + [snapshot.events]
    for peer in snapshot.peers:
        blobs += [peer.unread, *(out.frame for out in peer.outbox)]
    for ref in blobs:
        blob_view(area, ref).release()  # there, not copied


def check_main() -> None:
    """``--check-snapshot``: read a snapshot on stdin; print this code's
    server name if it can serve it, else one line on stderr, exit 1."""
    try:
        file = SnapshotFile.read(0)
        try:
            _check(file.snapshot, file.area)
        finally:
            file.close()
    except (SnapshotError, OSError) as exc:
        print(f"cannot take over: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print(SERVER_NAME)


def resume_main(fd_text: str) -> None:
    """``--resume FD``: the process after the upgrade's exec."""
    _setup_logging()
    try:
        fd = int(fd_text)
        try:
            file = SnapshotFile.read(fd)  # mapped: its pages go when it is closed
        finally:
            os.close(fd)
        config = _config_of(file.snapshot)
        _check(file.snapshot, file.area)
        paths = DaemonPaths.for_socket(Path(file.snapshot.socket), Path(file.snapshot.state_dir))
    except (ValueError, OSError, SnapshotError) as exc:
        log.error("cannot go on after the upgrade: %s", exc)
        os._exit(1)
    try:
        trio.run(_resumed, paths, config, file)
    except BaseException:
        log.exception("daemon failed after the upgrade")
        os._exit(1)
    os._exit(0)


def sd_notify(state: str) -> None:
    """Tell systemd ``state`` (``READY=1``, ``STATUS=...``) through
    ``$NOTIFY_SOCKET``; nothing where it is not set (launchd, by hand).
    Best effort: a service manager that does not listen costs nothing."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or address[0] not in "/@":
        return
    if address[0] == "@":
        address = "\0" + address[1:]  # the abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.sendto(state.encode(), address)
        except OSError as exc:
            log.warning("cannot notify the service manager at %s: %s", address, exc)


@attrs.frozen
class _Args:
    """The command line ``start_daemon`` writes for the detached daemon."""

    socket: Path
    ready_fd: int
    lock_fd: int
    state_dir: Path | None
    buffer_limit: int
    idle_exit: float | None
    frame_timeout: float
    max_connections: int
    share_size: str

    USAGE = (
        "usage: python -m multiserver --socket PATH --ready-fd N --lock-fd N"
        " [--state-dir DIR] [--buffer-limit BYTES] [--idle-exit SECONDS|never]"
        " [--frame-timeout SECONDS] [--max-connections N] [--share-size latest|smallest]"
    )

    @classmethod
    def parse(cls, argv: list[str]) -> _Args:
        """``--name value`` pairs; raises ValueError with one line. (No
        argparse: it would stay in a process that lives for days, 0.35 MiB
        of it, to read six options from our own client.)"""
        names = argv[::2]
        opts = dict(zip(names, argv[1::2], strict=False))
        known = {"--socket", "--ready-fd", "--lock-fd", "--state-dir", *map(option, DAEMON_FIELDS)}
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(f"unknown option {bad[0]}")
        if len(argv) % 2 or len(opts) != len(names):
            raise ValueError("each option is given once, with a value")
        settings = daemon_options(opts)  # SettingError: "--idle-exit nan: must be ..."
        missing = [n for n in ("--socket", "--ready-fd", "--lock-fd") if n not in opts]
        if missing:
            raise ValueError(f"missing {missing[0]}")
        try:
            return cls(
                socket=Path(opts["--socket"]),
                ready_fd=int(opts["--ready-fd"]),
                lock_fd=int(opts["--lock-fd"]),
                state_dir=Path(opts["--state-dir"]) if "--state-dir" in opts else None,
                **settings,  # type: ignore[arg-type]
            )
        except ValueError as exc:
            raise ValueError(f"bad option value: {exc}") from None


def _daemonized(args: _Args) -> None:
    """The detached daemon: second fork, clean process state, then serve."""
    if os.fork() != 0:
        os._exit(0)  # the session leader goes; the grandchild can never get a tty
    ready_fd, lock_fd = args.ready_fd, args.lock_fd
    os.set_inheritable(ready_fd, False)
    os.set_inheritable(lock_fd, False)
    paths = DaemonPaths.for_socket(args.socket, args.state_dir)
    try:
        os.chdir("/")
        os.umask(0o077)
        null = os.open(os.devnull, os.O_RDWR)
        logfd = os.open(paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(logfd, 1)
        os.dup2(logfd, 2)
        keep = sorted({ready_fd, lock_fd})
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1]) if len(keep) > 1 else None
        os.closerange(keep[-1] + 1, os.sysconf("SC_OPEN_MAX"))
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        _setup_logging()
        config = DaemonConfig(
            buffer_limit=args.buffer_limit,
            idle_exit=args.idle_exit,
            frame_timeout=args.frame_timeout,
            hello_timeout=args.frame_timeout,
            max_connections=args.max_connections,
            share_size=args.share_size,
        )
    except Exception as exc:
        _report(ready_fd, f"E{exc}")
        os._exit(1)

    def ready() -> None:
        _report(ready_fd, f"R{os.getpid()}")

    try:
        trio.run(_run, paths, config, lock_fd, ready, "on-demand")
    except DaemonAlreadyRunning as exc:
        log.error("%s", exc)
        _report(ready_fd, f"L{exc}")  # the client connects to that one
        os._exit(1)
    except BaseException as exc:
        log.exception("daemon failed")
        _report(ready_fd, f"E{exc}")
        os._exit(1)
    os._exit(0)


def _report(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode()[:4000] + b"\n")
        os.close(fd)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check-snapshot"]:
        check_main()
        return
    if len(args) in (2, 4) and args[0] == "--resume" and args[2:3] in ([], ["--socket"]):
        resume_main(args[1])  # --socket PATH: for a person reading ps; the snapshot has it
        return
    if args in (["-h"], ["--help"]):
        print(f"{_Args.USAGE}\nthe multiserver daemon, as a client starts it (detached)")
        return
    try:
        parsed = _Args.parse(args)
    except ValueError as exc:
        print(f"python -m multiserver: error: {exc} (see --help)", file=sys.stderr)
        raise SystemExit(2) from None
    _daemonized(parsed)
