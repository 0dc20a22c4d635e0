"""The command's naming policy: one name, one session, across every daemon.

Pure: every rule is decided here from a ``Survey`` (what the daemons said,
and the saved arrangement's sessions); ``_sessions`` gathers it, and the
commands act on the answers. No trio, no socket, no store.

**Who owns a name.**

- A live child (running, or exited and not yet collected) is known by its
  *shown* name: the name of the saved session that refers to it, else its
  daemon's name for it. That is the name ``ls`` lists and ``attach`` takes.
- Its daemon's name for it is taken too, where the two differ (an adopted
  late original ``build-late`` that its daemon calls ``build``): the daemon refuses
  a second ``build`` on its side, and a second one elsewhere would be
  listed beside a session that its daemon already calls so.
- A saved session owns its name even with no live child (its daemon is not
  running, restarted, or did not answer), until it is restored (``restore``,
  or ``new -A -n NAME``, which starts it again) or killed (``kill NAME``
  forgets it). Why: it is a session the user has, which ``restore`` brings
  back under that name with its saved command, cwd and scrollback. A new
  session that took the name would either make that restore fail (its
  daemon refuses the duplicate) or end with two sessions of one name; and
  saving the new one would overwrite the saved session with an unrelated
  one. A child on a daemon that did not answer cannot be seen; its saved
  session is what keeps its name.

**Names.** ``NAME_RE``, not empty, and not ``orphan-…`` for a new session:
older versions of the adopter named adopted orphans ``orphan-CMD-N``, and a
session of the user's must not pass for one. A default
name is the smallest positive number no session owns (``default_name``).

**Races.** Nothing here holds a lock: two ``new`` at once may pick the same
default name. On one daemon the daemon decides (it refuses a duplicate
name, EEXIST), and ``new`` takes the next free name, ``NAME_TRIES`` times at
most. Across daemons nothing arbitrates: two ``new`` starting sessions on
daemons 1 and 2 at the same moment may both get ``4``, and an explicit name
checked against a daemon that did not answer may exist there. What remains
then is what old data can also give: ``attach``, ``peek`` and ``kill`` refuse
a name that matches on two daemons, list the candidates and say how to
choose (``--daemon N``); nothing acts on the wrong one silently.
"""

from __future__ import annotations

import os
from pathlib import Path

from multiserver import describe_exit
from multiserver.internal import NAME_RE, record, replaced
from multiserver_cli._format import daemon_label

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence

    from multiserver import ChildInfo
    from restore import SessionLeaf

# Names the adopter gives (adopter._policy.orphan_name); no new session takes one.
RESERVED_PREFIX = "orphan-"
# How many default names a `new` tries when a daemon refuses one as taken.
NAME_TRIES = 5


@record
class DaemonView:
    """What one daemon answered: its socket, its run, its children."""

    socket: Path
    instance_id: str
    pid: int
    children: list[ChildInfo]


@record
class Survey:
    """Everything names are decided on. ``silent``: sockets found that did
    not answer (their children are unknown); ``saved``: the saved sessions."""

    daemons: Sequence[DaemonView]
    silent: frozenset[str] = frozenset()
    saved: Sequence[SessionLeaf] = ()
    problems: Sequence[str] = ()  # one line each, for messages
    # Saved sessions of other hosts (HOST:NAME): never a name here, but
    # what a person who types NAME alone may mean.
    elsewhere: Sequence[str] = ()


@record
class Session:
    """One session as the command sees it: a live child (``child`` set), or
    a saved session with none. ``name`` is its shown name."""

    name: str
    socket: str
    child: ChildInfo | None
    instance_id: str = ""
    saved: bool = False
    daemon_name: str = ""  # the daemon's name for the live child
    leaf: SessionLeaf | None = None  # a saved session with no live child
    why_not_running: str = ""  # for it
    late_of: str = ""  # a live child: the saved session whose late original it is
    # Its daemon did not answer: its program may well run there still, and
    # nothing may advise forgetting it or starting it again.
    unanswered: bool = False

    @property
    def renamed(self) -> bool:
        """A live child its daemon calls otherwise (a saved name of its own)."""
        return self.child is not None and self.daemon_name != self.name

    @property
    def daemon(self) -> str:
        return daemon_label(self.socket) if self.socket else "-"

    @property
    def state(self) -> str:
        """What it is, in words: running, how it ended, or why it is not running."""
        if self.child is None:
            return f"saved, not running: {self.why_not_running}"
        if self.child.exit_code is None:
            return "running"
        return describe_exit(self.child.exit_code)

    def where(self) -> str:
        if self.child is None:
            return self.state
        return f"on daemon {self.daemon}, {self.state}"


def _norm(socket: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.fspath(socket))


