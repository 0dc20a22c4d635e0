"""What an arrangement's window may be called (pure; no attrs, so that
``new`` can check ``--window`` on its fast path).

A window is opened as a tmux session (``restore --open tmux``) or a kitty
OS window of that name, and found again by it. tmux changes a session
name it is given: ``.`` and ``:`` become ``_``; a control character, a
byte that is not UTF-8, ``\\`` and ``$`` are written as escapes; ``#``
starts a format (``#(cmd)`` runs cmd). A name it changed is not found
again ("can't find session"), so such names are refused where a person
gives one (``new --window``) and mapped where a terminal gives one
(``save --from``): one rule for both, here.
"""

from __future__ import annotations

WINDOW_NAME_MAX = 128
# What a terminal app changes or interprets in a name (see above).
_MANGLED = frozenset(".:\\$#")


def _allowed(ch: str) -> bool:
    return ch.isprintable() and ch not in _MANGLED


def window_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a window's (one line), or None if it can."""
    if not name:
        return "a window needs a name"
    if len(name) > WINDOW_NAME_MAX:
        return f"a window name is at most {WINDOW_NAME_MAX} characters"
    if name != name.strip():
        return "a window name does not start or end with a space"
    if not all(_allowed(ch) for ch in name):
        return (
            "a window name holds no '.', ':', '\\', '$', '#', control character or byte that"
            " is not UTF-8 (tmux would change it)"
        )
    return None


def window_name_for(given: str) -> str:
    """The name a window a terminal calls ``given`` is saved under:
    itself when it may be one, else each character the rule refuses as
    ``_`` (as tmux itself does with ``.`` and ``:``)."""
    if window_name_problem(given) is None:
        return given
    mapped = "".join(ch if _allowed(ch) else "_" for ch in given).strip()[:WINDOW_NAME_MAX]
    return mapped.strip() or "_"
