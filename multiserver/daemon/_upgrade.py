"""Upgrading a daemon in place: it re-executes itself with the installed
code, keeping its pid, its listening socket, every child with its PTY
master and buffered output, every client connection, and its instance id.

The steps (docs/upgrade.md has the picture)::

    Upgrade request
      1. check:  snapshot of now -> `python -P -m multiserver --check-snapshot`
                 (the installed code imports, reads it, says it can serve it)
                 refused? -> Error, the daemon goes on as it was
      2. pause:  stop accepting (new connections wait in the backlog);
                 each connection parks before its next request and between
                 (or inside) frames; one that cannot park in QUIET_WAIT is
                 disconnected (a client that neither reads nor writes)
      3. exec:   final snapshot into a file with no name; its fds and every
                 fd it names lose close-on-exec; execv(python -P -m
                 multiserver --resume FD). Synchronous: nothing changes
                 between the snapshot and the exec.
                 exec failed? -> fds closed-on-exec again, resume, Error
      4. resume (the new code, same pid): read the snapshot, take the fds
                 over, serve; answer the Upgrade (``Upgraded``)

A failure after the exec (the new code cannot read the snapshot it read in
step 1, or dies) is a daemon crash like any other: the masters close, the
children get their hangup, and ``restore`` brings the sessions back.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import signal
import sys
import time
from typing import Protocol

import attrs
import trio

from multiserver.daemon import _snapshot
from multiserver.daemon._children import ChildTable
from multiserver.daemon._connection import ClientConnection
from multiserver.daemon._core import Answer, Reply
from multiserver.daemon._events import EventLog
from multiserver.daemon._origin import DaemonOrigin
from multiserver.daemon._snapshot import BlobWriter, Snapshot
from multiserver.protocol._messages import Error, Upgraded
from multiserver.protocol._proto import SERVER_NAME
from multiserver.settings._config import DaemonConfig
from multiserver.settings._settings import installed_daemon
from multiserver.system import _platform
from multiserver.system._paths import DaemonPaths

log = logging.getLogger("multiserver.daemon")


class Daemon(Protocol):
    """What an upgrade needs of the daemon (``_server.Daemon``)."""

    @property
    def config(self) -> DaemonConfig: ...

    @property
    def instance_id(self) -> str: ...

    @property
    def child_nofile(self) -> int | None: ...

    @property
    def children(self) -> ChildTable: ...

    @property
    def events(self) -> EventLog: ...

    @property
    def clients(self) -> list[ClientConnection]: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class Listening(Protocol):
    def fileno(self) -> int: ...


class DaemonFiles(Protocol):
    """What an upgrade needs of the daemon's files (``_files.DaemonFiles``)."""

    @property
    def paths(self) -> DaemonPaths: ...

    @property
    def listener(self) -> Listening: ...

    @property
    def lock_fd(self) -> int: ...

    @property
    def socket_stat(self) -> os.stat_result: ...

    @property
    def origin(self) -> DaemonOrigin | None: ...


# How long connections get to park before those that did not are
# disconnected (a client that neither reads its answers nor sends a whole
# request); and how long the new code gets to say it can take over.
QUIET_WAIT = 2.0
LATE_WAIT = 0.25
CHECK_TIMEOUT = 30.0


