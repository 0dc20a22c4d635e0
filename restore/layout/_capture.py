"""What a terminal shows, captured into the saved arrangement: each pane
of each tab is taken as the saved session it shows (``session_of`` reads
a pane's processes: the command line knows which of its own spellings
attach), or, asked to adopt, as a new session in its cwd; the whole
layout is merged into the arrangement in one transaction
(``save_layout``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from multiserver.internal import NAME_RE
from restore.layout._kitty import Kitty
from restore.layout._layout import SeenTab, merge_layout
from restore.layout._terminals import ReadPane, ReadTab
from restore.layout._tmux import Tmux
from restore.layout._window_names import window_name_for
from restore.store._model import Arrangement, SessionLeaf
from restore.store._store import ArrangementStore

# Which session a process's argv attaches to, if it is an attach.
SessionOf = Callable[[Sequence[str]], str | None]


def _pane_session(pane: ReadPane, session_of: SessionOf) -> str | None:
    for argv in pane.argvs:
        name = session_of(argv)
        if name is not None:
            return name
    return None


def _adopted_name(pane: ReadPane, taken: set[str]) -> str:
    base = "".join(ch if ch.isalnum() or ch in "_.-" else "-" for ch in Path(pane.cwd).name)
    base = base.strip("-.") or "pane"
    name, n = base[:100], 2
    while name in taken or not NAME_RE.fullmatch(name):
        name, n = f"{base[:100]}-{n}", n + 1
    taken.add(name)
    return name


@attrs.frozen
class Capture:
    """How panes are read: ``session_of`` (see ``SessionOf``); with
    ``adopt``, a pane that shows no session becomes one running
    ``new_argv`` in its cwd; ``shown``: panes known to show a session
    whatever runs in them."""

    session_of: SessionOf
    adopt: bool = False
    new_argv: tuple[str, ...] = ()
    shown: Mapping[int, str] = attrs.Factory(dict)


def seen_tabs(
    tabs: list[ReadTab], known: Arrangement, how: Capture
) -> tuple[list[SeenTab], list[str]]:
    """What each pane of ``tabs`` shows, and a line for each pane that shows
    no saved session (adopted ones aside)."""
    seen: list[SeenTab] = []
    skipped: list[str] = []
    taken = {leaf.name for leaf in known.leaves()}
    for tab in tabs:
        sessions: dict[int, str] = {}
        adopted: dict[int, SessionLeaf] = {}
        for pane in tab.panes.values():
            name = how.shown.get(pane.pane) or _pane_session(pane, how.session_of)
            where = f"{tab.window} / {tab.title or '-'} / pane {pane.pane}"
            if name is not None and known.find(name) is not None:
                sessions[pane.pane] = name
                continue
            what = " ".join(pane.argvs[-1]) if pane.argvs else "nothing"
            if name is not None:
                skipped.append(f"{where}: attached to {name}, which is not saved")
            elif how.adopt:
                # A new session in its cwd, running what a new session runs
                # by default: the pane's own process is the terminal's
                # (tmux's `sh -c CMD`, a login shell's `-zsh`).
                leaf = SessionLeaf(_adopted_name(pane, taken), list(how.new_argv), pane.cwd or "/")
                adopted[pane.pane] = leaf
            else:
                skipped.append(f"{where}: runs {what}, not a multiserver session")
        sizes = {p.pane: (p.cols, p.rows) for p in tab.panes.values()}
        # A window is saved under a name the terminal will give back
        # (tmux escapes a `\` or `$` in a session's name, kitty takes any).
        window = window_name_for(tab.window)
        seen.append(SeenTab(window, tab.title, tab.layout, sessions, sizes, adopted))
    return seen, skipped


@attrs.frozen
class Saved:
    """What ``save_layout`` did."""

    tabs: int
    sessions: int
    adopted: int
    skipped: list[str]


def save_layout(terminal: Kitty | Tmux, store: ArrangementStore, how: Capture) -> Saved:
    """Read ``terminal``'s layout and make it the saved arrangement's, in
    one transaction. TerminalError, StoreError."""
    tabs = terminal.read()
    result: list[Saved] = []

    def change(old: Arrangement) -> Arrangement:
        seen, skipped = seen_tabs(tabs, old, how)
        result[:] = [
            Saved(
                len(tabs),
                sum(len(t.sessions) for t in seen),
                sum(len(t.adopted) for t in seen),
                skipped,
            )
        ]
        new = merge_layout(old, seen)
        return old if new == old else new

    store.modify(change)
    return result[0]
