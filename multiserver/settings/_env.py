"""What a session's program inherits of its client's environment. Pure.

Two rules, at two places:

- **The daemon's** (``child_env``, applied to every Launch, whoever the
  client): a child never inherits ``TMUX``, ``TMUX_PANE``, ``STY`` or
  ``WINDOW`` (they name the terminal multiplexer the *client* runs in: with
  them, tmux or screen inside a session thinks it is nested in a server it
  is not attached to, and refuses or talks to the wrong one), nor the
  client's own ``MULTISERVER_*`` settings (a daemon number or runtime dir
  meant for the client is not the session's). ``TERM`` is set if missing.
- **The command's** (``launch_env``, applied by ``multiserver new`` and
  ``multiserver restore``'s relaunches, not by the library): credentials
  stay out of programs that never needed them. A variable whose name matches
  one of ``DEFAULT_STRIP_ENV``, ``$MULTISERVER_STRIP_ENV`` or a
  ``--strip-env`` pattern is left out, unless it matches a
  ``$MULTISERVER_KEEP_ENV`` or ``--keep-env`` pattern (``--keep-env '*'``
  turns the command's stripping off). Patterns are shell globs over the
  whole name, case-sensitive (``fnmatchcase``); a name without ``*?[`` is
  exact. The variables hold colon-separated lists.

The default list is conservative: names that by convention hold a secret,
and nothing that holds configuration (``ANTHROPIC_BASE_URL``,
``AWS_PROFILE`` and ``SSH_AUTH_SOCK`` stay). Its first entry covers
``ANTHROPIC_API_KEY``, ``CLAUDE_API_KEY``, ``OPENAI_API_KEY``,
``GEMINI_API_KEY`` and the like.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

from multiserver.settings._setting_kinds import split_patterns

DEFAULT_TERM = "xterm-256color"
OWN_ENV_PREFIX = "MULTISERVER_"
# The client's terminal multiplexer (tmux, GNU screen): never a session's.
NEVER_INHERITED = frozenset({"TMUX", "TMUX_PANE", "STY", "WINDOW"})

DEFAULT_STRIP_ENV: tuple[str, ...] = (
    "*_API_KEY",
    "*_API_TOKEN",
    "*_AUTH_TOKEN",
    "*_OAUTH_TOKEN",
    "*_ACCESS_TOKEN",
    "*_SECRET_ACCESS_KEY",
    "*_SESSION_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
)
STRIP_VAR = "MULTISERVER_STRIP_ENV"  # as _settings.ENVIRONMENT names them
KEEP_VAR = "MULTISERVER_KEEP_ENV"


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment a child gets from the daemon: the client's, less the
    client's multiplexer and the daemon's own variables, with TERM set."""
    out = {
        k: v
        for k, v in env.items()
        if k not in NEVER_INHERITED and not k.startswith(OWN_ENV_PREFIX)
    }
    if not out.get("TERM"):
        out["TERM"] = DEFAULT_TERM
    return out


# A colon-separated list of names or globs (empty entries ignored): as the
# table of settings reads $MULTISERVER_STRIP_ENV and $MULTISERVER_KEEP_ENV.
env_patterns = split_patterns


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def strip_env(
    env: Mapping[str, str], strip: Iterable[str], keep: Iterable[str] = ()
) -> dict[str, str]:
    """``env`` without the variables a ``strip`` pattern matches, unless a
    ``keep`` pattern matches them too."""
    strip, keep = list(strip), list(keep)
    return {k: v for k, v in env.items() if not _matches(k, strip) or _matches(k, keep)}


def launch_env(
    environ: Mapping[str, str], strip: Iterable[str] = (), keep: Iterable[str] = ()
) -> dict[str, str]:
    """What the command sends as a new session's environment: ``environ``
    less ``DEFAULT_STRIP_ENV``, ``environ``'s ``$MULTISERVER_STRIP_ENV`` and
    ``strip`` (the ``--strip-env`` options), keeping what
    ``$MULTISERVER_KEEP_ENV`` or ``keep`` (``--keep-env``) names."""
    return strip_env(
        environ,
        [*DEFAULT_STRIP_ENV, *env_patterns(environ.get(STRIP_VAR)), *strip],
        [*env_patterns(environ.get(KEEP_VAR)), *keep],
    )