def take_snapshot(
    daemon: Daemon,
    files: DaemonFiles,
    conns: list[ClientConnection],
    directory: str,
    paused_at: float = 0.0,
    *,
    blobs_too: bool = True,
) -> tuple[Snapshot, int]:
    """The daemon's state now, written to a file with no name in
    ``directory`` (read from its start): (the snapshot, the file's fd, the
    caller's). Synchronous. The buffers go from the daemon's memory to the
    file, copied once; without ``blobs_too`` (the check run's), the blob
    area is a hole of its size, which takes no memory: the check reads
    the header and the blobs' bounds, never their bytes. Raises OSError."""
    blobs = BlobWriter()
    try:
        children, next_id = daemon.children.snapshot(blobs)
        peers = [conn.export(blobs) for conn in conns]
        events = daemon.events
        origin = files.origin
        snapshot = Snapshot(
            format=_snapshot.FORMAT,
            readable_from=_snapshot.FORMAT,
            server=SERVER_NAME,
            instance_id=daemon.instance_id,
            pid=os.getpid(),
            started=origin.started if origin else "on-demand",
            started_at=origin.started_at if origin else None,
            idle_exit=daemon.config.idle_exit,
            socket=str(files.paths.socket),
            state_dir=str(files.paths.state_dir),
            listener=files.listener.fileno(),
            lock=files.lock_fd,
            socket_stat=[int(x) for x in tuple(files.socket_stat)[:10]],
            config=attrs.asdict(daemon.config),
            next_child_id=next_id,
            children=children,
            peers=peers,
            paused_at=paused_at,
            upgraded_at=time.time(),
            child_nofile=daemon.child_nofile,
            events=blobs.add(events.kept()),
            next_event_seq=events.next_seq,
            signals_sent=events.signals_sent(),
        )
        parts = _snapshot.encode(snapshot, blobs)
        if blobs_too:
            return snapshot, write_file(parts, directory)
        head = parts[: -len(blobs.parts())] if blobs.parts() else parts
        return snapshot, write_file(head, directory, size=sum(len(p) for p in parts))
    finally:
        blobs.release()  # the children's buffers may grow again


def write_file(parts: list[bytes | memoryview], directory: str, size: int = 0) -> int:
    """A file with no name holding ``parts``, then a hole up to ``size``
    bytes; read from its start. Raises OSError."""
    fd = _platform.anonymous_file(directory)
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        if size > os.lseek(fd, 0, os.SEEK_CUR):
            os.ftruncate(fd, size)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


class SnapshotFile:
    """The snapshot the new code serves from: the file mapped, not read
    into memory (its blobs are copied once, into the buffers and frames
    that take them over), or read where it cannot be mapped. ``close``
    once taken over: the file's pages go with the map, and nothing of the
    snapshot stays for the daemon's life."""

    def __init__(self, snapshot: Snapshot, area: memoryview, whole: memoryview) -> None:
        self._snapshot: Snapshot | None = snapshot
        self.area = area
        self._whole = whole

    @classmethod
    def read(cls, fd: int) -> SnapshotFile:
        """The snapshot in the file ``fd`` (which stays the caller's).
        Raises SnapshotError, OSError."""
        try:
            whole = memoryview(mmap.mmap(fd, 0, prot=mmap.PROT_READ))
        except (OSError, ValueError):  # not a file that maps (a pipe), or empty
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            whole = memoryview(b"".join(chunks))
        try:
            snapshot, area = _snapshot.decode(whole)
        except BaseException:
            _close_view(whole)
            raise
        return cls(snapshot, area, whole)

    @property
    def snapshot(self) -> Snapshot:
        assert self._snapshot is not None, "the snapshot file was closed"
        return self._snapshot

    def close(self) -> None:
        self._snapshot = None
        self.area.release()
        _close_view(self._whole)


def _close_view(view: memoryview) -> None:
    """Release ``view`` and close the map under it, if it is one."""
    under = view.obj
    view.release()
    if isinstance(under, mmap.mmap):
        try:
            under.close()
        except BufferError:  # a view of it still lives: a bug, which costs memory only
            log.warning("the snapshot's map is still in use: it stays mapped")


async def check_new_code(fd: int) -> tuple[str | None, str]:
    """Run the installed code in check mode on the snapshot in ``fd``:
    (None, the server name it reports) if it can serve it, else (one
    line of why, "")."""
    try:
        with trio.move_on_after(CHECK_TIMEOUT) as scope:
            done = await trio.run_process(
                installed_daemon("--check-snapshot"),
                stdin=fd,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                cwd="/",
            )
    except OSError as exc:
        return f"cannot run {sys.executable}: {exc.strerror}", ""
    if scope.cancelled_caught:
        return f"the installed code did not answer within {CHECK_TIMEOUT:g} s", ""
    out = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0 or not out.startswith("multiserver/"):
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        why = lines[-1] if lines else f"exit status {done.returncode}"
        return why, ""
    return None, out.splitlines()[0]


