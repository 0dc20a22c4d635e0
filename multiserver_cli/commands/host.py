"""``multiserver version`` and ``multiserver host add | ls | rm``: the
hosts other commands reach through OpenSSH (``restore.remote``)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import termios
import time
import tty
from argparse import Namespace
from collections.abc import Iterator

import attrs

from multiserver import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION
from multiserver_cli._errors import CliError
from multiserver_cli._format import print_json, table
from multiserver_cli._sessions import check_name
from multiserver_cli.attach._relay import relay_terminal
from restore import (
    SSH_FAILED,
    Host,
    HostFailure,
    HostSettingError,
    StoreError,
    check_command,
    check_dest,
    check_host_name,
    load_hosts,
    parse_grace,
    parse_timeout,
    remote_json,
    run_remote,
    save_hosts,
    ssh_argv,
)


def version_info() -> dict[str, object]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("multiserver")
    except PackageNotFoundError:
        ours = "unknown"
    return {
        "version": ours,
        "protocol": PROTOCOL_VERSION,
        "min_protocol": MIN_PROTOCOL_VERSION,
        "features": list(FEATURES),
    }


# What this multiserver's command line can do beyond the protocol, for the
# other end of an ssh to ask (``version --json``). attach-relay: ``attach
# --relay`` (_relay); a remote without it is attached through ``ssh -tt``.
FEATURES = ("attach-relay",)


def cmd_version(args: Namespace) -> int:
    info = version_info()
    if args.json:
        print_json(info)
    else:
        print(
            f"multiserver {info['version']} (protocol {PROTOCOL_VERSION},"
            f" speaks {MIN_PROTOCOL_VERSION}-{PROTOCOL_VERSION})"
        )
    return 0


def compatible(answer: object, host: Host) -> str:
    """The remote's version, if its answer to ``version --json`` says it
    speaks a protocol we speak; CliError, saying what to install, if not."""
    if not isinstance(answer, dict) or not all(
        isinstance(answer.get(k), int) for k in ("protocol", "min_protocol")
    ):
        raise CliError(f"{host.name}: `{host.command} version --json` answered {answer!r}")
    theirs = (answer["min_protocol"], answer["protocol"])
    if theirs[1] < MIN_PROTOCOL_VERSION or theirs[0] > PROTOCOL_VERSION:
        raise CliError(
            f"{host.name}: its multiserver {answer.get('version')} speaks protocol"
            f" {theirs[0]}-{theirs[1]}, this one {MIN_PROTOCOL_VERSION}-{PROTOCOL_VERSION}:"
            f" install the same multiserver on {host.dest} as here"
            f" ({version_info()['version']})"
        )
    return str(answer.get("version"))


def cmd_host(args: Namespace) -> int:
    return {"add": _add, "ls": _ls, "rm": _rm}[args.host_cmd](args)


def _add(args: Namespace) -> int:
    try:
        name = check_host_name(args.name)
        host = Host(
            name,
            check_dest(args.ssh or name),
            check_command(args.command),
            parse_grace(args.grace),
            timeout=parse_timeout(args.timeout),
        )
    except HostSettingError as exc:
        raise CliError(str(exc), 2) from None
    hosts = load_hosts()
    if name in hosts and not args.replace:
        raise CliError(f"a host named {name} exists already (--replace to change it)")
    if args.no_check:
        remote = "not checked"
    else:
        # A person is here: a passphrase may be typed (BatchMode off), and
        # then the host is one that needs a credential (restore defers it).
        try:
            remote = compatible(remote_json(host, ["version", "--json"]), host)
        except HostFailure as exc:
            if exc.kind not in ("credential", "unreachable") or not sys.stdin.isatty():
                raise
            remote = compatible(remote_json(host, ["version", "--json"], batch=False), host)
            host = attrs.evolve(host, needs_credential=True)
    hosts[name] = host
    save_hosts(hosts)
    grace = "none" if host.grace is None else f"{host.grace:g} s"
    print(f"added {name} ({host.dest}, multiserver {remote}, grace {grace})", file=sys.stderr)
    return 0


def _ls(args: Namespace) -> int:
    hosts = load_hosts()
    if args.json:
        print_json([_row(h) for h in hosts.values()])
        return 0
    if not hosts:
        print("no hosts (add one: multiserver host add NAME --ssh DEST)", file=sys.stderr)
        return 0
    rows = [
        [
            h.name,
            h.dest,
            h.command,
            "none" if h.grace is None else f"{h.grace:g}s",
            "needs one" if h.needs_credential else "-",
        ]
        for h in hosts.values()
    ]
    print(table(["NAME", "SSH", "COMMAND", "GRACE", "CREDENTIAL"], rows))
    return 0


def _row(h: Host) -> dict[str, object]:
    return {
        "name": h.name,
        "dest": h.dest,
        "command": h.command,
        "grace": h.grace,
        "needs_credential": h.needs_credential,
        "timeout": h.timeout,
    }


def _rm(args: Namespace) -> int:
    hosts = load_hosts()
    if args.name not in hosts:
        raise CliError(f"no host named {args.name}")
    del hosts[args.name]
    save_hosts(hosts)
    print(f"removed {args.name}", file=sys.stderr)
    return 0


# --- commands through a host -------------------------------------------------------


def host_of(name: str) -> Host:
    """The configured host ``name``; CliError listing the known ones if none."""
    hosts = load_hosts()
    if name not in hosts:
        known = ", ".join(sorted(hosts)) or "none: multiserver host add NAME --ssh DEST"
        raise CliError(f"no host named {name} (hosts: {known})")
    return hosts[name]


def _passed(done: subprocess.CompletedProcess[bytes]) -> int:
    """The remote command's output and status, as if it ran here."""
    sys.stdout.buffer.write(done.stdout)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(done.stderr)
    sys.stderr.buffer.flush()
    return done.returncode


