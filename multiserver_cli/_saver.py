"""The saver behind ``multiserver save``: keeping the saved arrangement as
current as the sessions are, so that a restore after a reboot brings back
what was there a few seconds before it: each session's cwd and title (its
foreground process's) and, with ``--scrollback``, what it showed.

Scrollback is written through ``_scrollback``: by the attach client while
a client holds the session, by this saver, from what its daemon keeps for
it (``Peek``), while nobody does: every such session in one transaction.
``--every S`` runs a pass every S seconds until told to stop (SIGTERM,
SIGINT, SIGHUP), with one last pass then: the login service runs it so.

One pass asks the daemons that the saved sessions name (the arrangement's
refs), never a scan of every socket: a daemon that no saved session lives
on is not contacted again until the arrangement changes, so a saver that
runs for ever never keeps an idle daemon from exiting. Each daemon is asked
at once (a thread each, bounded by SCAN_TIMEOUT) for its children with their
foreground process; an unheld child's output is peeked only when its
daemon's counts moved since the last pass (the first pass peeks them all).
Outputs go to the store in one transaction (an unchanged one is not
rewritten), cwd and title changes in another. Blocking calls only: no trio.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs

from multiserver import (
    ChildInfo,
    DaemonPaths,
    LockBusy,
    MultiserverError,
    SyncClient,
    ensure_private_dir,
    escaped,
    printable,
    runtime_dir,
    try_lock,
)
from multiserver_cli import _scrollback
from multiserver_cli._autosave import LOCK_NAME
from multiserver_cli._scrollback import Key, Mark
from multiserver_cli._sessions import ask_daemon, at_once
from restore import (
    Arrangement,
    ArrangementStore,
    SavedOutput,
    SessionLeaf,
    StoreError,
    ref_key,
)

# The shortest period between two passes: at most one store write a second
# for each session.
MIN_EVERY = 1.0
# The longest (a day): past it a saver keeps nothing a reboot would want.
MAX_EVERY = 86400.0


@attrs.frozen
class _Answer:
    """One daemon's answer: its saved sessions' children and their outputs."""

    socket: str
    instance_id: str
    children: list[ChildInfo]
    outputs: list[SavedOutput]
    marks: dict[Key, Mark]


@attrs.frozen
class PassReport:
    """What one pass did. ``outputs`` is None when scrollback was not asked."""

    total: int  # saved sessions
    live: int  # of them, with a child that its daemon reported
    changed: int  # whose cwd or title moved on
    outputs: int | None  # whose scrollback went to the store
    problems: list[str]  # one line each: daemons that did not answer


def _ask(
    socket: str, wanted: set[tuple[str, int]], seen: dict[Key, Mark], scrollback: bool
) -> _Answer | str | None:
    """The children of one daemon that saved sessions refer to, and, with
    ``scrollback``, the outputs of the unheld ones whose counts moved since
    ``seen``; a line saying why not; None if no daemon runs there."""

    def outputs_of(client: SyncClient) -> _Answer:
        instance = client.instance_id
        children = [c for c in client.list(foreground=True) if (instance, c.id) in wanted]
        outputs, marks = (
            _scrollback.unheld_outputs(client, socket, children, seen) if scrollback else ([], {})
        )
        return _Answer(socket, instance, children, outputs, marks)

    return ask_daemon(Path(socket), outputs_of)


def _refreshed(leaf: SessionLeaf, child: ChildInfo) -> SessionLeaf:
    """``leaf`` with its cwd and title as its foreground process has them."""
    title = " ".join(map(escaped, child.fg_argv)) if child.fg_argv else None
    return attrs.evolve(leaf, cwd=child.fg_cwd or leaf.cwd, title=title or leaf.title)


@attrs.define
class Saver:
    """Passes over the saved sessions (see the module's docstring). It
    remembers, between passes, each child's counts as of its last saved
    output, and the daemons no saved session lives on."""

    scrollback: bool
    number: int | None = None  # only daemon N's sessions (``--daemon N``)
    _seen: dict[Key, Mark] = attrs.Factory(dict)
    _idle: dict[str, str] = attrs.Factory(dict)  # socket -> an instance nobody refers to
    _outline: Arrangement | None = None

    def run_pass(self, store: ArrangementStore) -> PassReport:
        """One pass: ask, then write. A store that cannot take the writes
        raises StoreError; nothing is marked saved then, so the next pass
        tries again."""
        outline = store.load_outline()
        if outline != self._outline:
            self._idle.clear()
            self._outline = outline
        leaves = outline.leaves()
        wanted: dict[str, set[tuple[str, int]]] = {}
        for leaf in leaves:
            if leaf.ref is not None:
                socket, instance, child_id = ref_key(leaf.ref)
                wanted.setdefault(socket, set()).add((instance, child_id))
        if self.number is not None:
            only = os.path.normpath(DaemonPaths.for_number(self.number).socket)
            wanted = {s: w for s, w in wanted.items() if s == only}
        asked = [s for s in wanted if s not in self._idle]
        answers = _ask_all(asked, wanted, self._seen, self.scrollback)
        found: dict[Key, ChildInfo] = {}
        outputs: list[SavedOutput] = []
        marks: dict[Key, Mark] = {}
        problems: list[str] = []
        for socket, answer in zip(asked, answers, strict=True):
            if isinstance(answer, str):
                problems.append(answer)
            elif answer is not None:
                if not answer.children:
                    self._idle[socket] = answer.instance_id
                found.update({(socket, answer.instance_id, c.id): c for c in answer.children})
                outputs += answer.outputs
                marks.update(answer.marks)
        changed = self._refresh(store, found)
        written = _scrollback.save_outputs(store, outputs) if self.scrollback else None
        # Children no longer asked about are forgotten.
        self._seen = marks
        live = sum(1 for leaf in leaves if leaf.ref is not None and ref_key(leaf.ref) in found)
        return PassReport(len(leaves), live, changed, written, problems)

    def _refresh(self, store: ArrangementStore, found: dict[Key, ChildInfo]) -> int:
        """Every saved session's cwd and title as its foreground process has
        them, in one transaction (none if nothing moved). Returns how many
        changed."""
        changed: list[str] = []

        def change(arr: Arrangement) -> Arrangement:
            changed.clear()

            def refresh(leaf: SessionLeaf) -> SessionLeaf:
                child = None if leaf.ref is None else found.get(ref_key(leaf.ref))
                new = leaf if child is None else _refreshed(leaf, child)
                if new != leaf:
                    changed.append(leaf.name)
                return new

            new = arr.map_leaves(refresh)
            return new if changed else arr

        if found:
            store.modify(change)
        return len(changed)


def _ask_all(
    sockets: list[str],
    wanted: dict[str, set[tuple[str, int]]],
    seen: dict[Key, Mark],
    scrollback: bool,
) -> list[_Answer | str | None]:
    """Every daemon at once: the whole pass takes about SCAN_TIMEOUT at most."""
    return at_once(sockets, lambda sock: _ask(sock, wanted[sock], seen, scrollback))


# --- save --every -----------------------------------------------------------------


@contextlib.contextmanager
def _stop_signals() -> Iterator[tuple[int, threading.Event]]:
    """SIGTERM, SIGINT and SIGHUP set the event and wake the returned fd."""
    stop = threading.Event()
    r, w = os.pipe()
    os.set_blocking(w, False)
    watched = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in watched}
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    try:
        yield r, stop
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, handler in old.items():
            signal.signal(s, handler)
        os.close(r)
        os.close(w)


def _pass_in_fresh_store(saver: Saver) -> tuple[int | None, list[str]]:
    """One pass, the store opened for it: how many saved sessions it found
    running (None: it could not tell), and the problems, one line each (a
    store that cannot be opened or written is one)."""
    try:
        store, warning = ArrangementStore.open_or_quarantine()
    except (StoreError, MultiserverError, OSError) as exc:
        return None, [f"saved arrangement unavailable: {exc}"]
    live: int | None = None
    try:
        report = saver.run_pass(store)
        live, problems = report.live, report.problems
    except StoreError as exc:
        problems = [f"could not save: {exc}"]
    finally:
        store.close()
    return live, [warning, *problems] if warning else problems


def run_every(every: float, saver: Saver, until_idle: bool = False) -> int:
    """A pass every ``every`` seconds until a stop signal, then one last
    pass. The store is opened again for each pass (a corrupt one moved
    aside by anyone meanwhile is never written into). Only one runs per
    user: a second one says so and exits 0; the one that runs keeps its pid
    in the lock. Problems (a daemon that does not answer, a store that
    cannot be written) are said when they change, not at every pass. It
    runs in ``/``: it lives as long as the login, and would keep the
    directory it was started from busy.

    ``until_idle`` (the saver a command starts, ``_autosave``): it stops
    after a pass that found no saved session on a running daemon, and
    nothing it could not tell (a daemon that did not answer may be wedged,
    not gone)."""
    os.chdir("/")
    lock_path = ensure_private_dir(runtime_dir()) / LOCK_NAME
    try:
        lock = try_lock(lock_path)
    except LockBusy:
        print(f"multiserver: a saver runs already ({lock_path} is locked)", file=sys.stderr)
        return 0
    with contextlib.suppress(OSError):  # who holds it
        os.ftruncate(lock, 0)
        os.pwrite(lock, str(os.getpid()).encode(), 0)
    said: list[str] = []
    try:
        with _stop_signals() as (wakeup, stop):
            while True:
                last = stop.is_set()
                live, problems = _pass_in_fresh_store(saver)
                if problems != said:
                    for line in problems:
                        print(f"multiserver: {printable(line)}", file=sys.stderr)
                    said = problems
                if last or (until_idle and live == 0 and not problems):
                    return 0
                if select.select([wakeup], [], [], every)[0]:
                    os.read(wakeup, 64)
    finally:
        os.close(lock)
