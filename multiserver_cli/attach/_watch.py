"""An attachment's second loop (``AttachWatch``, the main thread's, beside the
copy loop's): the daemon's notices, signals, what the copy loop tells,
and the keeping of the session's output file while this client reads
the master itself. ``_attached.run_attached`` runs both."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

from multiserver import (
    ChildExited,
    ChildTaken,
    ConnectionClosed,
    GiveBack,
    RequestFailed,
    Shared,
    Skipped,
    TimedOut,
)
from multiserver.internal import mutable_record
from multiserver_cli.attach import _proxy, _screen
from multiserver_cli.attach._daemon_gone import DaemonGone
from multiserver_cli.attach._tty import terminal_size

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver import ChildInfo, SyncClient
    from multiserver_cli._scrollback import ScreenKeeper

# How long typed keys wait for the session to take this terminal's size.
SIZE_WAIT = 1.0
# After the PTY reports EOF, how long to wait for the daemon's exit notice.
EXIT_NOTICE_WAIT = 5.0


@mutable_record
class Outcome:
    """What ended the attachment, besides the proxy's own reason."""

    exit_code: int | None = None
    taken: bool = False
    signal: int | None = None
    reason: str | None = None  # the proxy's, once it returned
    skipped: int = 0  # bytes this terminal missed while it was behind (Skipped)
    shared: bool = False  # output comes on a feed: other clients hold it too


def keep_again(keeper: ScreenKeeper, screen: _screen.Screen) -> None:
    """This client reads the master alone again (the copy loop's thread):
    it keeps what the session shows from here, after what the daemon kept."""
    keeper.kept.resync()
    screen.keep = keeper.live