def remote_peek(host_name: str, name: str, args: Namespace) -> int:
    host = host_of(host_name)
    extra = [] if args.bytes is None else ["--bytes", str(args.bytes)]
    return _passed(run_remote(host, ["peek", *extra, check_name(name)], timeout=host.timeout))


def remote_kill(host_name: str, name: str, args: Namespace) -> int:
    host = host_of(host_name)
    extra = [] if args.signal is None else ["-s", str(args.signal)]
    status = _passed(run_remote(host, ["kill", *extra, check_name(name)], timeout=host.timeout))
    if status == 0 and args.signal is None:
        from multiserver_cli._remote import forget_made

        forget_made(f"{host_name}:{name}")
    return status


def remote_new(host_name: str, args: Namespace) -> int:
    """``new --host H``: the session starts there, with the host's grace
    window as its linger (unless ``--linger`` says otherwise)."""
    host = host_of(host_name)
    if args.attach_existing:
        if args.name is None:
            raise CliError("-A needs a session name (-n NAME)", 2)
        from multiserver_cli._remote import ask_host

        there = ask_host(attrs.evolve(host, needs_credential=False), host.timeout)
        if there.kind == "listed" and args.name in there.sessions:
            if args.detach:
                print(args.name)
                return 0
            return remote_attach(host_name, args.name, args)
    remote = ["new"]
    if args.name is not None:
        remote += ["-n", check_name(args.name, new=True)]
    linger = args.linger if args.linger is not None else host.grace
    if linger is not None:
        remote += ["--linger", f"{linger:g}"]
    if args.cwd:
        remote += ["--cwd", args.cwd]
    remote.append("-d")
    if args.command:
        remote += ["--", *args.command]
    if not args.detach and not os.isatty(0):
        raise CliError("attach needs a terminal: stdin is not a tty (use -d to start detached)")
    # Made detached, then attached: an attach is what reconnects after a
    # drop (a second `new` would find the name taken).
    made = run_remote(host, remote, timeout=host.timeout)
    name = made.stdout.decode(errors="replace").strip()
    if made.returncode != 0 or not name:
        return _passed(made)
    from multiserver_cli._remote import record_made

    record_made(host, check_name(name))  # saved here as HOST:NAME, for restore
    if args.detach:
        return _passed(made)
    return _interactive(host, ["attach", *_detach_words(args), check_name(name)], args.detach_key)


