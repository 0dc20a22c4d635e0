"""The pure planner: arrangement + what the daemons said -> what to claim and
what each session becomes. No I/O, no trio; every rule of restore's outcome
is stated here, and how the restore's one deadline is shared (``RestoreDeadline``).

Outcomes (one per leaf, never none):

    attached    its child was claimed (running)
    ended       its child had exited while nobody held it (or, its daemon gone,
                its saved leaf says it had): reported and kept, output and all,
                until a person attaches (which shows the output and closes it)
                or kills it; ``relaunch_ended`` relaunches it instead
    relaunched  no child to go back to (no reference, daemon gone, another
                daemon instance, child unknown): the saved command starts
                again in the saved cwd
    expired     the same, with ``relaunch=False``: reported, nothing started,
                the session stays saved
    timed-out   its daemon did not answer by the deadline: relaunched like
                above (``relaunch=False``: not), and its late partial
                attach goes to the adopter
    held        a client holds its child: another terminal, another restore
                (EBUSY), or an attach client whose daemon died (``_held``):
                it runs; nothing started, the session stays saved
    deferred    on another host that needs a credential (a passphrase): not
                contacted at login; its first attach brings it back
    failed      anything else, with the reason
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Set as AbstractSet
from typing import Literal

import attrs

from multiserver import ChildInfo, describe_exit
from multiserver.internal import screen_reset
from restore.store._model import Arrangement, RestorationRef, SessionLeaf

Outcome = Literal[
    "attached", "ended", "relaunched", "expired", "timed-out", "held", "deferred", "failed"
]
OUTCOMES: tuple[Outcome, ...] = (
    "attached",
    "ended",
    "relaunched",
    "expired",
    "timed-out",
    "held",
    "deferred",
    "failed",
)
# What --no-relaunch leaves a session whose child is gone or did not answer.
NOT_RELAUNCHED = "--no-relaunch: nothing started"
# What becomes of an ended session: its output waits for a person.
KEPT_ENDED = "kept until it is attached (which shows its output) or killed"


@attrs.frozen
class DaemonTarget:
    """The leaves whose children lived on one daemon socket."""

    socket: str
    leaves: tuple[SessionLeaf, ...]


@attrs.frozen
class Plan:
    targets: tuple[DaemonTarget, ...]
    unreferenced: tuple[SessionLeaf, ...]  # never had a child: relaunch


def plan_restore(arrangement: Arrangement) -> Plan:
    """Group the leaves by the daemon socket their child lived on."""
    by_socket: dict[str, list[SessionLeaf]] = {}
    unreferenced: list[SessionLeaf] = []
    for leaf in arrangement.leaves():
        if leaf.host is not None:
            continue  # on another host: the command line restores it, over ssh
        if leaf.ref is None:
            unreferenced.append(leaf)
        else:
            by_socket.setdefault(leaf.ref.socket, []).append(leaf)
    targets = tuple(DaemonTarget(s, tuple(ls)) for s, ls in by_socket.items())
    return Plan(targets, tuple(unreferenced))


@attrs.frozen
class Gone:
    """A leaf whose child is known not to exist any more, and why."""

    leaf: SessionLeaf
    reason: str


def match_children(
    target: DaemonTarget, instance_id: str, children: Iterable[ChildInfo] | None = None
) -> tuple[list[SessionLeaf], list[Gone]]:
    """Which leaves to claim on a daemon that answered as ``instance_id``
    with ``children``; the rest are gone (pids are never trusted alone).
    ``children`` None: the daemon was not asked for its list, and the claim
    answers "unknown" (ENOENT) for a child it does not have."""
    known = None if children is None else {c.id for c in children}
    to_claim: list[SessionLeaf] = []
    gone: list[Gone] = []
    for leaf in target.leaves:
        assert leaf.ref is not None
        if leaf.ref.instance_id != instance_id:
            gone.append(
                Gone(leaf, "the daemon restarted since (another instance): its children are gone")
            )
        elif known is not None and leaf.ref.child_id not in known:
            gone.append(Gone(leaf, f"child {leaf.ref.child_id} is unknown to the daemon"))
        else:
            to_claim.append(leaf)
    return to_claim, gone


@attrs.frozen
class ClaimAnswer:
    """What the daemon answered for one claimed child."""

    child: ChildInfo | None
    errno: int = 0
    message: str = ""


@attrs.frozen
class Decision:
    outcome: Outcome
    detail: str
    relaunch: bool  # start the saved command again
    collect: bool = False  # collect the exited child
    close: bool = False  # remove the session from the arrangement (durable close)
    # Why there is nothing to go back to, for the relaunched session's
    # notice (whose marker line already says a new one was started).
    reason: str = ""


@attrs.frozen
class Options:
    relaunch: bool = True
    relaunch_ended: bool = False


# The part of the restore's deadline the partial attach phase may wait for
# daemons. The rest is kept for building the sessions: collecting ended
# children, starting the relaunch daemon, relaunching (a wedged daemon's
# sessions among them). A phase that waited for the whole deadline would
# leave a wedged daemon's sessions no time to start again.
ATTACH_SHARE = 0.8
# The part of it that looking for the relaunches an earlier restore asked
# for and did not record (``settle_launch``) may take, before the phase. It
# costs nothing unless such a relaunch is pending (after a crash or a store
# that could not be written).
SETTLE_SHARE = 0.25


@attrs.frozen
class RestoreDeadline:
    """The restore's one deadline, fixed once at its start: absolute times
    on trio's clock (``trio.current_time()``). Every step below waits until
    one of them, never for a fresh timeout of its own, so the whole restore
    is over by ``end``."""

    start: float
    end: float

    @classmethod
    def from_timeout(cls, start: float, timeout: float) -> RestoreDeadline:
        return cls(start, start + max(0.0, timeout))

    @classmethod
    def from_end(cls, start: float, end: float) -> RestoreDeadline:
        """A deadline the caller fixed already (it may have passed)."""
        return cls(start, max(start, end))

    @property
    def settle_by(self) -> float:
        """When looking for unrecorded relaunches stops waiting for daemons."""
        return self.start + SETTLE_SHARE * (self.end - self.start)

    @property
    def attach_by(self) -> float:
        """When the partial attach phase stops waiting for daemons."""
        return self.start + ATTACH_SHARE * (self.end - self.start)

    @property
    def seconds(self) -> float:
        """The whole of it, in seconds (to the millisecond, for messages)."""
        return round(self.end - self.start, 3)

    @property
    def attach_seconds(self) -> float:
        """The phase's part, in seconds (to the millisecond, for messages)."""
        return round(self.attach_by - self.start, 3)


