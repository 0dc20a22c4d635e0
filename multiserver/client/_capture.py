"""A session's screen as text, from what ``peek`` returns: the library's
``capture`` (rendered by ``multiserver.terminal._capture``), and where the
output of a session a client holds is found (``held_output``).

The daemon reads a session's output while nobody holds it, and while
several clients share it (docs/sharing.md): its buffer is then the
output up to now. While one client holds the session alone, that client
alone sees the output: a daemon of protocol 9 is asked for it by a
moment's read-only join (``asks_holder``), for which the holder hands
back what it showed; else ``multiserver attach`` keeps what it showed in
the session's output file (``_durable``, written every few seconds while
output flows), and the screen is rendered from there (``held_output``).

Blocking: a file read, and the rendering (up to about a second for a
MiB of output that never clears the screen); the trio client runs it in a
worker thread (``Client.capture``).
"""

from __future__ import annotations

from multiserver._durable import KEPT_OUTPUT, output_path, read_output
from multiserver.client._results import ClaimResult, PeekResult
from multiserver.protocol._messages import ChildInfo
from multiserver.protocol._proto import SHARING_VERSION
from multiserver.system._paths import state_dir
from multiserver.terminal._capture import Capture, render


def daemon_reads(child: ChildInfo) -> bool:
    """Whether the daemon reads ``child``'s output (its buffer is the
    output up to now): nobody holds it, or several do, or only watchers."""
    return not child.held or child.holders > 1 or child.watchers > 0


def asks_holder(child: ChildInfo, version: int) -> bool:
    """Whether the output ``child``'s one holder showed is to be asked of
    it, by a read-only join and release (``joined_output``)."""
    return child.state == "running" and not daemon_reads(child) and version >= SHARING_VERSION


def joined_output(peeked: PeekResult, joined: ClaimResult) -> PeekResult:
    """What a read-only join answered: the holder's screen as it handed it
    back (``peeked`` if the join failed)."""
    if joined.child is None:
        return peeked
    return PeekResult(joined.child, joined.output, joined.dropped)


def held_output(peeked: PeekResult, instance_id: str) -> PeekResult:
    """``peeked`` (of a child of daemon instance ``instance_id``) with, if
    one client holds the child alone, the output that client keeps of what
    it showed (the newest ``KEPT_OUTPUT`` bytes); as it is otherwise, or
    when there is no such file."""
    if daemon_reads(peeked.child):
        return peeked
    try:
        path = output_path(state_dir(), instance_id, peeked.child.id)
    except ValueError:  # no instance id a file is named by
        return peeked
    kept = read_output(path, KEPT_OUTPUT)
    return peeked if kept is None else PeekResult(peeked.child, kept, 0)


def capture(peeked: PeekResult, *, history: int | None = 0, styled: bool = False) -> Capture:
    """The session's screen as its terminal shows it (``tmux capture-pane
    -p``), rendered from ``peeked``'s output at its child's size: the lines
    (trailing blanks left out), the cursor, the title; ``history`` lines
    of what scrolled off above it (None: all the output holds); ``styled``:
    each line with its colours and attributes as SGR sequences.

    The output of a held session is its holder's: pass ``held_output``'s
    (``SyncClient.capture`` and ``Client.capture`` do)."""
    child = peeked.child
    return render(peeked.output, child.rows, child.cols, history=history, styled=styled)