def sessions(survey: Survey) -> list[Session]:
    """Every session: the live children under their shown names, daemon by
    daemon in the daemons' order, then the saved sessions with no live child.

    One name, one session: a child its daemon calls by the name of a saved
    session that is not it is that session's late original, shown as
    ``NAME-late`` (``restore.late_name``), unless it is the session's own
    relaunch whose record was lost (``restore.relaunch_of``): then it is
    the session."""
    from restore import late_name, relaunch_of

    by_child = {
        (_norm(leaf.ref.socket), leaf.ref.instance_id, leaf.ref.child_id): leaf.name
        for leaf in survey.saved
        if leaf.ref is not None
    }
    keys = [
        (d, c, (_norm(d.socket), d.instance_id, c.id)) for d in survey.daemons for c in d.children
    ]
    live = {by_child[key] for _, _, key in keys if key in by_child}
    saved_by_name = {leaf.name: leaf for leaf in survey.saved}
    taken = set(saved_by_name) | {c.name for _, c, _ in keys}
    out: list[Session] = []
    for d, c, key in keys:
        shown, late_of = by_child.get(key, c.name), ""
        namesake = None if key in by_child else saved_by_name.get(c.name)
        if namesake is not None:
            if c.name not in live and relaunch_of(c, str(d.socket), d.instance_id, namesake):
                live.add(c.name)  # the session itself, its record lost
            else:
                late_of, shown = c.name, late_name(c.name, taken)
                taken.add(shown)
        out.append(
            Session(
                shown,
                str(d.socket),
                c if shown == c.name else replaced(c, name=shown),
                d.instance_id,
                saved=key in by_child,
                daemon_name=c.name,
                late_of=late_of,
            )
        )
    answered = {_norm(d.socket): d.instance_id for d in survey.daemons}
    silent = {_norm(s) for s in survey.silent}
    for leaf in survey.saved:
        if leaf.name in live:
            continue
        why = _why_not_running(leaf, answered, silent)
        socket = "" if leaf.ref is None else leaf.ref.socket
        unanswered = leaf.ref is not None and _norm(leaf.ref.socket) in silent
        out.append(
            Session(
                leaf.name,
                socket,
                None,
                saved=True,
                leaf=leaf,
                why_not_running=why,
                unanswered=unanswered,
            )
        )
    return out


def _why_not_running(leaf: SessionLeaf, answered: dict[str, str], silent: set[str]) -> str:
    ref = leaf.ref
    if ref is None:
        return "never started"
    socket = _norm(ref.socket)
    label = f"daemon {daemon_label(socket)}"
    if socket in answered:
        if answered[socket] != ref.instance_id:
            return f"{label} restarted since"
        return f"its program is gone from {label}"
    if socket in silent:
        return f"{label} did not answer"
    return f"{label} is not running"


def advice(saved: Session) -> str:
    """What to do about ``saved``, a saved session with no live child: a
    session whose daemon only did not answer may run there still, and is
    neither forgotten nor started again on that word."""
    if saved.unanswered:
        return "its program may run there still: try again once it answers"
    return f"`multiserver restore` brings it back, `multiserver kill {saved.name}` forgets it"


def taken(survey: Survey) -> set[str]:
    """Every name a new session may not have."""
    return {s.name for s in sessions(survey)} | {c.name for d in survey.daemons for c in d.children}


def default_name(taken: Collection[str]) -> str:
    """The smallest positive number that is not taken."""
    n = 1
    while str(n) in taken:
        n += 1
    return str(n)


def name_problem(name: str, *, new: bool) -> str | None:
    """Why ``name`` cannot be a session's name (``new``: a new session's),
    or None. One line, for exit status 2."""
    if not name:
        return "a session name cannot be empty" + (
            " (leave -n out for the next free number)" if new else ""
        )
    if not NAME_RE.fullmatch(name):
        return (
            f"bad session name {name!r}: use letters, digits, '_', '.', '-'"
            " (first a letter or digit, at most 128)"
        )
    if new and name.startswith(RESERVED_PREFIX):
        return (
            f"bad session name {name!r}: names beginning {RESERVED_PREFIX!r} are the"
            " adopter's (multiserver orphans --adopt); choose another"
        )
    return None


def new_name_conflict(survey: Survey, name: str) -> str | None:
    """Why a new session may not be called ``name``: where the session of
    that name is, and in what state; None if the name is free."""
    owners = [s for s in sessions(survey) if s.name == name]
    live = [s for s in owners if s.child is not None]
    if live:
        where = "; ".join(s.where() for s in live)
        return (
            f"a session named {name!r} exists already ({where});"
            " choose another name, or attach to it"
        )
    if owners:
        (saved,) = owners  # saved names are unique
        return f"a session named {name!r} is {saved.state}; {advice(saved)}; or choose another name"
    for s in sessions(survey):
        if s.renamed and s.daemon_name == name:
            return (
                f"the name {name!r} is taken: daemon {s.daemon} calls the session"
                f" {s.name!r} so; choose another name"
            )
    return None


@record
class Found:
    session: Session  # a live child


@record
class SavedOnly:
    session: Session  # a saved session with no live child


@record
class Missing:
    message: str  # one line


@record
class Ambiguous:
    message: str  # one line: the candidates and how to choose