@attrs.frozen
class LaunchAnswer:
    """What the daemon of a pending launch said: its run and its children;
    ``instance_id`` None: no daemon runs there."""

    instance_id: str | None
    children: tuple[ChildInfo, ...] = ()


@attrs.frozen
class Settled:
    """A pending launch looked for: ``leaf`` as it is to be saved now (its
    intent cleared; ``found``: its ``ref`` is the child that launch started)."""

    leaf: SessionLeaf
    found: bool
    detail: str


def settle_launch(
    leaf: SessionLeaf, answer: LaunchAnswer, taken: AbstractSet[tuple[str, str, int]]
) -> Settled:
    """What became of the relaunch ``leaf.pending_launch`` asked for. Its
    daemon knows the child by the session's name (a name is one child's on a
    daemon), so a child of that name, in that run of the daemon, that no
    session refers to (``taken``: (socket, instance id, child id) of every
    leaf's ref) is the one: it is the session's now, and is never started a
    second time. Otherwise the launch did not happen, or its child is gone
    with its daemon: the intent is dropped, and the session is restored as
    its ``ref`` says."""
    pending = leaf.pending_launch
    assert pending is not None
    cleared = attrs.evolve(leaf, pending_launch=None)
    if answer.instance_id is None:
        return Settled(cleared, False, "its daemon is not running")
    if answer.instance_id != pending.instance_id:
        return Settled(cleared, False, "its daemon restarted since")
    child = next((c for c in answer.children if c.name == leaf.name), None)
    if child is None:
        return Settled(cleared, False, "the daemon has no child of that name")
    if (pending.socket, answer.instance_id, child.id) in taken:
        return Settled(cleared, False, f"child {child.id} is another session's")
    ref = RestorationRef(pending.socket, answer.instance_id, child.id, child.pid)
    return Settled(
        attrs.evolve(cleared, ref=ref),
        True,
        f"found the relaunch an earlier restore did not record (pid {child.pid})",
    )