class AttachWatch:
    """This thread's loop while the copy loop runs: the daemon's notices
    (taken elsewhere, exited; and, shared, give reading back, the size's
    owner, bytes skipped), signals (a size change, a hangup) and what the
    copy loop tells (it stopped reading the master, reads it again, the
    person typed); it stops the copy loop (``ctl``) when the session is
    taken, exits or we are told to go, and writes what the session showed
    when due (``keeper``, while this client reads the master itself)."""

    def __init__(
        self,
        client: SyncClient,
        child: ChildInfo,
        stdin: int,
        outcome: Outcome,
        ctl: int,
        gone: DaemonGone,
        keeper: ScreenKeeper | None,
        sharing: _proxy.Sharing,
        screen: _screen.Screen,
    ) -> None:
        self.client = client
        self.child = child
        self.stdin = stdin
        self.outcome = outcome
        self.ctl = ctl
        self.gone = gone
        self.keeper = keeper
        self.keeping = keeper is not None and not outcome.shared
        self.sharing = sharing
        self.screen = screen
        self.stopping = False
        self.exit_by: float | None = None  # shared and exited: the feed's end is waited for until

    def stop(self) -> None:
        if not self.stopping:
            os.write(self.ctl, _proxy.STOP)
            self.stopping = True

    def run(self, sig_r: int, done_r: int) -> None:
        client = self.client
        watched = [done_r, sig_r, client.fileno()]
        while True:
            if client.fileno() in watched:
                try:
                    client.read_notices()  # a notice may have come with a reply
                except ConnectionClosed:
                    # The daemon is gone; the session goes on through our fd.
                    watched.remove(client.fileno())
                    self.gone.noticed()
                while client.notices:
                    self._notice(client.notices.popleft())
            ready, _, _ = select.select(watched, [], [], self._timeout())
            if self.keeper is not None and self.keeping and not self.stopping:
                self.keeper.tick()
            if self.exit_by is not None and time.monotonic() >= self.exit_by:
                self.stop()
            if sig_r in ready:
                self._signals(os.read(sig_r, 64))
            if done_r in ready and self._told(os.read(done_r, 64)):
                break
        self._exit_notice()

    def _timeout(self) -> float | None:
        waits = [] if self.keeper is None or not self.keeping else [self.keeper.wait()]
        if self.exit_by is not None:
            waits.append(max(0.0, self.exit_by - time.monotonic()))
        return min(waits, default=None)

    def _notice(self, notice: object) -> None:
        if getattr(notice, "id", None) != self.child.id or self.stopping:
            return
        if isinstance(notice, GiveBack):
            os.write(self.ctl, _proxy.GIVE_BACK)  # it says STOPPED_READING once it did
        elif isinstance(notice, Shared):
            self.sharing.tell_typing = not notice.yours
        elif isinstance(notice, Skipped):
            self.outcome.skipped += notice.missed
        elif isinstance(notice, ChildTaken):
            self.outcome.taken = True
            self.stop()
        elif isinstance(notice, ChildExited):
            # The PTY may stay open (a grandchild holds it): stop. Shared,
            # what the program wrote last comes on the feed, which the
            # daemon ends after it: waited for, a while.
            self.outcome.exit_code = notice.exit_code
            if self.outcome.shared:
                self.exit_by = time.monotonic() + EXIT_NOTICE_WAIT
            else:
                self.stop()

    def _signals(self, signums: bytes) -> None:
        for signum in signums:
            if signum == signal.SIGWINCH:
                size = terminal_size(self.stdin)
                if size is not None and not self.stopping:
                    self.gone.resize(self.client, *size)
            elif not self.stopping:
                self.outcome.signal = signum
                self.stop()

    def _told(self, said: bytes) -> bool:
        """What the copy loop said; True once it ended."""
        for byte in (said[i : i + 1] for i in range(len(said))):
            if byte == _proxy.STOPPED_READING:
                self._give_back()
            elif byte == _proxy.READING_AGAIN:
                self.outcome.shared = False
                self.keeping = self.keeper is not None
            elif byte == _proxy.TYPED:
                self._size_first()
        return b"x" in said

    def _size_first(self) -> None:
        """The person typed while the session had another holder's size:
        it takes this terminal's before the keys go on (``SIZED``)."""
        size = terminal_size(self.stdin)
        if size is not None and not self.stopping and not self.gone.happened:
            self.client.deadline = time.monotonic() + SIZE_WAIT
            try:
                with contextlib.suppress(ConnectionClosed, RequestFailed, TimedOut):
                    self.client.resize(self.child.id, *size)
            finally:
                self.client.deadline = None  # attached: no bound but the person's
        os.write(self.ctl, _proxy.SIZED)

    def _give_back(self) -> None:
        """The copy loop reads the master no more: what this terminal
        showed goes back (the daemon keeps the output file from here), and
        the feed comes. Refused (the daemon took reading back already, or
        has no fd for a feed), the copy loop reads the master again."""
        if self.keeper is not None and self.keeping:
            self.keeper.last()
        self.keeping = False
        self.screen.keep = None
        self.outcome.shared = True
        feed: int | None
        try:
            feed = self.client.hand_back(self.child.id, self.screen.shown.peek()[0])
        except (RequestFailed, ConnectionClosed):
            feed = self.gone.master  # the master itself, as the source again
            self.outcome.shared = False
            if self.keeper is not None:  # the copy loop reads nothing meanwhile
                self.keeping = True
                self.screen.keep = self.keeper.live
        if feed is not None:
            self.sharing.feeds.append(feed)
            os.write(self.ctl, _proxy.FEED)

    def _exit_notice(self) -> None:
        """After a PTY EOF (or a watcher's feed's end): wait a while for
        the exit notice, or the takeover's."""
        outcome = self.outcome
        if outcome.reason == _proxy.EOF and outcome.exit_code is None and not outcome.taken:
            until = time.monotonic() + EXIT_NOTICE_WAIT
            with contextlib.suppress(ConnectionClosed):
                while (late := self.client.wait_notice(until)) is not None:
                    if late.id == self.child.id and isinstance(late, ChildExited):
                        outcome.exit_code = late.exit_code
                        break
                    if late.id == self.child.id and isinstance(late, ChildTaken):
                        outcome.taken = True  # a watcher's feed ends so too
                        break
