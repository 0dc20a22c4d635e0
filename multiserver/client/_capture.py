"""A session's screen as text, from what ``peek`` returns: the library's
``capture`` (rendered by ``multiserver.terminal._capture``), and where the
output of a session a client holds is found (``held_output``).

The daemon reads a session's output only while nobody holds it; a claim
takes what it had. While a client holds the session, that client alone
sees the output, and ``multiserver attach`` keeps what it showed in the
session's output file (``_durable``, written every few seconds while
output flows): for a held session the screen is rendered from there.

Blocking: a file read, and the rendering (up to about a second for a
MiB of output that never clears the screen); the trio client runs it in a
worker thread (``Client.capture``).
"""

from __future__ import annotations

from multiserver._durable import KEPT_OUTPUT, output_path, read_output
from multiserver.client._results import PeekResult
from multiserver.system._paths import state_dir
from multiserver.terminal._capture import Capture, render


def held_output(peeked: PeekResult, instance_id: str) -> PeekResult:
    """``peeked`` (of a child of daemon instance ``instance_id``) with, if a
    client holds the child, the output that client keeps of what it showed
    (the newest ``KEPT_OUTPUT`` bytes); as it is otherwise, or when there
    is no such file."""
    if not peeked.child.held:
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