def decide_unsettled(socket: str) -> Decision:
    """A session whose earlier relaunch could not be looked for (its daemon
    did not answer in time): nothing is started, so it never runs twice."""
    return Decision(
        "timed-out",
        f"an earlier relaunch on {socket} may be running: its daemon did not answer;"
        " not started again (the next restore looks again)",
        relaunch=False,
    )


def decide_claimed(answer: ClaimAnswer, options: Options) -> Decision:
    """The outcome of a leaf whose child was asked for."""
    child = answer.child
    if child is None:
        if answer.errno == errno.ENOENT:
            return decide_gone("the child is unknown to the daemon", options)
        if answer.errno == errno.EBUSY:
            return Decision(
                "held",
                "held by another client (attach to it there, or `multiserver attach`)",
                relaunch=False,
            )
        return Decision(
            "failed", answer.message or f"claim failed (errno {answer.errno})", relaunch=False
        )
    if child.state == "exited":
        ended = "ended" if child.exit_code is None else describe_exit(child.exit_code)
        if options.relaunch_ended:
            return Decision(
                "relaunched",
                f"had ended ({ended}); started again",
                relaunch=True,
                collect=True,
            )
        return Decision("ended", f"session ended ({ended}); {KEPT_ENDED}", relaunch=False)
    return Decision("attached", f"pid {child.pid}", relaunch=False)


def decide_saved_end(leaf: SessionLeaf, why: str, options: Options) -> Decision | None:
    """A leaf whose program had ended when its output was last saved
    (``exit_code``), whose daemon cannot show it now (``why``: gone, or not
    answering). Nobody saw that end, so it is reported as ended and the leaf
    kept, with its saved output, as a live ended session would be; nothing
    is started unless ``relaunch_ended``. None for a leaf that had not ended
    (see ``decide_gone``)."""
    if leaf.exit_code is None:
        return None
    ended = describe_exit(leaf.exit_code)
    if options.relaunch_ended:
        return Decision(
            "relaunched", f"had ended ({ended}); {why}; started again", relaunch=True, reason=why
        )
    return Decision(
        "ended", f"session ended ({ended}); {why}; its saved output is {KEPT_ENDED}", relaunch=False
    )


def decide_gone(reason: str, options: Options) -> Decision:
    if options.relaunch:
        return Decision(
            "relaunched",
            f"{reason}; session expired, new one started",
            relaunch=True,
            reason=reason,
        )
    return Decision("expired", f"{reason}; {NOT_RELAUNCHED}", relaunch=False, reason=reason)


def decide_timed_out(timeout: float, options: Options) -> Decision:
    reason = f"daemon did not answer within {timeout:g} s"
    if options.relaunch:
        return Decision("timed-out", f"{reason}; new one started", relaunch=True, reason=reason)
    return Decision("timed-out", f"{reason}; {NOT_RELAUNCHED}", relaunch=False, reason=reason)


