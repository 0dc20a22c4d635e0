"""What bears on one name: a ``Survey`` cut to what deciding on one
session needs (``narrowed``), so that a command about one session asks its
daemons and its store for only that (``_sessions.survey_about``). Pure, like
the policy it serves (``_names``); ``tests/cli/test_names_policy.py`` holds
every rule of the policy equal on the cut and the whole survey."""

from __future__ import annotations

import os

from multiserver.internal import replaced
from multiserver_cli._names import Survey


def narrowed(survey: Survey, name: str) -> Survey:
    """``survey`` cut to what deciding on the session ``name`` needs
    (``resolve``, ``new_name_conflict``, ``plan_new`` with a name): the
    children and saved sessions whose names begin with
    ``restore.late_family`` (the name, its late originals and the names
    their late names count past), the children those sessions refer to, the saved sessions that
    refer to those children (a child shown under a saved name), and the
    other hosts' sessions of that bare name. Each of those rules decides on
    ``name`` as it would over the whole survey
    (``tests/cli/test_names_policy.py`` holds them equal), so a command about one
    session asks its daemons and its store for only these (``_sessions``)."""
    from restore import late_family

    prefix = late_family(name)
    wanted = {
        _key(leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id)
        for leaf in survey.saved
        if leaf.ref is not None and leaf.name.startswith(prefix)
    }
    daemons = []
    kept: set[tuple[str, str, int]] = set()
    for d in survey.daemons:
        children = []
        for c in d.children:
            key = _key(d.socket, d.instance_id, c.id)
            if c.name.startswith(prefix) or key in wanted:
                children.append(c)
                kept.add(key)
        daemons.append(d if len(children) == len(d.children) else replaced(d, children=children))
    saved = [
        leaf
        for leaf in survey.saved
        if leaf.name.startswith(prefix)
        or (
            leaf.ref is not None
            and _key(leaf.ref.socket, leaf.ref.instance_id, leaf.ref.child_id) in kept
        )
    ]
    elsewhere = [n for n in survey.elsewhere if n.partition(":")[2] == name]
    return replaced(survey, daemons=daemons, saved=saved, elsewhere=elsewhere)


def _key(socket: str | os.PathLike[str], instance_id: str, child_id: int) -> tuple[str, str, int]:
    return (os.path.normpath(os.fspath(socket)), instance_id, child_id)
