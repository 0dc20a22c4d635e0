"""``multiserver new``: start a session and attach this terminal to it.
``-d`` leaves it detached and prints its name; ``-A`` attaches to the
session of that name if there is one (a saved one that is not running is
started again from its saved command and cwd); ``--host`` starts it on
another host, through ssh. Its name is one no session has on any daemon
(``_names``)."""

from __future__ import annotations

import argparse
import os
from argparse import ArgumentParser, Namespace

from multiserver.internal import printable
from multiserver_cli import _args
from multiserver_cli._errors import CliError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from multiserver import LaunchResult, SyncClient
    from multiserver_cli._names import Create, Survey
    from multiserver_cli._saved import Saved
    from restore import Host, HostFailure, SessionLeaf

NAME = "new"
HELP = "start a session and attach to it (-d: leave it detached)"
EXAMPLE = "multiserver new -n build -d -- make -j4"
# What config.toml decides (_settings.apply: the flag's attribute, or None:
# through its environment variable).
SETTINGS = {
    "detach_key": "detach_spec",
    "buffer_limit": None,
    "share_size": None,
    "strip_env": None,
    "keep_env": None,
}


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument(
        "-n",
        "--name",
        help="session name, unused on every daemon (default: the smallest free number)",
    )
    p.add_argument(
        "-d", "--detach", action="store_true", help="do not attach; print the session's name"
    )
    p.add_argument(
        "-A",
        dest="attach_existing",
        action="store_true",
        help="attach if a session NAME exists (a saved one that is not running is started"
        " again from its saved command and cwd), else create it",
    )
    p.add_argument("--cwd", metavar="DIR", help="working directory (default: this one)")
    p.add_argument(
        "--linger",
        type=float,
        metavar="SECONDS",
        help="end the session after it has been detached this long",
    )
    p.add_argument(
        "--window", default="main", help="window of the saved arrangement (default: main)"
    )
    p.add_argument(
        "--host",
        metavar="HOST",
        help="start it on that host (multiserver host add), with the host's grace window"
        " as its --linger",
    )
    # Run here by another host's restore (restore.remote's start_request):
    # session NAME, gone, started again here (-A -d); its first attach
    # shows what this host saved of it, then the marker and WHY.
    p.add_argument("--relaunch", metavar="WHY", help=argparse.SUPPRESS)
    _args.env_options(p)
    _args.detach_options(p)
    _args.share_options(p, "--takeover")  # with -A: how to attach to the session that exists
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARG...",
        help="command (default: your shell)",
    )


def run(args: Namespace) -> int:
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.linger is not None and args.linger < 0:
        raise UsageError("--linger must be >= 0")
    from restore import window_name_problem

    problem = window_name_problem(args.window)
    if problem is not None:
        raise UsageError(f"bad --window {args.window!r}: {problem}")
    if args.host is not None:
        return _new_there(args.host, args)
    if args.relaunch is not None:
        if args.name is None:
            raise CliError("--relaunch needs a session name (-n NAME)", 2)
        args.attach_existing = args.detach = True
    from multiserver_cli import _saved
    from multiserver_cli._names import Found, Refusal, plan_new
    from multiserver_cli._sessions import check_name, located, scope_of, survey, survey_about

    name = None if args.name is None else check_name(args.name, new=not args.attach_existing)
    if args.attach_existing and name is None:
        raise CliError("-A needs a session name (-n NAME)", 2)
    if not args.detach and not os.isatty(0):
        # Checked before launching: else the session would be left running, held by nobody.
        raise CliError("attach needs a terminal: stdin is not a tty (use -d to start detached)")
    with _saved.open_saved() as saved:
        # Every daemon, whatever --daemon says: a name is one session's across them all.
        view = survey(saved) if name is None else survey_about(saved, name)
        scope = scope_of(_args.only_daemon(args))
        plan = plan_new(view, name, attach_existing=args.attach_existing, scope=scope)
        if isinstance(plan, Refusal):
            raise CliError(plan.message)
        if isinstance(plan, Found):
            if args.relaunch is not None:  # it runs: nothing to start (asked twice)
                print(printable(plan.session.name))
                return 0
            from multiserver_cli.commands.attach import attach_found

            return attach_found(args, located(plan.session), saved)
        _refuse_held(plan)
        return _create(args, plan, view, saved)