def decide_held(client_pid: int) -> Decision:
    """A leaf whose child is gone as far as the daemons can tell, which a
    client whose daemon died still holds: starting it again would make a
    second copy of the session the user is typing in. Once that client
    lets go, the program ends, and the next restore relaunches it."""
    return Decision(
        "held",
        f"held by a client whose daemon died (pid {client_pid}); not relaunched",
        relaunch=False,
    )


RELAUNCH_MARKER = "--- multiserver: the earlier session expired; a new one was started ---"


def relaunch_notice(leaf: SessionLeaf, why: str) -> bytes:
    """What a relaunched session shows first: its saved scrollback, then the
    terminal reset (``screen_reset``: the old program's screen ends there,
    its modes with it: the new program starts on a clean terminal), then a
    marker line that says what happened. A notice nobody has seen yet (an
    earlier relaunch's, never attached) comes first: the scrollback is what
    came after it (bounded, the newest bytes kept)."""
    head = (leaf.notice or b"") + (leaf.scrollback or b"")
    if head:
        if not head.endswith(b"\n"):
            head += b"\r\n"
        head += screen_reset(head)
    return head + f"{RELAUNCH_MARKER}\r\n({why})\r\n".encode()


# --- sessions on other hosts ------------------------------------------------------


@attrs.frozen
class HostChild:
    """A child of one of a host's daemons, as its ``ls --json`` gave it:
    the daemon's socket and instance there, the child under its name there,
    and ``via``: the host's own host, for a session that host reaches in
    turn (None: its own)."""

    socket: str
    instance_id: str
    child: ChildInfo
    via: str | None = None


@attrs.frozen
class HostAnswer:
    """What a host said when asked for its sessions (over ssh, by the
    command line): ``listed`` them (name -> (instance, child id, pid, state,
    exit code); ``children``: each as a whole, for the adopter), needs a
    ``credential`` (a passphrase: not asked at login), ``failed`` (why), or
    ``silent`` (not within its timeout)."""

    kind: Literal["listed", "credential", "failed", "silent"]
    host: str
    sessions: dict[str, tuple[str, int, int, str, int | None]] = attrs.Factory(dict)
    why: str = ""
    children: tuple[HostChild, ...] = ()


# Why a session of a host has nothing to go back to there.
GONE_THERE = "gone from its host (grace window elapsed, or the host rebooted)"


def decide_remote(leaf: SessionLeaf, answer: HostAnswer, options: Options) -> Decision:
    """The outcome of a session on another host (``leaf.host``), from its
    host's answer (pure). A host that needs a credential is deferred to the
    session's first attach, as Orca defers targets that need a passphrase;
    a silent one is left for the next try, never relaunched elsewhere."""
    name = leaf.name.rpartition(":")[2]
    if answer.kind == "credential":
        return Decision(
            "deferred",
            f"{answer.host} needs a credential: `multiserver attach {leaf.name}` brings it back",
            relaunch=False,
        )
    if answer.kind == "failed":
        return Decision("failed", answer.why, relaunch=False)
    if answer.kind == "silent":
        return Decision("timed-out", f"{answer.why}; nothing started", relaunch=False)
    found = answer.sessions.get(name)
    ref = leaf.ref
    if found is not None:
        # ``attach HOST:NAME`` reaches the host's session of that name: not
        # the saved child (a relaunch whose record was lost, or one made
        # there since), it is the session now (its ref follows it), never
        # a reason to start a second one.
        _instance, _child, pid, state, code = found
        same = ref is not None and found[:2] == (ref.instance_id, ref.child_id)
        other = "" if same else f" (not the saved child: {name} there is taken as it)"
        if state == "exited":
            ended = "ended" if code is None else describe_exit(code)
            return Decision(
                "ended", f"session ended on {answer.host} ({ended}){other}", relaunch=False
            )
        return Decision("attached", f"running on {answer.host}, pid {pid}{other}", relaunch=False)
    why = GONE_THERE
    if ref is None:
        why = "never started"
    return decide_gone(why, options)
