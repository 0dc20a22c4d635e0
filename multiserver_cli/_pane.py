"""The tmux pane or kitty window this command runs in, and its layout kept
with the session it shows: inside one, ``new`` and ``attach`` record the
terminal's layout with their session in their pane (``track_pane``), as
``save --from`` would.

Only the environment is read here. The layout is read and saved by
``multiserver save --from tmux|kitty --pane ID=NAME``, run in the
background: attaching neither waits for tmux or kitty nor loads the code
that reads them, and a layout that cannot be read is not said over the
session's screen (``save --from`` says why).
"""

from __future__ import annotations

import os
import sys


def here() -> tuple[str, int] | None:
    """The terminal this process runs in (``tmux`` or ``kitty``) and its
    pane, if it is a tmux pane or a kitty window whose kitty listens on a
    socket."""
    pane = os.environ.get("TMUX_PANE", "")
    if os.environ.get("TMUX") and pane.startswith("%") and pane[1:].isdigit():
        return "tmux", int(pane[1:])
    window = os.environ.get("KITTY_WINDOW_ID", "")
    if os.environ.get("KITTY_LISTEN_ON") and window.isdigit():
        return "kitty", int(window)
    return None


def track_pane(name: str) -> None:
    """Inside a tmux pane or a kitty window, record the terminal's layout
    with session ``name`` in this pane: ``multiserver save --from ...
    --pane`` run by a grandchild that nobody waits for, in its own session,
    in ``/``, its stdio on /dev/null (the launcher is the service's:
    the script beside this interpreter, else ``python -P -m``)."""
    found = here()
    if found is None:
        return
    which, pane = found
    from multiserver_cli._launcher import launcher

    argv = [*launcher(), "save", "--from", which, "--pane", f"{pane}={name}"]
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child != 0:
        # The child forks the one that works and exits at once: reaped
        # here, so no zombie waits for the attach to end.
        os.waitpid(child, 0)
        return
    if os.fork() != 0:
        os._exit(0)
    try:  # the grandchild: its own session, nothing on the terminal, in /
        os.setsid()
        os.chdir("/")
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv(argv[0], argv)
    except BaseException:
        pass
    os._exit(1)
