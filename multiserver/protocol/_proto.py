"""What the protocol is, apart from its message classes: the version
numbers, the name rule, how a child's end reads, and the rules of the
``Claimed`` frame. Pure, and free of attrs: the message classes
(``_messages``), the codec and both clients share it.

Any change to a message, its fields or its meaning bumps ``PROTOCOL_VERSION``.
"""

from __future__ import annotations

import re

from multiserver import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Any

# 3: Hello.children. A version-2 client never sends it, so a version-3
# daemon serves version 2 unchanged.
# 4: listings in pages (Children.last, Welcome.more) and ChildInfo.argv_omitted.
# Each is left out of the body at its default, and a daemon sets none of them
# for an older client, so version 2 and 3 peers see the frames they know.
# 5: OS strings (argv, cwd, environment: ``OsStr``) whose bytes are not UTF-8
# travel as {"b": base64}. Anything else is version 4; a daemon shows an
# older client such a string escaped (``caf\xe9``), and a client refuses to
# send one to an older daemon.
# 6: Upgrade and Upgraded (the daemon takes new code in place). A daemon
# that picked 5 or less for a connection cannot upgrade; nothing else changed.
# 7: ListChildren.prefixes and .ids (a listing of only the children asked
# about). Omitted at None, so an older daemon sees the frame it knows; a
# client never sends them to one (it lists all and selects itself).
# 8: events (docs/events.md): Watch and its answer Watching, then the
# pushed SessionEvent and EventsMissed. Nothing else changed; a daemon that
# picked 7 or less for a connection answers Watch EPROTO, and a client
# tells its caller the daemon is too old for events.
# 9: sharing (docs/sharing.md): Claim.join and .read_only, Launch.share, ClaimedChild.feed,
# ChildInfo.holders and .watchers (each omitted at its default), HandBack
# and its answer HandedBack, the pushed GiveBack, Shared and Skipped. A
# client that picked 8 or less is never asked to give reading back: a join
# of what it holds is refused (a takeover is not).
PROTOCOL_VERSION = 9
MIN_PROTOCOL_VERSION = 2
OS_BYTES_VERSION = 5
UPGRADE_VERSION = 6
SELECT_VERSION = 7
EVENTS_VERSION = 8
SHARING_VERSION = 9
# The most a ListChildren may select by: each child is matched against
# every prefix, so a peer with a million would stall the daemon's loop.
# A client that would ask for more asks for every child and selects itself.
MAX_SELECT_PREFIXES = 64
MAX_SELECT_IDS = 4096

# What the daemon says it runs (Welcome.server): the installed code's version.
SERVER_NAME = f"multiserver/{__version__}"

# What a session name (Launch.name) may be; the daemon refuses any other.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")

# Fields left out of a body while at their default, by message name ("*":
# every field). Hello's, so that the handshake frame stays what the first
# version-2 clients sent; the fields version 4 added, so that an older peer
# (which rejects unknown fields) sees the frames it knows. Both codecs read
# this table.
OMIT_IF_DEFAULT: dict[str, tuple[str, ...]] = {
    "Hello": ("*",),
    "Welcome": ("more",),
    "Children": ("last",),
    "ListChildren": ("prefixes", "ids"),
    "ChildInfo": ("argv_omitted", "holders", "watchers"),
    "Claim": ("join", "read_only"),
    "Launch": ("share",),
    "ClaimedChild": ("feed",),
}


def select_problem(prefixes: Sequence[str] | None, ids: Collection[int] | None) -> str | None:
    """Why a ListChildren selects by more than a daemon matches (one line),
    or None."""
    if prefixes is not None and len(prefixes) > MAX_SELECT_PREFIXES:
        return f"ListChildren: {len(prefixes)} prefixes; at most {MAX_SELECT_PREFIXES}"
    if ids is not None and len(ids) > MAX_SELECT_IDS:
        return f"ListChildren: {len(ids)} ids; at most {MAX_SELECT_IDS}"
    return None


def selected(
    name: str, child_id: int, prefixes: Sequence[str] | None, ids: Collection[int] | None
) -> bool:
    """Whether a listing that asks for ``prefixes`` and ``ids``
    (``ListChildren``) lists the child ``child_id`` called ``name``: every
    child when both are None, else one whose name begins with one of the
    prefixes or whose id is one of the ids. The daemon selects so, and a
    client of an older daemon (which lists all) selects the same."""
    if prefixes is None and ids is None:
        return True
    return (prefixes is not None and name.startswith(tuple(prefixes))) or (
        ids is not None and child_id in ids
    )


def describe_exit(exit_code: int) -> str:
    """A child's end as a person reads it: "exited with code 3", or, for a
    negative ``ChildInfo.exit_code``, "killed by SIGHUP"."""
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    import signal  # only for a child a signal ended

    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    return f"killed by {name}"


def exit_status(exit_code: int) -> int:
    """A child's end as a shell reports it: its code, or 128+N for signal N."""
    return 128 - exit_code if exit_code < 0 else exit_code


def claimed_problem(children: Sequence[Any], outputs: bytes, nfds: int) -> str | None:
    """Why a ``Claimed`` frame (its ``ClaimedChild`` parts, of either
    message family) is inconsistent with the fds that came with
    it; None if it is not."""
    want = sum(c.fd + c.feed for c in children)
    if want != nfds:
        return f"Claimed: {want} children say their fd comes with the frame, {nfds} fds came"
    if any(
        c.output_len < 0 or (c.child is None and (c.fd or c.feed or c.output_len)) for c in children
    ):
        return "Claimed: a failed child carries output or an fd"
    if sum(c.output_len for c in children) != len(outputs):
        return "Claimed: the output lengths do not add up to the blob"
    return None
