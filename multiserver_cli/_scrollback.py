"""Where a session's scrollback is written: the one way into the saved
arrangement for what a session showed, so that its first attach after a
reboot shows it (docs/restore.md, "Scrollback").

Who writes it, never two at once for one session:

- while a client holds the session, that attach client: it alone has what
  its terminal shows. ``ScreenSaver`` saves it every SAVE_EVERY seconds
  while output flows, and the client once more at detach, each time
  through ``screen_saver`` (one store transaction);
- while nobody holds it, the saver (``multiserver save --scrollback``,
  ``_saver``), from what its daemon keeps for it: ``unheld_outputs`` peeks
  those of a daemon's children whose counts moved since the saver's last
  pass, ``save_outputs`` writes a pass's outputs in one transaction.

Blocking calls only: no trio.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from multiserver_cli._state import warn

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Protocol

    from multiserver import ChildInfo, SyncClient
    from restore import ArrangementStore, SavedOutput

    class Shown(Protocol):
        """What a terminal shows, as the attach's copy loop records it
        (``attach._proxy.Screen``)."""

        @property
        def recorded(self) -> int:
            """Bytes recorded so far (it moves while output flows)."""
            ...

        def snapshot(self) -> tuple[bytes, int]:
            """What is shown now, and ``recorded`` as of it."""
            ...


# Keeps what the terminal showed as the session's saved scrollback (one store
# transaction); True: the last time, at detach (a failure may then be said).
SaveScreen = Callable[[bytes, bool], None]
# While output flows, what the terminal shows is saved at most this often
# (seconds), from the attach's main thread: the copy loop never waits for the store.
SAVE_EVERY = 3.0

Key = tuple[str, str, int]  # a child: daemon socket, instance, child id (ref_key)
Mark = tuple[int, int, str]  # its daemon's counts: buffered, dropped, state


# --- while a client holds the session: what its terminal shows ---------------------


class ScreenSaver:
    """Saves what the terminal shows every ``every`` seconds while output
    flows (``Screen.recorded`` moved since the last save), and not at all
    while it does not. The first save comes one period in and includes the
    replay: a relaunch's notice, once shown, lives on in the scrollback."""

    def __init__(self, screen: Shown, save: SaveScreen, every: float = SAVE_EVERY) -> None:
        self.screen = screen
        self.save = save
        self.every = every
        self._saved = 0  # screen.recorded as of the last save
        self._due = time.monotonic() + every

    def wait(self) -> float:
        """Seconds until the next save is due."""
        return max(0.0, self._due - time.monotonic())

    def tick(self) -> None:
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + self.every
        if self.screen.recorded == self._saved:
            return
        data, self._saved = self.screen.snapshot()
        self.save(data, False)


def screen_saver(
    store_of: Callable[[], ArrangementStore | None], socket: Path, instance_id: str, child_id: int
) -> SaveScreen:
    """How an attached client keeps what its terminal shows as the saved
    scrollback of the session whose child it holds: one transaction a call,
    in the store ``store_of`` gives (opened at the first: after the client
    is in raw mode; nothing is saved when it cannot be used). While
    attached a failure is not said (the terminal is the program's); at
    detach (``last``) it is."""

    def save(shown: bytes, last: bool) -> None:
        # The store's modules are loaded at the first save. A `pip install
        # -U multiserver` meanwhile replaces them file by file: a load in
        # that window fails (ImportError), and must not end the attachment
        # (the next save loads them again).
        try:
            from restore import SavedOutput, StoreError

            store = store_of()
        except ImportError as exc:
            if last:
                warn(f"could not save what the session showed: {exc}")
            return
        if store is None:
            return
        try:
            store.save_outputs([SavedOutput(str(socket), instance_id, child_id, shown)])
        except StoreError as exc:
            if last:
                warn(f"could not save what the session showed: {exc}")

    return save


# --- while nobody holds it: what its daemon keeps ----------------------------------


def unheld_outputs(
    client: SyncClient, socket: str, children: Sequence[ChildInfo], seen: dict[Key, Mark]
) -> tuple[list[SavedOutput], dict[Key, Mark]]:
    """What the daemon of ``client`` (at ``socket``, as the saved sessions
    name it) keeps for each of ``children`` that no client holds (a held
    one is its attach client's to save) and whose counts moved since
    ``seen``; and each one's counts as of now (``seen``'s for those not
    peeked again)."""
    from restore import SCROLLBACK_LIMIT, SavedOutput

    instance = client.instance_id
    outputs: list[SavedOutput] = []
    marks: dict[Key, Mark] = {}
    for c in children:
        key = (socket, instance, c.id)
        if c.held:
            continue
        if seen.get(key) == (c.buffered_bytes, c.dropped_bytes, c.state):
            marks[key] = seen[key]
            continue
        peeked = client.peek(c.id, SCROLLBACK_LIMIT)
        now = peeked.child
        code = now.exit_code if now.state == "exited" else None
        outputs.append(SavedOutput(socket, instance, c.id, peeked.output, code))
        marks[key] = (now.buffered_bytes, now.dropped_bytes, now.state)
    return outputs, marks


def save_outputs(store: ArrangementStore, outputs: Sequence[SavedOutput]) -> int:
    """A pass's outputs, in one transaction; how many saved sessions they
    went to (one unchanged since it was saved counts, though it is not
    written again). StoreError if the store cannot take them."""
    return len(store.save_outputs(outputs))
