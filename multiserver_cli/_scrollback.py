"""Where a session's scrollback is written, so that its first attach
after a reboot shows it (docs/restore.md, "Scrollback"): its output file
(``multiserver.DurableOutput``, one a child, in its daemon's state dir).

Who writes it, never two at once for one session:

- while nobody holds the session, its daemon (``multiserver/daemon/_keeping.py``);
- while a client holds it, that attach client: it alone sees the output
  then. ``ScreenKeeper`` writes it every SAVE_EVERY seconds while output
  flows, and once more before the session is given back.

Blocking calls only: no trio.
"""

from __future__ import annotations

import time

from multiserver import MultiserverError
from multiserver_cli._state import warn

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver.internal import DurableOutput


# While output flows, what the terminal shows is written at most this often
# (seconds), from the attach's main thread: the copy loop never waits for the disk.
SAVE_EVERY = 3.0


# --- while a client holds the session: what it shows --------------------------------


class ScreenKeeper:
    """What the session shows while this client holds it, kept in its
    output file (``multiserver`` keeps it there while nobody holds it, in
    the daemon: one file a child, ``DurableOutput``): its live output (the
    copy loop hands it over, ``live``), and a relaunch's notice once shown
    (``shown_notice``: so that it lives on past the next reboot too). The
    replay is not: the file has it already.

    Written every ``every`` seconds while output flows (``tick``, from the
    main thread), and once more before the session is given back
    (``last``: the daemon writes from then on). A failure is said once, at
    the end (while attached the terminal is the program's)."""

    def __init__(self, kept: DurableOutput, master: int, every: float = SAVE_EVERY) -> None:
        self.kept = kept
        self.master = master
        self.every = every
        self.failed: str | None = None
        self._due = time.monotonic() + every

    @classmethod
    def for_child(cls, instance_id: str, child_id: int, master: int) -> ScreenKeeper | None:
        """The keeper of child ``child_id`` of daemon instance
        ``instance_id`` (its files are in the state dir); None if it has none."""
        from multiserver.internal import KEPT_OUTPUT, DurableOutput, output_path, state_dir

        try:  # in its daemon's state dir, which is the user's
            path = output_path(state_dir(), instance_id, child_id)
        except ValueError:  # no instance id a file is named by
            return None
        return cls(DurableOutput(path, KEPT_OUTPUT), master)

    def live(self, data: bytes) -> None:
        """Output shown (from the copy loop's thread)."""
        self.kept.append(data)

    def shown_notice(self, notice: bytes) -> None:
        self.kept.append(notice)

    def wait(self) -> float:
        """Seconds until the next write is due."""
        return max(0.0, self._due - time.monotonic())

    def tick(self) -> None:
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + self.every
        if self.kept.pending:
            self._write()

    def last(self) -> None:
        """Everything shown, written: the session is given back next."""
        self._write()
        if self.failed is not None:
            warn(f"could not keep what the session showed: {self.failed}")

    def _write(self) -> None:
        from multiserver.internal import bounded_argv, foreground

        try:
            self.kept.flush()
            _pid, cwd, argv = foreground(self.master)
            self.kept.note(cwd=cwd, argv=bounded_argv(argv))
        except (OSError, MultiserverError, ImportError) as exc:
            # ImportError: ``pip install -U`` replacing the modules meanwhile.
            self.failed = str(exc)
