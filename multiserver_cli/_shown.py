"""What ``ls`` counts as WAITING: output produced since the last detach.

On detach, ``attach`` hands the daemon the screen it leaves behind
(``Release.replace_output``), so the next attach replays it; from then on
the daemon's buffer for that child is that screen followed by new output.
The daemon's ``buffered_bytes`` counts both. No field of the protocol tells
them apart, and none is added: the detaching client writes down how many
bytes it handed back (one small file per child in the runtime dir, named by
the daemon's instance id and the child id), and ``ls`` subtracts them
(``unseen``). The daemon drops the oldest bytes first, so a screen of S
bytes followed by new output leaves

    buffered + dropped == S + new     (dropped: since the replacement)

and of the dropped bytes the first S were the screen's.

What this cannot see: a client other than ``multiserver attach`` that
claims without ``keep_output`` empties the buffer (the record is then
stale); a record whose screen is more than the buffer now holds is ignored
(``unseen`` falls back to the daemon's figures). A daemon whose buffer limit
is below what was handed back (256 KiB) keeps less than S: the figure then
counts the kept part of the screen too, as before. Records of children that
are gone are removed by ``ls``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from multiserver import MultiserverError
from multiserver.internal import check_private_dir, ensure_private_dir, runtime_dir, write_whole

_RECORD = re.compile(r"^([0-9a-f]+)-([0-9]+)$")
DIR_NAME = "multiserver-shown"

Key = tuple[str, int]  # daemon instance id, child id


def unseen(buffered: int, dropped: int, shown: int) -> tuple[int, int]:
    """(bytes kept, bytes dropped) of what a child wrote after its last
    client handed back ``shown`` bytes of screen; the daemon holds
    ``buffered`` and dropped ``dropped`` since. A record that does not fit
    (``shown`` more than both together) is not this buffer's: ignored."""
    if shown <= 0 or buffered + dropped < shown:
        return buffered, dropped
    new_dropped = max(0, dropped - shown)
    return buffered + dropped - shown - new_dropped, new_dropped


def _dir() -> Path:
    return runtime_dir() / DIR_NAME


def record(instance_id: str, child_id: int, shown: int) -> None:
    """Write down that ``shown`` bytes of this child's kept output were
    already on the user's screen. Best effort: a failure only leaves WAITING
    counting them, as the daemon does."""
    if not re.fullmatch(r"[0-9a-f]+", instance_id):
        return
    with contextlib.suppress(OSError, MultiserverError):
        d = ensure_private_dir(_dir())
        write_whole(d / f"{instance_id}-{child_id}", str(shown).encode())


def load() -> dict[Key, int]:
    """Every record, by (daemon instance id, child id); none from a dir
    another user could have written (``check_private_dir``)."""
    out: dict[Key, int] = {}
    try:
        check_private_dir(_dir())
        names = os.listdir(_dir())
    except (OSError, MultiserverError):
        return out
    for name in names:
        m = _RECORD.match(name)
        if m is None:
            continue
        try:
            out[(m.group(1), int(m.group(2)))] = int((_dir() / name).read_text() or 0)
        except (OSError, ValueError):
            continue
    return out


def prune(records: Iterable[Key], live: set[Key], instances: set[str], *, all_seen: bool) -> None:
    """Remove records of children that are gone: of a daemon that answered
    (``instances``) and no longer has the child, or, when every daemon
    answered (``all_seen``), of a daemon run that no longer exists."""
    for key in records:
        instance, _ = key
        if key in live:
            continue
        if instance in instances or all_seen:
            with contextlib.suppress(OSError):
                os.unlink(_dir() / f"{instance}-{key[1]}")