def user_shell() -> list[str]:
    """What a session runs when no command is given: the user's shell."""
    import pwd

    from multiserver_cli import _settings

    shell = str(_settings.current().value("shell")) or os.environ.get("SHELL")
    if not shell:
        try:
            shell = pwd.getpwuid(os.getuid()).pw_shell
        except KeyError:
            shell = ""
    return [shell or "/bin/sh"]


def _refuse_held(plan: Create) -> None:
    """A saved session that ``new -A`` would start again, whose daemon died
    under a client that still shows it (``restore.live_holds``): starting
    it would make a second copy."""
    ref = plan.saved.ref if plan.saved is not None else None
    if ref is None:
        return
    from restore import live_holds

    hold = live_holds().get((ref.instance_id, ref.child_id))
    if hold is not None:
        raise CliError(
            f"{plan.name} is held by a client whose daemon died (pid {hold.client_pid}), in"
            " another terminal: detach there (it then ends), then start it again"
        )


def _create(args: Namespace, plan: Create, view: Survey, saved: Saved) -> int:
    """Launch the session ``plan`` says, save it, and attach to it (or,
    with ``-d``, print its name)."""
    from multiserver import DaemonPaths, launch_env
    from multiserver_cli import _saved
    from multiserver_cli._dial import dial
    from multiserver_cli._sessions import bounded, deadline
    from multiserver_cli.attach._tty import terminal_size
    from multiserver_cli.commands.attach import attach_held

    leaf = plan.saved
    argv = args.command or (list(leaf.argv) if leaf is not None else user_shell())
    if args.cwd:
        cwd = os.path.abspath(args.cwd)
    elif leaf is not None:
        cwd = leaf.cwd if os.path.isdir(leaf.cwd) else os.path.expanduser("~")
    else:
        cwd = os.getcwd()
    size = terminal_size(0) or (24, 80)
    paths = DaemonPaths.for_number(args.daemon)
    with (
        bounded("new"),
        dial(paths, start=True, children=False, deadline=deadline()) as client,
    ):
        launched = _launch(
            client,
            plan,
            view,
            argv,
            env=launch_env(os.environ, args.strip_env, args.keep_env),
            cwd=cwd,
            rows=size[0],
            cols=size[1],
            linger=args.linger,
            hold=not args.detach,
            share=True,  # attach_held gives reading back when another joins
        )
        screen = _saved_screen(saved, plan.name) if args.relaunch is not None else None
        _saved.record_new(
            saved, launched.child, client.socket_path, client.instance_id, args.window, argv
        )
        if args.relaunch is not None:
            _keep_screen(saved, launched.child.name, screen, args.relaunch)
        if args.detach:
            print(printable(launched.child.name))
            return 0
        assert launched.master is not None
        return attach_held(args, client, launched.child, launched.master, b"", saved)


def _saved_screen(saved: Saved, name: str) -> SessionLeaf | None:
    """The saved session ``name`` with its bytes fields (what it showed),
    read before the new child's record replaces it."""
    store = saved.store()
    if store is None:
        return None
    from restore import StoreError

    try:
        leaf = store.find(name)
    except StoreError:
        return None
    if leaf is None:
        return None
    from multiserver.internal import replaced
    from restore import kept_scrollback

    kept = kept_scrollback(leaf.ref)  # what its daemon kept on disk: the newest
    return leaf if kept is None else replaced(leaf, scrollback=kept)


def _keep_screen(saved: Saved, name: str, old: SessionLeaf | None, why: str) -> None:
    """``--relaunch``: the session ``name`` just started again keeps, for
    its first attach, what its earlier run showed (``old``'s scrollback and
    unseen notice) and the marker saying ``why`` (``relaunch_notice``)."""
    from multiserver.internal import replaced
    from multiserver_cli._state import warn
    from restore import StoreError, relaunch_notice

    store = saved.store()
    if store is None:
        return
    try:
        new = store.find(name)
        if new is None:
            return
        store.update_session(replaced(new, notice=relaunch_notice(old or new, why)))
    except (StoreError, KeyError) as exc:
        warn(f"{name}: its earlier screen not kept: {exc}")