async def upgrade(daemon: Daemon, files: DaemonFiles, conn: ClientConnection, req: int) -> Answer:
    """Serve an Upgrade from ``conn``. Returns only if the daemon goes on
    with its own code (the Error says why); otherwise the process becomes
    the new code, which answers.

    Cancellation: the daemon serves again as before.
    """

    def refused(err: int, text: str) -> Answer:
        log.warning("upgrade refused: %s", text)
        return Answer([_error(conn, req, err, text)])

    directory = str(files.paths.dir)
    try:
        _, fd = take_snapshot(daemon, files, list(daemon.clients), directory, blobs_too=False)
    except OSError as exc:
        return refused(exc.errno or errno.EIO, f"cannot write the snapshot: {exc.strerror}")
    try:
        why, new_server = await check_new_code(fd)
    finally:
        os.close(fd)
    if why is not None:
        return refused(errno.ENOEXEC, f"the installed code cannot take over: {why}")
    log.info("upgrading to %s", new_server)
    conn.upgrade_req = req
    # Clients wait from here: the pause the new code reports is this one.
    paused_at = time.monotonic()
    daemon.pause()
    try:
        await _wait_quiet(daemon)
        conns = [c for c in daemon.clients if c.quiet and not c.closed]
        err = _exec(daemon, files, conns, directory, paused_at)  # returns only on failure
        return refused(err.errno or errno.EIO, f"cannot start the installed code: {err}")
    finally:
        conn.upgrade_req = None
        daemon.resume()


async def _wait_quiet(daemon: Daemon) -> None:
    """Wait for every connection to park; disconnect those that do not
    within QUIET_WAIT, and give them LATE_WAIT to be gone: the pause stays
    bounded whatever they wait on (one that is still there is left out of
    the snapshot, its socket closed by the exec, what it held drained)."""
    with trio.move_on_after(QUIET_WAIT):
        for conn in list(daemon.clients):
            await conn.wait_quiet()
    late = [c for c in daemon.clients if not c.quiet]
    for conn in late:
        log.warning("client %d: did not pause for the upgrade; disconnecting", conn.id)
        conn.disconnect()
    with trio.move_on_after(LATE_WAIT):
        for conn in late:
            await conn.wait_quiet()  # set once it is closed


def _exec(
    daemon: Daemon,
    files: DaemonFiles,
    conns: list[ClientConnection],
    directory: str,
    paused_at: float,
) -> OSError:
    """Write the snapshot and exec the new code on it; returns the error
    only if that failed (every fd is close-on-exec again then)."""
    try:
        snapshot, fd = take_snapshot(daemon, files, conns, directory, paused_at)
    except OSError as exc:
        return exc
    fds = snapshot.fds()
    old_hup = signal.getsignal(signal.SIGHUP)
    try:
        for n in [fd, *fds]:
            os.set_inheritable(n, True)
        # Ignored across the exec (a disposition survives it) until the new
        # code's own handler: a hangup meanwhile must not end the daemon.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        for handler in logging.getLogger().handlers:
            handler.flush()
        argv = installed_daemon("--resume", str(fd), "--socket", snapshot.socket)
        os.execv(sys.executable, argv)
    except OSError as exc:
        for n in fds:
            try:
                os.set_inheritable(n, False)
            except OSError:
                pass
        signal.signal(signal.SIGHUP, old_hup)
        os.close(fd)
        return exc
    raise AssertionError("unreachable")  # pragma: no cover


def upgraded(conn: ClientConnection, req: int, old_server: str, paused: float) -> Reply:
    """The new code's answer to the Upgrade that started it."""
    msg = Upgraded(
        req=req, pid=os.getpid(), old_server=old_server, server=SERVER_NAME, paused=paused
    )
    return Reply(msg, conn.encode(msg))


def _error(conn: ClientConnection, req: int, err: int, text: str) -> Reply:
    msg = Error(req=req, errno=err, message=text)
    return Reply(msg, conn.encode(msg))
