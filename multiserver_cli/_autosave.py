"""One saver while sessions are saved, with or without the login service.

What a session nobody holds shows reaches the store only through the
saver (``multiserver save --scrollback --every S``, ``_saver``): the
daemon keeps it in memory, and a reboot takes it. The service runs one
for the whole login; without the service nothing did, and a session
made with ``new -d`` and never attached came back from a reboot with
only the marker. So the commands that put a session on a daemon and
save it (``new``, ``restore``) make sure one runs: unless some saver
holds its lock already (the service's, or one started earlier), they
start ``save --scrollback --every S --until-idle`` (S: config.toml's ``save_every``, 5 s by default), detached,
which stops by itself once no saved session has a running daemon.

Why the commands and not the daemon: the daemon imports nothing of
``restore`` and knows no arrangement (docs/architecture.md), and a
daemon started by the library for an app's sessions has nothing saved
to keep. Why not the attach client: it saves what it shows, only while
attached. Checking costs a command one ``flock`` on the lock file; the
saver starts once per login at most, in the background.

``MULTISERVER_SAVER=off`` turns it off (the tests do, but for the tests
of this; a person who wants no background process, or runs their own).
"""

from __future__ import annotations

import os
import sys

from multiserver import printable

# How often the started saver writes (seconds): the service's period.
# One saver per user at a time (in the runtime dir, next to the daemons'
# locks; it holds its pid); what a started one says goes to its log.
LOCK_NAME = "multiserver-saver.lock"
LOG_NAME = "saver.log"


def saver_argv() -> list[str]:
    """The saver a command starts: this interpreter's ``multiserver``, with
    ``-P`` (no caller's directory first on ``sys.path``), saving every
    ``save_every`` seconds (``_settings``)."""
    from multiserver_cli import _settings

    return [
        sys.executable,
        "-P",
        "-m",
        "multiserver_cli",
        "save",
        "--scrollback",
        "--every",
        f"{_settings.current().value('save_every'):g}",
        "--until-idle",
    ]


def ensure_saver() -> int | None:
    """Start a saver unless one runs or ``MULTISERVER_SAVER=off``; the pid
    of the one started, if any. Never fails the command that asks: a saver
    that cannot start is one warning line (its sessions still run)."""
    if os.environ.get("MULTISERVER_SAVER", "").lower() in ("off", "0", "no", "false"):
        return None
    from multiserver import (
        MultiserverError,
        ensure_private_dir,
        lock_is_held,
        runtime_dir,
        spawn_detached,
        state_dir,
    )

    try:
        if lock_is_held(ensure_private_dir(runtime_dir()) / LOCK_NAME):
            return None
        log = os.open(
            ensure_private_dir(state_dir()) / LOG_NAME,
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
            0o600,
        )
        try:
            leader = spawn_detached(saver_argv(), stderr=log)
        finally:
            os.close(log)
    except (OSError, MultiserverError) as exc:
        print(
            f"multiserver: no saver started (what detached sessions show is not kept):"
            f" {printable(str(exc))}",
            file=sys.stderr,
        )
        return None
    # The leader is the saver (it does not fork again). Not waited for: it
    # outlives this command, and init reaps it once this command exits.
    return leader.pid
