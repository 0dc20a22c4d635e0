"""The subcommands. Each is ``async def cmd_X(args) -> exit status``; errors
are raised as CliError (or the library's MultiserverError) and turned into one
line by ``main``. Every wait on a daemon is bounded, except being attached."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import sys
import time
from argparse import Namespace
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import trio

from multiserver import (
    ChildInfo,
    Client,
    DaemonNotRunning,
    DaemonPaths,
    RequestFailed,
    dial,
    escaped,
    open_client,
)
from multiserver_cli import _attach, _state
from multiserver_cli._format import daemon_label, ls_table, print_json
from multiserver_cli._sessions import (
    REQUEST_TIMEOUT,
    CliError,
    check_name,
    check_name_free,
    find_session,
    saved_names,
    scan,
)
from multiserver_cli._state import end_child


def say(line: str, at_line_start: bool = False) -> None:
    """A status line for the person at the terminal, on a line of its own
    (a new line first unless the output shown last ended one)."""
    if not os.isatty(1):
        os.write(sys.stdout.fileno(), f"{line}\n".encode())
        return
    lead = "\r" if at_line_start else "\r\n"
    os.write(sys.stdout.fileno(), (lead + line + "\r\n").encode())


def user_shell() -> list[str]:
    shell = os.environ.get("SHELL")
    if not shell:
        try:
            shell = pwd.getpwuid(os.getuid()).pw_shell
        except KeyError:
            shell = ""
    return [shell or "/bin/sh"]


@contextlib.asynccontextmanager
async def bounded(what: str) -> AsyncIterator[None]:
    """Fail with one line if the daemon takes longer than REQUEST_TIMEOUT."""
    try:
        with trio.fail_after(REQUEST_TIMEOUT):
            yield
    except trio.TooSlowError:
        raise CliError(f"{what}: the daemon did not answer within {REQUEST_TIMEOUT:g} s") from None


def _paths(args: Namespace) -> DaemonPaths:
    return DaemonPaths.for_number(args.daemon)


# --- daemon, stop --------------------------------------------------------------


async def cmd_daemon(args: Namespace) -> int:
    paths = _paths(args)
    async with bounded("daemon"), open_client(paths, start=True) as client:
        print(client.socket_path)
    return 0


async def cmd_stop(args: Namespace) -> int:
    paths = _paths(args)
    try:
        async with bounded("stop"), open_client(paths.socket) as client:
            try:
                await client.shutdown(force=args.force)
            except RequestFailed as exc:
                raise CliError(exc.message) from None
    except DaemonNotRunning:
        print(f"no daemon running at {paths.socket}", file=sys.stderr)
        return 0
    print(f"stopped the daemon at {paths.socket}", file=sys.stderr)
    return 0


# --- new, attach ------------------------------------------------------------------


async def cmd_new(args: Namespace) -> int:
    name = check_name(args.name) if args.name else ""
    if not args.detach and not os.isatty(0):
        # Checked before launching: else the session would be left running, held by nobody.
        raise CliError("attach needs a terminal: stdin is not a tty (use -d to start detached)")
    if args.attach_existing:
        if not name:
            raise CliError("-A needs a session name (-n NAME)", 2)
        try:
            await find_session(name, args.daemon if args.daemon_given else None)
        except CliError:
            pass
        else:
            return await cmd_attach(args)
    argv = args.command or user_shell()
    cwd = os.path.abspath(args.cwd) if args.cwd else os.getcwd()
    size = _attach.terminal_size(0) or (24, 80)
    paths = _paths(args)
    if name:
        await check_name_free(name, paths.socket)
    async with open_client_bounded(paths, start=True) as client:
        try:
            async with bounded("new"):
                launched = await client.launch(
                    argv,
                    env=dict(os.environ),
                    cwd=cwd,
                    rows=size[0],
                    cols=size[1],
                    name=name,
                    linger=args.linger,
                    hold=not args.detach,
                )
        except RequestFailed as exc:
            raise CliError(exc.message) from None
        _state.record_new(launched.child, client.socket_path, client.instance_id, args.window)
        if args.detach:
            print(launched.child.name)
            return 0
        assert launched.master is not None
        return await _attach.run_attached(
            client,
            launched.child,
            launched.master,
            replay=b"",
            detach_key=args.detach_key,
            redraw=args.redraw,
            say=say,
            close_exited=_state.close_exited,
        )


@contextlib.asynccontextmanager
async def open_client_bounded(paths: DaemonPaths, *, start: bool) -> AsyncIterator[Client]:
    """open_client whose connect (and start) is bounded; the session after
    that is not."""
    async with bounded("connect"):
        client = await dial(paths, start=start)
    async with client:
        yield client


async def cmd_attach(args: Namespace) -> int:
    name = check_name(args.name)
    if not os.isatty(0):
        raise CliError("attach needs a terminal: stdin is not a tty")
    found = await find_session(name, args.daemon if args.daemon_given else None)
    async with open_client_bounded(DaemonPaths.for_socket(found.socket), start=False) as client:
        async with bounded("attach"):
            # keep_output: if this client dies before it releases, the
            # daemon still has the output it was about to show.
            (result,) = await client.claim([found.child.id], steal=True, keep_output=True)
        if result.error is not None:
            raise CliError(f"cannot attach to {name}: {result.error.message}")
        assert result.child is not None
        child = attrs.evolve(result.child, name=name)  # the name the user knows it by
        replay = _state.take_notice(name) + result.output
        if result.dropped:
            replay = (
                f"[multiserver: {result.dropped} earlier bytes of {name} were not kept]\r\n".encode()
                + replay
            )
        if result.master is None:
            return await _attach.attach_exited(client, child, replay, say, _state.close_exited)
        return await _attach.run_attached(
            client,
            child,
            result.master,
            replay=replay,
            detach_key=args.detach_key,
            redraw=args.redraw,
            say=say,
            close_exited=_state.close_exited,
        )


# --- ls, peek, kill ------------------------------------------------------------------


def child_json(
    child: ChildInfo, socket: str, instance_id: str, *, saved: bool
) -> dict[str, object]:
    """A session for ``ls --json``; ``saved``: whether a saved session refers to it."""
    return {
        "name": child.name,
        "id": child.id,
        "pid": child.pid,
        "state": child.state,
        "exit_code": child.exit_code,
        # bytes: an argv or cwd that is not UTF-8 escaped (caf\xe9), as `ls` shows it.
        "argv": [escaped(a) for a in child.argv],
        "cwd": escaped(child.cwd),
        "tty": child.tty,
        "held": child.held,
        "buffered_bytes": child.buffered_bytes,
        "dropped_bytes": child.dropped_bytes,
        "started_at": child.started_at,
        "exited_at": child.exited_at,
        "linger": child.linger,
        "socket": socket,
        "daemon_instance": instance_id,
        "saved": saved,
    }


async def cmd_ls(args: Namespace) -> int:
    result = await scan(args.daemon if args.daemon_given else None)
    for problem in result.problems:
        print(f"multiserver: {problem}", file=sys.stderr)
    saved = saved_names()
    # Each child under the name `attach` takes: its saved session's, if any.
    rows: list[tuple[Path, str, ChildInfo, bool]] = []
    for d in result.daemons:
        for c in d.children:
            name = saved.get((str(d.socket), d.instance_id, c.id))
            shown = c if name is None else attrs.evolve(c, name=name)
            rows.append((d.socket, d.instance_id, shown, name is not None))
    if args.json:
        print_json([child_json(c, str(s), i, saved=k) for s, i, c, k in rows])
    elif rows:
        several = len({s for s, _, _, _ in rows}) > 1
        print(
            ls_table(
                [c for _, _, c, _ in rows],
                time.time(),
                daemons=[daemon_label(s) for s, _, _, _ in rows] if several else None,
            )
        )
    elif not result.problems:
        print("no sessions", file=sys.stderr)
    # A daemon that could not be read is not "no sessions": say so, and fail.
    return 1 if result.problems else 0


async def cmd_peek(args: Namespace) -> int:
    if args.bytes is not None and args.bytes < 0:
        raise CliError("--bytes must be >= 0", 2)
    found = await find_session(args.name, args.daemon if args.daemon_given else None)
    async with bounded("peek"), open_client(found.socket) as client:
        result = await client.peek(found.child.id, args.bytes)
    sys.stdout.buffer.write(result.output)
    sys.stdout.buffer.flush()
    return 0


def parse_signal(spec: str) -> int:
    s = spec.upper()
    if s.isdigit():
        num = int(s)
    else:
        s = s if s.startswith("SIG") else "SIG" + s
        try:
            num = int(signal.Signals[s])
        except KeyError:
            raise CliError(f"unknown signal {spec!r}", 2) from None
    if num not in signal.valid_signals() or num == 0:
        raise CliError(f"unknown signal {spec!r}", 2)
    return num


async def cmd_kill(args: Namespace) -> int:
    signum = parse_signal(args.signal) if args.signal else signal.SIGHUP
    await _state.finish_pending_closes()
    found = await find_session(args.name, args.daemon if args.daemon_given else None)
    child = found.child
    only_signal = args.signal is not None
    # The durable close: staged first, so a crash from here on is finished
    # by the next run (a bare signal closes nothing unless the child ends).
    staged = None if only_signal else _state.stage_close(found.socket, found.instance_id, child)
    async with bounded("kill"), open_client(found.socket) as client:
        code = child.exit_code
        if child.state == "running":
            code = await end_child(client, child.id, signum, escalate=not only_signal)
        if code is None:
            print(
                f"sent {signal.Signals(signum).name} to {child.name}; it is still running",
                file=sys.stderr,
            )
            return 0
        if only_signal:
            staged = _state.stage_close(found.socket, found.instance_id, child)
        with contextlib.suppress(RequestFailed):
            await client.collect(child.id)
    if staged is not None:
        _state.complete_close(staged.name, staged.ref)
    print(f"{child.name}: ended (exit code {code})", file=sys.stderr)
    return 0
