"""Figure: sessions on another host, through OpenSSH (issue 16).

A real sshd on 127.0.0.1 (``tests.remote.sshd``: a host key and a user key
made for the run; the client's ``ssh -F`` config never reads the user's
``~/.ssh``) and a "remote" multiserver with its own dirs, added as host
``db1``.

- ``ls`` of that host, through the shared connection (``ControlMaster``:
  an untimed ``ls`` made it; each timed one is a round trip on it), beside
  ``ssh remote1 true`` through the same shared connection (ssh with the
  options multiserver gives it, ``restore.ssh_argv``), interleaved run by
  run. Target: at most 1.2x. Both ends run the command installed from a
  wheel (``benchmarks/installed.py``): ``ls`` is a fresh process here
  that starts ``multiserver ls --json`` there. ``ssh remote1 true`` with
  its own handshake (no shared connection) is measured beside them, for
  scale.
- Throughput attached over SSH: a session on the host writes 8 MiB of
  base64 text (``cat``) while ``multiserver attach db1:NAME`` (the
  terminal relayed over ``ssh -T``) runs on a PTY here, beside ``ssh -tt remote1 cat FILE`` on a PTY in the same run;
  both timed from the first byte to the last (what the link carries; not
  the handshake, which the shared connection saves the attach). Target:
  at least 0.9x.
"""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
import time
from pathlib import Path

import attrs

from benchmarks.common import (
    MEASURE_TIMEOUT,
    MIB,
    Scratch,
    scratch,
    spawn_on_pty,
    timed_command,
)
from benchmarks.results import Limit, Row, Settings, median, spread
from benchmarks.terminal import multiserver_bin
from restore import Host, ssh_argv
from tests.remote.sshd import Remote, start_sshd, usable

NAME = "remote"
PAYLOAD = 8 * MIB
THROUGHPUT_AT_LEAST = 0.9
LS_AT_MOST = 1.2
SECONDS = 120.0
SSH_TIMEOUT = 30.0  # a bound on one command that goes through ssh


