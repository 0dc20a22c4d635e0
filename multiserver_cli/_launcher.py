"""How a process of ours runs ``multiserver`` again (the login service's
units, the layout saved in the background from a tmux pane or a kitty
window): light, for the attach path, which must reach raw mode before
anything heavy is imported."""

from __future__ import annotations

import os
import sys


def launcher(executable: str = sys.executable) -> tuple[str, ...]:
    """How to run ``multiserver``: the script beside this interpreter (a
    venv, pipx), else the interpreter with ``-P -m`` (no directory of the
    caller's first on ``sys.path``)."""
    script = os.path.join(os.path.dirname(executable), "multiserver")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return (script,)
    return (executable, "-P", "-m", "multiserver_cli")