def _launch(
    client: SyncClient, plan: Create, view: Survey, argv: list[str], **launch: Any
) -> LaunchResult:
    """Launch under the plan's name. A default name the daemon refuses as
    taken (another ``new`` took it meanwhile) gives way to the next free one,
    NAME_TRIES times at most; an explicit one is the user's and is refused."""
    import errno

    from multiserver import RequestFailed
    from multiserver_cli._names import NAME_TRIES, pick_default

    name = plan.name
    refused: list[str] = []
    while True:
        try:
            return client.launch(argv, name=name, **launch)
        except RequestFailed as exc:
            if exc.errno != errno.EEXIST or plan.explicit or len(refused) + 1 >= NAME_TRIES:
                raise CliError(exc.message) from None
            refused.append(name)
            name = pick_default(view, refused)


def _new_there(host_name: str, args: Namespace) -> int:
    """``new --host H``: the session starts there, with the host's grace
    window as its linger (unless ``--linger`` says otherwise), made
    detached, then attached: an attach is what reconnects after a drop (a
    second ``new`` would find the name taken). It is saved here as
    HOST:NAME, for restore."""
    from multiserver.internal import replaced
    from multiserver_cli import _remote
    from multiserver_cli._sessions import check_name
    from multiserver_cli.attach import _over_ssh
    from restore import HostFailure, run_remote

    host = _remote.host_of(host_name)
    if args.attach_existing:
        if args.name is None:
            raise CliError("-A needs a session name (-n NAME)", 2)
        there = _remote.ask_host(replaced(host, needs_credential=False), host.timeout)
        if there.kind == "listed" and args.name in there.sessions:
            if args.detach:
                print(printable(args.name))
                return 0
            return _over_ssh.attach_there(host_name, args.name, args)
    name = None if args.name is None else check_name(args.name, new=True)
    target = None if name is None else f"{host_name}:{name}"
    if target is not None and _remote.was_asked(target):
        # An earlier `new` of it lost its link: what the host has under
        # that name is what it made (a retry is no second session).
        found = _remote.find_made(host, args.name)
        if found is not None:
            return _made_there(host, found, args)
    remote = ["new"]
    if name is not None:
        remote += ["-n", name]
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
    if target is not None:
        _remote.note_asked(target, True)
    try:
        made = run_remote(host, remote, timeout=host.timeout)
    except HostFailure as exc:
        return _link_died(host, name, exc, args)
    if target is not None:
        _remote.note_asked(target, False)  # made, or refused: known either way
    made_name = made.stdout.decode(errors="replace").strip()
    if made.returncode != 0 or not made_name:
        return _remote.passed(made, host_name)
    _remote.record_made(host, check_name(made_name))  # saved here as HOST:NAME, for restore
    if args.detach:
        return _remote.passed(made, host_name)
    words = ["attach", *_over_ssh.detach_words(args), check_name(made_name)]
    return _over_ssh.interactive(host, words, args.detach_key)


def _link_died(host: Host, name: str | None, exc: HostFailure, args: Namespace) -> int:
    """``new --host`` whose ssh failed: before the host made the session, or
    after (the link died while the host answered). A session the host lists
    under the name asked for is the one made; else the failure, saying what
    finds it."""
    from multiserver_cli import _remote
    from multiserver_cli._state import warn

    if exc.kind not in ("unreachable", "silent"):  # it ran there, and said no
        if name is not None:
            _remote.note_asked(f"{host.name}:{name}", False)
        raise exc
    if name is None:
        raise CliError(f"{exc}; a session may have been made there (`multiserver ls` lists it)")
    found = _remote.find_made(host, name)
    if found is None:
        raise CliError(
            f"{exc}; {host.name}:{name} may have been made there: the same command again finds it"
        )
    warn(f"{host.name}: the link died after {found.name} was made there; it runs")
    return _made_there(host, found, args)


def _made_there(host: Host, leaf: SessionLeaf, args: Namespace) -> int:
    """A session the host made for an earlier try (its link died): saved
    here, and told or attached as if just made."""
    from multiserver_cli import _remote
    from multiserver_cli.attach import _over_ssh

    _remote.save_made(leaf)
    _remote.note_asked(leaf.name, False)
    name = leaf.name.rpartition(":")[2]
    if args.detach:
        print(printable(name))
        return 0
    words = ["attach", *_over_ssh.detach_words(args), name]
    return _over_ssh.interactive(host, words, args.detach_key)
