"""Hosts: other machines whose multiserver this one reaches through OpenSSH.

A host is a name (what ``db1:web`` starts with), how ssh reaches it (its
destination, as ``ssh`` takes it: the user's ``~/.ssh/config``, agent,
jump hosts and known_hosts all apply), the remote ``multiserver`` command,
and its grace window (how long a session started through it lives with no
client). They are kept in ``hosts.json`` in the config dir
(``$MULTISERVER_CONFIG_DIR``, else the user's config dir: ``_paths.user_dir``), written
whole (a temporary file renamed over it); a file that cannot be read is
said in one line and never overwritten by a command that only reads.

Nothing here runs ssh (``_ssh`` does); everything here is pure but the
file's read and write. A setting that is not one is a HostSettingError.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from multiserver import UnsafeDirectory
from multiserver.internal import check_path_chain, ensure_private_dir, record, write_whole
from restore.remote._errors import HostSettingError, HostsFileError

HOST_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# What ssh takes as a destination: [user@]host[:port] or ssh://...; never an
# option (a leading "-"), never a space or a control character.
_DEST_RE = re.compile(r"[^\s\x00-\x1f\x7f-][^\s\x00-\x1f\x7f]{0,254}")
GRACE_DEFAULT = 300.0
GRACE_MIN, GRACE_MAX = 60.0, 3600.0
# How long a command waits for a host, connecting included (Orca's
# per-target bound).
TIMEOUT_DEFAULT = 15.0
TIMEOUT_MAX = 600.0
FILE_NAME = "hosts.json"
_FORMAT = 1


# A light record (attrs.frozen to a type checker): `ls` reads the hosts
# file on every run, and must not import attrs for it.
@record
class Host:
    """One remote machine. ``grace``: seconds a session started through it
    lives with no client (None: for ever). ``needs_credential``: its last
    connection asked for a passphrase or password (restore defers it).
    ``timeout``: how long to wait for it."""

    name: str
    dest: str
    command: str = "multiserver"
    grace: float | None = GRACE_DEFAULT
    needs_credential: bool = False
    timeout: float = TIMEOUT_DEFAULT


def check_host_name(name: str) -> str:
    if not HOST_NAME_RE.fullmatch(name):
        raise HostSettingError(
            f"bad host name {name!r}: letters, digits, '_', '.' and '-', not first"
            " (it goes before ':' in HOST:SESSION)"
        )
    return name


def check_dest(dest: str) -> str:
    if dest.startswith("-"):
        raise HostSettingError(f"bad ssh destination {dest!r}: it must not start with '-'")
    if not _DEST_RE.fullmatch(dest):
        raise HostSettingError(f"bad ssh destination {dest!r}: no spaces or control characters")
    return dest


def check_command(command: str) -> str:
    if not command or command.startswith("-") or "\n" in command or "\x00" in command:
        raise HostSettingError(f"bad remote command {command!r}")
    return command


def parse_grace(text: str) -> float | None:
    """``--grace``: seconds (60-3600) or ``none``."""
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise HostSettingError(f"bad --grace {text!r}: seconds (60-3600) or 'none'") from None
    if not grace_ok(value):
        raise HostSettingError(f"--grace must be 60-3600 seconds or 'none', got {text}")
    return value


def parse_timeout(text: str) -> float:
    """``--timeout``: seconds, more than 0 and at most 600."""
    try:
        value = float(text)
    except ValueError:
        raise HostSettingError(f"bad --timeout {text!r}: seconds") from None
    if not timeout_ok(value):
        raise HostSettingError(f"--timeout must be more than 0 and at most 600 s, got {text}")
    return value


def grace_ok(value: float) -> bool:
    # Written so that nan, which compares false, is refused too.
    return GRACE_MIN <= value <= GRACE_MAX


def timeout_ok(value: float) -> bool:
    return 0 < value <= TIMEOUT_MAX


def host_from_entry(entry: object) -> Host:
    """One entry of the hosts file as a Host; HostSettingError naming the
    host and the field when it is not one. A file is written by
    ``save_hosts`` with exactly these types, so anything else (a string
    for an entry, a grace of -5, nan or 1e308, "yes" for a flag) was
    written by hand or damaged: refused here, at load, rather than failing
    later on the host."""
    if not isinstance(entry, dict):
        raise HostSettingError(f"an entry is not a host: {str(entry)[:40]!r}")
    name = entry.get("name")
    if not isinstance(name, str):
        raise HostSettingError(f"an entry has no name: {str(entry)[:60]!r}")
    check_host_name(name)

    def bad(field: str, rule: str) -> HostSettingError:
        return HostSettingError(f"host {name}: {field} {entry.get(field)!r} is not {rule}")

    dest = entry.get("dest")
    if not isinstance(dest, str):
        raise bad("dest", "an ssh destination")
    command = entry.get("command", "multiserver")
    if not isinstance(command, str):
        raise bad("command", "a command")
    grace = entry.get("grace", GRACE_DEFAULT)
    if grace is not None and not (_is_number(grace) and grace_ok(grace)):
        raise bad("grace", "60-3600 seconds or null")
    flag = entry.get("needs_credential", False)
    if not isinstance(flag, bool):
        raise bad("needs_credential", "true or false")
    timeout = entry.get("timeout", TIMEOUT_DEFAULT)
    if not (_is_number(timeout) and timeout_ok(timeout)):
        raise bad("timeout", "more than 0 and at most 600 seconds")
    return Host(
        name,
        check_dest(dest),
        check_command(command),
        None if grace is None else float(grace),
        flag,
        float(timeout),
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def config_dir() -> Path:
    """Where the person's files are (hosts.json, config.toml):
    ``$MULTISERVER_CONFIG_DIR``, else the XDG config dir."""
    given = os.environ.get("MULTISERVER_CONFIG_DIR")
    if given:
        return Path(given)
    from multiserver.internal import user_dir

    return user_dir("config")


def hosts_path() -> Path:
    return config_dir() / FILE_NAME


def load_hosts(path: Path | None = None) -> dict[str, Host]:
    """The configured hosts by name (none if the file does not exist);
    HostsFileError, in one line, if it cannot be read."""
    path = path or hosts_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise HostsFileError(f"cannot read the hosts file {path}: {exc}") from exc
    try:  # after the read: what passes now, nobody else could change before
        check_path_chain(path)
    except UnsafeDirectory as exc:
        raise HostsFileError(f"the hosts file {path} is not used: {exc}") from exc
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise HostsFileError(f"cannot read the hosts file {path}: {exc}") from exc
    entries = raw.get("hosts") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise HostsFileError(f"the hosts file {path} is damaged (no list of hosts); fix or move it")
    hosts: dict[str, Host] = {}
    for entry in entries:
        try:
            host = host_from_entry(entry)
        except HostSettingError as exc:
            raise HostsFileError(
                f"the hosts file {path} is damaged ({exc}); fix or move it"
            ) from exc
        hosts[host.name] = host
    return hosts


def save_hosts(hosts: dict[str, Host], path: Path | None = None) -> None:
    path = path or hosts_path()
    ensure_private_dir(path.parent)
    fields = ("name", "dest", "command", "grace", "needs_credential", "timeout")
    data = {
        "format": _FORMAT,
        "hosts": [{f: getattr(h, f) for f in fields} for h in hosts.values()],
    }
    try:
        write_whole(path, (json.dumps(data, indent=2) + "\n").encode(), sync=True)
    except OSError as exc:
        raise HostsFileError(f"cannot write the hosts file {path}: {exc.strerror}") from exc