@record
class Unanswered:
    """No session of that name among the daemons that answered, but one
    that could hold it did not answer: nobody can say it is missing."""

    message: str  # one line: the daemons that did not answer, and why


Resolution = Found | SavedOnly | Missing | Ambiguous | Unanswered


def resolve(
    survey: Survey, name: str, *, command: str, scope: str | os.PathLike[str] | None = None
) -> Resolution:
    """The session ``name`` names for ``command`` (attach, peek, kill, new
    -A). ``scope``: only live children of that daemon's socket (``--daemon
    N``); a saved session with no live child is on no daemon and is found
    either way.

    1. Live children shown under that name (a saved session's child by the
       saved name, any other by its daemon's): one is found; several (old
       data, or a race across daemons) are refused with the candidates and
       how to choose, even when one of them is saved: acting on either
       without a word is what this refusal is for.
    2. Else a saved session of that name with no live child.
    3. Else, if a daemon in scope did not answer, nobody knows
       (``Unanswered``); only when every one did is it ``Missing``.
    """
    every = sessions(survey)
    in_scope = [
        s
        for s in every
        if s.child is not None and (scope is None or _norm(s.socket) == _norm(scope))
    ]
    matches = [s for s in in_scope if s.name == name]
    if len(matches) == 1:
        return Found(matches[0])
    if len(matches) > 1:
        where = ", ".join(
            f"daemon {s.daemon} ({s.state}{', saved' if s.saved else ''})" for s in matches
        )
        return Ambiguous(
            f"several sessions are named {name!r}: on {where}; choose one with --daemon N,"
            f" e.g. multiserver --daemon {matches[-1].daemon} {command} {name}"
        )
    for s in every:
        if s.child is None and s.name == name:
            return SavedOnly(s)
    silent = [s for s in survey.silent if scope is None or _norm(s) == _norm(scope)]
    if silent:
        labels = ", ".join(f"daemon {daemon_label(s)}" for s in sorted(silent))
        return Unanswered(
            f"cannot tell whether there is a session named {name!r}: {labels} did not answer"
            f"{_hint(survey, name, command)}; try again once it answers"
        )
    return Missing(f"no session named {name!r}{_hint(survey, name, command)}")


def _hint(survey: Survey, name: str, command: str) -> str:
    notes = [
        f"daemon {s.daemon} calls the session {s.name!r} so"
        for s in sessions(survey)
        if s.renamed and s.daemon_name == name
    ]
    notes += [
        f"{there} is a session of host {there.partition(':')[0]}: multiserver {command} {there}"
        for there in survey.elsewhere
        if there.partition(":")[2] == name
    ]
    notes += list(survey.problems)
    return f" ({'; '.join(notes)})" if notes else ""


def pick_default(survey: Survey, refused: Iterable[str] = ()) -> str:
    """The default name for a new session, past names a daemon refused."""
    return default_name(taken(survey) | set(refused))


@record
class Create:
    """Start a new session called ``name`` (``explicit``: the user's, which
    is never replaced by another). ``saved``: the saved session, not
    running, that ``new -A`` starts again (its command and cwd, unless given)."""

    name: str
    explicit: bool
    saved: SessionLeaf | None = None


@record
class Refusal:
    message: str  # one line, exit status 1


NewPlan = Found | Create | Refusal


def plan_new(
    survey: Survey,
    name: str | None,
    *,
    attach_existing: bool = False,
    scope: str | os.PathLike[str] | None = None,
) -> NewPlan:
    """What ``new`` does: attach (``-A`` and a live session ``name``),
    create, or refuse. ``name`` None: the next free number. ``name`` must
    have passed ``name_problem`` already (for ``-A``, as an existing
    session's: an adopted ``orphan-…`` is attached or started again, but
    not created)."""
    if name is None:
        return Create(pick_default(survey), explicit=False)
    if attach_existing:
        found = resolve(survey, name, command="attach", scope=scope)
        if isinstance(found, Found):
            return found
        if isinstance(found, Ambiguous):
            return Refusal(found.message)
        if isinstance(found, SavedOnly):
            leaf = found.session.leaf
            assert leaf is not None
            if found.session.unanswered:
                # Its program may well run there: a second one is not started.
                return Refusal(
                    f"session {name!r} is {found.session.state}; {advice(found.session)}"
                )
            return Create(name, explicit=True, saved=leaf)
        problem = name_problem(name, new=True)
        if problem is not None:
            return Refusal(problem)
        if isinstance(found, Unanswered):
            # It may run on the daemon that did not answer: not a second one.
            return Refusal(found.message)
    conflict = new_name_conflict(survey, name)
    if conflict is not None:
        return Refusal(conflict)
    return Create(name, explicit=True)


def split_target(text: str) -> tuple[str | None, str]:
    """``HOST:SESSION`` -> (HOST, SESSION); a plain name -> (None, name)."""
    host, sep, name = text.partition(":")
    return (host, name) if sep else (None, text)