def remote_attach(host_name: str, name: str, args: Namespace) -> int:
    host = host_of(host_name)
    check_name(name)
    if not os.isatty(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    relay = _reach(host)
    _bring_back(host, name)
    # A session started again there (by restore, or just now): its notice
    # (the saved scrollback, the marker and why) first, once.
    from multiserver_cli._state import open_store, take_notice

    with open_store() as store:
        notice = take_notice(store, f"{host_name}:{name}")
    if notice:
        os.write(sys.stdout.fileno(), notice)
    return _interactive(host, ["attach", *_detach_words(args), name], args.detach_key, relay)


def _detach_words(args: Namespace) -> list[str]:
    words = ["-E"] if args.no_detach else ["-e", args.detach_spec]
    return [*words, "-r", args.redraw]


# Reconnecting after a drop: waits double from the first to the last, and
# it gives up RECONNECT_FOR seconds after the drop.
RECONNECT_FIRST, RECONNECT_LAST = 0.5, 8.0
RECONNECT_FOR = 300.0
# A connection that lasted this long was up: a drop after it starts the
# waits again from the first.
WAS_UP = 10.0


def _interactive(
    host: Host, remote: list[str], detach_key: bytes | None = None, relay: bool | None = None
) -> int:
    """The remote ``attach`` on this terminal: the remote multiserver draws,
    detaches and resets the terminal as it does here. Relayed (``_relay``:
    ``ssh -T``, no PTY on the host between the session and the link) when
    the remote can (``relay``: its ``version --json`` said so; None: ask);
    else through ``ssh -tt``.

    A connection that drops (ssh exits 255, or is killed) is made again,
    with waits that double up to RECONNECT_LAST, for RECONNECT_FOR seconds
    at most, each wait said on the terminal; the detach key stops the
    waiting. The remote session was let go of at the drop (the relay's
    input ended; through ``-tt``, sshd hung its terminal up), so the next
    attach replays everything it wrote meanwhile. The terminal's modes are put back after each ssh (one that
    was killed could not)."""
    if not os.isatty(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    if relay is None:
        relay = _reach(host)
    # A person is here: ssh may ask for a passphrase (the shared connection
    # is up already, made by _reach, so it seldom has to).
    if relay:
        argv = ssh_argv(host, [remote[0], "--relay", *remote[1:]], batch=False)
    else:
        argv = ssh_argv(host, remote, tty=True, batch=False)
    modes = termios.tcgetattr(0)
    waits = _waits()
    given_up_at: float | None = None
    while True:
        started = time.monotonic()
        try:
            status = relay_terminal(argv) if relay else subprocess.run(argv).returncode
        except FileNotFoundError as exc:
            raise CliError("ssh is not installed (not on PATH)") from exc
        finally:
            termios.tcsetattr(0, termios.TCSADRAIN, modes)
        if status != SSH_FAILED and status >= 0:
            return status  # the remote attach's own end: detached, exited
        now = time.monotonic()
        if given_up_at is None or now - started >= WAS_UP:
            given_up_at, waits = now + RECONNECT_FOR, _waits()
        wait = next(waits)
        if now + wait > given_up_at:
            _say(f"[gave up reconnecting to {host.name} after {RECONNECT_FOR:g} s]")
            return 1
        stop = "" if detach_key is None else f"; {_key_name(detach_key)} to stop"
        _say(f"[reconnecting to {host.name}... in {wait:g} s{stop}]")
        if _key_within(detach_key, wait):
            _say(f"[stopped reconnecting to {host.name}; the session runs on there]")
            return 0


def _reach(host: Host) -> bool:
    """One round trip first, a person at the terminal (ssh may ask for a
    passphrase: a deferred host is brought back so): a host that cannot be
    reached is one line, not a reconnect loop; and the shared connection is
    up for what follows. Whether its attach can be relayed (``_relay``)."""
    answer = remote_json(host, ["version", "--json"], timeout=host.timeout, batch=False)
    compatible(answer, host)
    features = answer.get("features") if isinstance(answer, dict) else None
    return isinstance(features, list) and "attach-relay" in features


def _bring_back(host: Host, name: str) -> None:
    """A saved session that is gone from its host (a deferred host's, whose
    grace window elapsed while nobody could log in) is started again there
    in its saved cwd, its marker waiting for this attach."""
    from multiserver_cli._remote import ask_host, start_there
    from multiserver_cli._state import open_store, warn
    from restore import relaunch_notice

    with open_store() as store:
        leaf = None if store is None else store.load().find(f"{host.name}:{name}")
        if store is None or leaf is None:
            return  # not saved here: the host is not asked (the attach says if it is gone)
        answer = ask_host(attrs.evolve(host, needs_credential=False), host.timeout)
        if answer.kind != "listed" or name in answer.sessions:
            return
        made = start_there(host, leaf, host.timeout)
        why = "gone from its host (grace window elapsed, or the host rebooted)"
        notice = relaunch_notice(leaf, why)
        try:
            store.update_session(
                attrs.evolve(leaf, ref=made.ref, notice=notice, scrollback=None, exit_code=None)
            )
        except (StoreError, KeyError) as exc:
            warn(f"{leaf.name} started again there, but not saved: {exc}")


def _waits() -> Iterator[float]:
    wait = RECONNECT_FIRST
    while True:
        yield wait
        wait = min(RECONNECT_LAST, wait * 2)


def _say(line: str) -> None:
    os.write(sys.stderr.fileno(), f"\r\n{line}\r\n".encode())


def _key_name(key: bytes) -> str:
    code = key[0]
    return f"^{chr(code ^ 0x40)}" if code < 0x20 or code == 0x7F else key.decode()


def _key_within(key: bytes | None, seconds: float) -> bool:
    """Wait ``seconds``, reading the terminal raw: True if ``key`` came."""
    end = time.monotonic() + seconds
    modes = termios.tcgetattr(0)
    try:
        tty.setraw(0, termios.TCSANOW)
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([0], [], [], left)
            if ready:
                typed = os.read(0, 1024)
                if not typed:
                    return True  # the terminal went away
                if key is not None and key in typed:
                    return True
        return False
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, modes)
