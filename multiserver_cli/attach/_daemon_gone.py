"""An attached session whose daemon dies: what ``multiserver attach`` does.

The client holds the session's PTY master (the duplicate the daemon sent;
the daemon's own copy went with the daemon), so the program runs on, and
the copy loop goes on as before. What changes is done here:

- The person is told at once, in the terminal, like a wall message: the
  line goes out through the copy loop (``_proxy.NOTE``), after what the
  program wrote so far, never inside a sequence it is writing.
- The client records that it holds the session (``restore.HoldRecord``),
  so that a ``multiserver restore`` meanwhile does not start a second copy
  of it (its outcome is ``held``).
- A size change goes to the PTY directly, as the daemon did it before.
- At detach there is no daemon to give the session back to. The client
  closes the master, the last one, and the kernel hangs the terminal up:
  the program (the session's leader) gets SIGHUP and SIGCONT, and when it
  exits its foreground job gets SIGHUP too; a program that ignores SIGHUP
  reads end of file and its writes fail (EIO). Nobody can collect its exit
  status: its daemon is gone. The saved session still names the dead
  daemon, so the next ``multiserver restore`` starts it again.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable

from multiserver import ConnectionClosed, describe_exit, exit_status
from multiserver_cli.attach._proxy import EOF, NOTE, TERMINAL_GONE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver import ChildInfo, SyncClient
    from restore import HoldRecord

# How long, once the master is closed, the program is given to go.
HANGUP_WAIT = 2.0
# What detach does when the daemon is gone, said once it is (and when it happens).
HANGUP = "its terminal is hung up and its program gets SIGHUP"


def gone_line(name: str, daemon_pid: int) -> str:
    return (
        f"[multiserver: the daemon of {name} (pid {daemon_pid}) is gone; {name} goes on in"
        f" this terminal until you detach, then it ends: {HANGUP}]"
    )


def unrecorded_line(name: str) -> str:
    return (
        f"[multiserver: cannot record in the runtime dir that this terminal holds {name}:"
        " a `multiserver restore` meanwhile would start a second copy]"
    )


class DaemonGone:
    """Watches for one attachment's daemon to go, and then carries on
    without it. ``master`` and ``ctl`` (the copy loop's ctl pipe, write
    end) are ``run_attached``'s: used, never closed, here."""

    def __init__(
        self,
        name: str,
        child: ChildInfo,
        socket: str,
        instance_id: str,
        daemon_pid: int,
        master: int | None,
        ctl: int,
    ) -> None:
        self.name = name
        self.child = child
        self.socket = socket
        self.instance_id = instance_id
        self.daemon_pid = daemon_pid
        self.master = master
        self.ctl = ctl
        self.notes: collections.deque[bytes] = collections.deque()
        self.happened = False
        self._record: HoldRecord | None = None

    @classmethod
    def watching(
        cls, client: SyncClient, child: ChildInfo, master: int | None, ctl: int
    ) -> DaemonGone:
        return cls(
            child.name,
            child,
            str(client.socket_path),
            client.instance_id,
            client.daemon_pid,
            master,
            ctl,
        )

    def noticed(self) -> None:
        """The daemon's connection closed: record the hold, tell the person
        (a watcher, which holds no master, is only told)."""
        if self.happened:
            return
        self.happened = True
        if self.master is None:
            self.notes.append(f"\r\n[multiserver: the daemon of {self.name} is gone]\r\n".encode())
            os.write(self.ctl, NOTE)
            return
        # Loaded only now: every attach builds a DaemonGone, few ever need it.
        from restore import Hold, HoldRecord

        self._record = HoldRecord.write(
            Hold(
                name=self.name,
                socket=self.socket,
                instance_id=self.instance_id,
                child_id=self.child.id,
                child_pid=self.child.pid,
                client_pid=os.getpid(),
            )
        )
        self.notes.append(f"\r\n{gone_line(self.name, self.daemon_pid)}\r\n".encode())
        if self._record is None:
            self.notes.append(f"{unrecorded_line(self.name)}\r\n".encode())
        os.write(self.ctl, NOTE)

    def resize(self, client: SyncClient, rows: int, cols: int) -> None:
        """The daemon sizes the PTY while it lives; then this client does."""
        if not self.happened:
            try:
                client.send_resize(self.child.id, rows, cols)
                return
            except ConnectionClosed:
                pass
        from multiserver.internal import set_winsize

        if self.master is not None:  # a watcher never sizes it
            with contextlib.suppress(OSError):
                set_winsize(self.master, rows, cols)

    def forget(self) -> None:
        """Once the master is closed: the hold is over."""
        if self._record is not None:
            self._record.remove()
            self._record = None

    def finish(
        self,
        reason: str | None,
        signal: int | None,
        exit_code: int | None,
        say: Callable[[str, bool], None],
        at_line_start: bool,
    ) -> int:
        """After the master is closed: say what became of the session (the
        exit status is the command's; 1 when the session could not be
        given back)."""
        name = self.name
        if exit_code is not None:  # its exit notice came before the daemon went
            say(f"[{name} {describe_exit(exit_code)}]", at_line_start)
            return exit_status(exit_code)
        if signal is not None:
            return 128 + signal
        if reason == TERMINAL_GONE:
            return 1
        if not self._wait_ended():
            say(
                f"[detached from {name}: its daemon was gone, so its terminal is hung up;"
                f" its program (pid {self.child.pid}) ignored SIGHUP and still runs]",
                at_line_start,
            )
        elif reason == EOF:
            say(
                f"[{name} ended; its daemon was gone, so its exit status is unknown]", at_line_start
            )
        else:
            say(
                f"[{name} ended: its daemon was gone, so detaching hung up its terminal"
                " (SIGHUP); `multiserver restore` starts it again]",
                at_line_start,
            )
        return 1

    def _wait_ended(self) -> bool:
        from restore import pid_alive

        until = time.monotonic() + HANGUP_WAIT
        while pid_alive(self.child.pid):
            if time.monotonic() >= until:
                return False
            time.sleep(0.01)
        return True