def _payload(path: Path) -> None:
    raw = os.urandom(PAYLOAD * 3 // 4)
    text = base64.encodebytes(raw)  # 76-column lines
    path.write_bytes(text[:PAYLOAD])


def _drain(master: int, count: int, timeout: float) -> float:
    """Read ``master`` until ``count`` bytes came: seconds from the first
    byte to the last (what the link carries, not how long it took to
    connect or to start the program)."""
    got = 0
    first: float | None = None
    end = time.monotonic() + timeout
    while got < count:
        if time.monotonic() > end:
            raise RuntimeError(f"only {got} of {count} bytes within {timeout} s")
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        if first is None:
            first = time.perf_counter()
        got += len(chunk)
    if got < count or first is None:
        raise RuntimeError(f"only {got} of {count} bytes came")
    return time.perf_counter() - first


def _stop(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def _attached(ms: str, env: dict[str, str], name: str, lines: int) -> float:
    """``attach db1:NAME`` on a PTY; the session waits for a key, then cats
    the payload: seconds from the key to the last byte."""
    pid, master = spawn_on_pty(
        ms, [ms, "attach", "--redraw", "none", f"db1:{name}"], env, size=(40, 120)
    )
    try:
        seen = bytearray()
        end = time.monotonic() + MEASURE_TIMEOUT
        while b"ready" not in seen:  # the session's prompt, replayed
            if time.monotonic() > end:
                raise RuntimeError(f"attach never showed the session: {bytes(seen[-200:])!r}")
            seen += os.read(master, 65536)
        os.write(master, b"\r")
        return _drain(master, PAYLOAD + lines, MEASURE_TIMEOUT)
    finally:
        os.close(master)
        _stop(pid)


def _ssh_cat(remote: Remote, path: Path, env: dict[str, str], lines: int) -> float:
    argv = ["ssh", "-F", str(remote.ssh_config), "-tt", remote.alias, "cat", str(path)]
    pid, master = spawn_on_pty("/usr/bin/ssh", argv, env, size=(40, 120))
    try:
        return _drain(master, PAYLOAD + lines, MEASURE_TIMEOUT)
    finally:
        os.close(master)
        _stop(pid)


def _installed_there(remote: Remote) -> Remote:
    """``remote`` with its multiserver (the last word of its command, after
    the ``env`` settings of its dirs) replaced by the installed one."""
    words = shlex.split(remote.command)
    return attrs.evolve(remote, command=shlex.join([*words[:-1], multiserver_bin()]))


def _shared_true(remote: Remote) -> list[str]:
    """``ssh remote1 true`` as multiserver runs ssh to a host: its options,
    so through its shared connection (the ControlPath in the runtime dir)."""
    argv = ssh_argv(Host("db1", remote.alias, command="true"), [])
    ssh = shlex.split(remote.ssh_env["MULTISERVER_SSH"])
    if argv[0] != "ssh":  # MULTISERVER_SSH set in this process
        raise RuntimeError(f"unexpected ssh command {argv[0]!r}")
    return [*ssh, *argv[1:]]


def _measure(settings: Settings, sc: Scratch, remote: Remote) -> list[Row]:
    ms = multiserver_bin()
    env = sc.env(
        HOME=str(sc.root),
        MULTISERVER_CONFIG_DIR=str(sc.root / "config"),
        **remote.ssh_env,
    )
    timed_command(
        [ms, "host", "add", "db1", "--ssh", remote.alias, "--command", remote.command],
        env,
        SSH_TIMEOUT,
    )
    path = sc.root / "payload.b64"
    _payload(path)
    return _rows(_collect(settings, env, remote, path))


@attrs.define
class _Samples:
    ls_ms: list[float] = attrs.Factory(list)
    shared_ms: list[float] = attrs.Factory(list)
    ssh_ms: list[float] = attrs.Factory(list)
    attach_rate: list[float] = attrs.Factory(list)
    cat_rate: list[float] = attrs.Factory(list)


def _collect(settings: Settings, env: dict[str, str], remote: Remote, path: Path) -> _Samples:
    """Each run: ls, ssh true through the shared connection and on its
    own, a session's 8 MiB attached and the same through ssh -tt cat."""
    ms = multiserver_bin()
    lines = path.read_bytes().count(b"\n")
    got = _Samples()
    ssh_true = ["ssh", "-F", str(remote.ssh_config), remote.alias, "true"]
    shared_true = _shared_true(remote)
    timed_command([ms, "ls"], env, SSH_TIMEOUT)  # opens the shared connection
    for i in settings.runs_within(SECONDS):
        got.ls_ms.append(timed_command([ms, "ls"], env, SSH_TIMEOUT) * 1000)
        got.shared_ms.append(timed_command(shared_true, env, SSH_TIMEOUT) * 1000)
        got.ssh_ms.append(timed_command(ssh_true, env, SSH_TIMEOUT) * 1000)
        name = f"t{i}"
        script = f"echo ready; read x; cat {path}; exec sleep 1000"
        timed_command(
            [ms, "new", "--host", "db1", "-d", "-n", name, "--", "sh", "-c", script],
            env,
            SSH_TIMEOUT,
        )
        got.attach_rate.append(PAYLOAD / MIB / _attached(ms, env, name, lines))
        timed_command([ms, "kill", f"db1:{name}"], env, SSH_TIMEOUT)
        got.cat_rate.append(PAYLOAD / MIB / _ssh_cat(remote, path, env, lines))
    return got


def _rows(got: _Samples) -> list[Row]:
    ls_ms, shared_ms, ssh_ms = got.ls_ms, got.shared_ms, got.ssh_ms
    attach_rate, cat_rate = got.attach_rate, got.cat_rate
    ratio = median([a / b for a, b in zip(ls_ms, shared_ms, strict=True)])
    tput = median([a / b for a, b in zip(attach_rate, cat_rate, strict=True)])
    ls_figure = "a host through OpenSSH: ls (lower is better)"
    shared = "ssh remote1 true, through the same shared connection"
    return [
        Row.against(
            Limit("<=", LS_AT_MOST, ratio, "x ssh true, shared"),
            figure=ls_figure,
            subject="multiserver ls (host db1, through the shared connection)",
            value=median(ls_ms),
            unit="ms",
            runs=len(ls_ms),
            baseline=shared,
            baseline_value=median(shared_ms),
            detail=(
                f"range {spread(ls_ms)} ms; {ratio:.2f}x ssh true through the shared "
                "connection, per-run median; installed multiserver on both ends"
            ),
            samples=tuple(ls_ms),
            baseline_samples=tuple(shared_ms),
        ),
        Row(
            figure=ls_figure,
            subject="ssh remote1 true, its own handshake (no shared connection)",
            value=median(ssh_ms),
            unit="ms",
            runs=len(ssh_ms),
            baseline=shared,
            baseline_value=median(shared_ms),
            detail=f"range {spread(ssh_ms)} ms: what the shared connection saves",
            samples=tuple(ssh_ms),
            baseline_samples=tuple(shared_ms),
        ),
        Row.against(
            Limit(">=", THROUGHPUT_AT_LEAST, tput, "x ssh -tt cat"),
            figure="a host through OpenSSH: attached throughput, 8 MiB (higher is better)",
            subject="multiserver attach db1:NAME (terminal relayed over ssh -T)",
            value=median(attach_rate),
            unit="MiB/s",
            runs=len(attach_rate),
            baseline="ssh -tt remote1 cat FILE",
            baseline_value=median(cat_rate),
            detail=f"range {spread(attach_rate)} MiB/s; {tput:.2f}x ssh -tt cat, per-run median",
            samples=tuple(attach_rate),
            baseline_samples=tuple(cat_rate),
        ),
    ]


def run(settings: Settings) -> list[Row]:
    why = usable()
    if why is not None:
        return [
            Row(
                figure="a host through OpenSSH",
                subject="not measured",
                value=None,
                unit="",
                runs=0,
                baseline="",
                baseline_value=None,
                detail=f"not run: {why}",
            )
        ]
    with scratch("remote") as sc:
        remote = _installed_there(start_sshd(sc.root / "ssh", sc.root / "remote", sc.root))
        try:
            return _measure(settings, sc, remote)
        finally:
            subprocess.run(
                ["sh", "-c", f"{remote.command} stop --force"],
                capture_output=True,
                timeout=30,
                check=False,
            )
            remote.stop()
