"""Whom a client trusts (issue 34, finding 4): the dirs it uses, checked up
to the root as OpenSSH's ``StrictModes`` checks a path, and the process it
connected to, checked before it sends a byte.

- ``check_path_chain`` on real dirs: owners (ours, root, another uid),
  modes (group or other write, root's sticky /tmp), symlinks followed and
  their targets checked too; ``ensure_private_dir`` makes missing parents
  0700 whatever the umask, and nothing in a dir that fails.
- A fake daemon of another uid at the very socket path (a socket file of
  ours, listening as ``NOBODY``): the library's trio ``connect``, its
  blocking ``connect_blocking``, connect-or-start in both, and the
  ``multiserver`` command (``ls``, ``new``) each refuse it with one line;
  it receives zero bytes. Listening as our uid, the same fake gets the
  Hello: the count is not vacuous.
- A planted fallback parent (``$TMPDIR/runtime-UID`` of another uid, or
  ours but 0777): ``new -d`` and ``ls`` say one line naming it and why,
  exit 1, and nothing is made in it.
- Files of the runtime, state and config dirs (config.toml, hosts.json,
  the saved arrangement, WAITING's and hold records, ssh's control
  sockets) are neither read nor written under a dir others may write.
- Finding 4's race, with its duration a parameter (a few seconds here, a
  minute in the slow test): the attacker of the finding, who owns the
  fallback parent and swaps the runtime dir with a dir of its own in a
  loop, and the attacker that remains once the user made the parent,
  whose swaps all fail. ``new`` runs in a loop meanwhile; the fake daemon
  beside the attacker receives zero bytes.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import attrs
import pytest
import trio

from multiserver import (
    DaemonPaths,
    UnsafeDirectory,
    UntrustedPeer,
    connect,
    dial_blocking,
    open_client,
)
from multiserver.client._spawn import connect_blocking
from multiserver.internal import (
    check_path_chain,
    ensure_private_dir,
    runtime_dir,
    unsafe_socket_dirs,
)
from tests.conftest import MsDirs, daemon_pids_under
from tests.multiserver.system.other_user import (
    NOBODY,
    OtherUser,
    fake_daemon,
    needs_root,
    renameat2_available,
    start_other_user,
    swapper,
)
from tests.reliability._cli import ms_run

UID = os.getuid()
QUICK_RACE = 3.0  # seconds of finding 4's race in the quick suite
SLOW_RACE = 60.0  # and in the slow one, as the issue asks


def owned(path: Path, uid: int, mode: int) -> Path:
    """``path``, a dir made now, owned by ``uid`` with ``mode``."""
    path.mkdir()
    os.chown(path, uid, uid)
    path.chmod(mode)
    return path


def refusal(path: Path, why: str) -> str:
    return f"{path}: {why}; refusing it"


OWNER = "not 0" if UID == 0 else f"not {UID} or root"
REPLACE = "another user could replace what is in it"
WRITABLE = "lets group or others write to it"


# --- check_path_chain ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o711, 0o555])
def test_chain_of_our_dirs_not_writable_by_others_passes(tmp_path: Path, mode: int) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "a").chmod(mode)
    check_path_chain(deep)
    check_path_chain(tmp_path / "a" / "." / "b" / ".." / "b")


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777, 0o1777, 0o2770])
def test_a_dir_group_or_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    bad.chmod(mode)
    (bad / "leaf").mkdir()
    if UID == 0 and mode & stat.S_ISVTX:  # root's sticky dir: /tmp
        check_path_chain(bad / "leaf")
        return
    with pytest.raises(UnsafeDirectory) as refused:
        check_path_chain(bad / "leaf")
    assert str(refused.value) == refusal(bad, f"mode {mode:04o} {WRITABLE}: {REPLACE}")


@needs_root
def test_a_dir_of_another_uid_is_refused_even_private(tmp_path: Path) -> None:
    theirs = owned(tmp_path / "theirs", NOBODY, 0o700)
    with pytest.raises(UnsafeDirectory) as refused:
        check_path_chain(theirs / "leaf")
    assert str(refused.value) == refusal(theirs, f"owned by uid {NOBODY}, {OWNER}: {REPLACE}")


@needs_root
def test_sticky_dir_passes_only_owned_by_root(tmp_path: Path) -> None:
    owned(tmp_path / "tmp", 0, 0o1777)
    check_path_chain(tmp_path / "tmp")
    theirs = owned(tmp_path / "their-tmp", NOBODY, 0o1777)
    with pytest.raises(UnsafeDirectory, match=f"owned by uid {NOBODY}"):
        check_path_chain(theirs)


@needs_root
def test_root_owned_group_writable_dir_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 0, NOBODY)
    shared.chmod(0o775)
    with pytest.raises(UnsafeDirectory) as refused:
        check_path_chain(shared)
    assert str(refused.value) == refusal(shared, f"mode 0775 {WRITABLE}: {REPLACE}")


def test_symlink_is_followed_and_its_target_checked(tmp_path: Path) -> None:
    good = tmp_path / "good" / "dir"
    good.mkdir(parents=True)
    (tmp_path / "link").symlink_to(good)
    check_path_chain(tmp_path / "link")
    # A target in a dir others may write is refused, named as the kernel
    # reaches it; a relative target's ".." is the link's dir's parent.
    bad = tmp_path / "bad"
    bad.mkdir()
    bad.chmod(0o777)
    (bad / "dir").mkdir()
    (good / "rel").symlink_to("../../bad/dir")
    with pytest.raises(UnsafeDirectory) as refused:
        check_path_chain(tmp_path / "link" / "rel")
    assert str(refused.value) == refusal(bad, f"mode 0777 {WRITABLE}: {REPLACE}")


@needs_root
def test_a_symlink_of_another_uid_is_refused(tmp_path: Path) -> None:
    """In a sticky dir (``/tmp``) a link's owner may point it elsewhere."""
    good = tmp_path / "good"
    good.mkdir()
    sticky = owned(tmp_path / "tmp", 0, 0o1777)
    link = sticky / "runtime-0"
    link.symlink_to(good)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(UnsafeDirectory) as refused:
        check_path_chain(link / "x")
    why = f"owned by uid {NOBODY}, {OWNER}: another user could point it elsewhere"
    assert str(refused.value) == refusal(link, why)


def test_a_symlink_loop_and_a_missing_dir_are_refused(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(UnsafeDirectory, match="more than 40 symbolic links"):
        check_path_chain(tmp_path / "loop" / "x")
    with pytest.raises(UnsafeDirectory) as refused:
        check_path_chain(tmp_path / "missing" / "x")
    assert str(refused.value) == f"{tmp_path / 'missing'}: No such file or directory"
    assert isinstance(refused.value.__cause__, FileNotFoundError)


def test_a_file_others_may_write_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("")
    config.chmod(0o644)
    check_path_chain(config)
    config.chmod(0o666)
    with pytest.raises(UnsafeDirectory) as refused:
        check_path_chain(config)
    why = f"mode 0666 {WRITABLE}: another user could change it"
    assert str(refused.value) == refusal(config, why)


# --- ensure_private_dir ------------------------------------------------------------------------


def test_missing_parents_are_made_0700_whatever_the_umask(tmp_path: Path) -> None:
    leaf = tmp_path / "a" / "b" / "multiserver"
    old = os.umask(0o002)
    try:
        ensure_private_dir(leaf)
    finally:
        os.umask(old)
    for made in (tmp_path / "a", tmp_path / "a" / "b", leaf):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made


def test_nothing_is_made_in_a_dir_that_fails(tmp_path: Path) -> None:
    parent = tmp_path / "runtime-0"
    parent.mkdir()
    parent.chmod(0o777)
    runtime = parent / "multiserver"
    with pytest.raises(UnsafeDirectory) as refused:
        ensure_private_dir(runtime / "multiserver-ssh")
    assert str(refused.value) == refusal(parent, f"mode 0777 {WRITABLE}: {REPLACE}")
    assert os.listdir(parent) == []
    assert stat.S_IMODE(parent.stat().st_mode) == 0o777  # never chmod-ed
    # A socket dir that would be made there is said unsafe before it exists.
    assert list(unsafe_socket_dirs([runtime])) == [runtime]
    assert unsafe_socket_dirs([tmp_path / "fine" / "multiserver"]) == {}


# --- a fake daemon of another uid at the socket path ---------------------------------------------


@pytest.fixture
def fake(ms_dirs: MsDirs) -> Iterator[OtherUser]:
    """A fake daemon of uid NOBODY on ``ms_dirs``' socket path."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another uid")
    ms_dirs.runtime.mkdir(mode=0o700)
    other = start_other_user(fake_daemon(ms_dirs.paths.socket))
    try:
        yield other
    finally:
        other.stop()


def peer_refusal(path: Path) -> str:
    return f"{path}: the process listening runs as uid {NOBODY}, not {UID}; refusing to talk to it"


def assert_untouched(fake: OtherUser, ms_dirs: MsDirs, connections: int) -> None:
    """The fake was connected to (``connections`` at least) but sent
    nothing, and no daemon of ours started beside it."""
    report = fake.stop()
    assert report["uid"] == NOBODY, report
    assert report["bytes"] == 0, report
    assert report["connections"] >= connections, report
    assert daemon_pids_under(ms_dirs.root) == []
    assert ms_dirs.paths.socket.is_socket()  # left alone


async def test_library_refuses_a_listener_of_another_uid(ms_dirs: MsDirs, fake: OtherUser) -> None:
    path = ms_dirs.paths.socket
    with trio.fail_after(10):
        with pytest.raises(UntrustedPeer) as refused:
            await connect(path)
        assert str(refused.value) == peer_refusal(path)
        with pytest.raises(UntrustedPeer) as refused:
            async with open_client(ms_dirs.paths, start=True):
                pass
        assert str(refused.value) == peer_refusal(path)
    with pytest.raises(UntrustedPeer) as refused:
        connect_blocking(path, time.monotonic() + 10)
    assert str(refused.value) == peer_refusal(path)
    with pytest.raises(UntrustedPeer) as refused:
        dial_blocking(ms_dirs.paths, start=True, deadline=time.monotonic() + 10)
    assert str(refused.value) == peer_refusal(path)
    assert_untouched(fake, ms_dirs, connections=4)


async def test_commands_refuse_a_listener_of_another_uid(ms_dirs: MsDirs, fake: OtherUser) -> None:
    path = ms_dirs.paths.socket
    listed = await ms_run("ls")
    assert listed.returncode == 1
    assert listed.stderr.decode() == f"multiserver: skipped {path}: {peer_refusal(path)}\n"
    made = await ms_run("new", "-d", "-n", "mine", "--", "sh", "-c", "echo DB_PASSWORD=x")
    assert made.returncode == 1
    assert made.stderr.decode() == f"multiserver: {peer_refusal(path)}\n"
    assert made.stdout == b""
    assert_untouched(fake, ms_dirs, connections=2)


async def test_a_listener_of_our_own_uid_is_talked_to(ms_dirs: MsDirs) -> None:
    """The fake, listening as this uid: the client sends its Hello, so a
    count of zero above is the check's doing, not the fake's."""
    ms_dirs.runtime.mkdir(mode=0o700)
    ours = start_other_user(fake_daemon(ms_dirs.paths.socket, as_nobody=False))
    try:
        sock = await connect(ms_dirs.paths.socket)
        with sock:
            await sock.send(b"hello")
    finally:
        report = ours.stop()
    assert (report["uid"], report["connections"], report["bytes"]) == (UID, 1, 5)


# --- a planted fallback parent ------------------------------------------------------------------


@attrs.frozen
class Fallback:
    tmp: Path  # $TMPDIR
    parent: Path  # $TMPDIR/runtime-UID
    paths: DaemonPaths


@pytest.fixture
def fallback(ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch) -> Fallback:
    """No runtime dir given: ``$TMPDIR/runtime-UID/multiserver`` is the
    runtime dir, $TMPDIR a fresh dir of this test's, root-owned and
    sticky as /tmp is (0755 until a test opens it to others)."""
    tmp = ms_dirs.root / "tmp"
    tmp.mkdir(mode=0o755)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.delenv("MULTISERVER_RUNTIME_DIR")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    parent = tmp / f"runtime-{UID}"
    if runtime_dir() != parent / "multiserver":
        # runtime_dir() takes /run/user/UID when it is a private dir of
        # ours, and nothing a command is given skips it.
        pytest.skip(f"/run/user/{UID} is a private dir here: the fallback is never reached")
    paths = DaemonPaths.for_number(1)
    assert paths.socket.parent == parent / "multiserver", "path too long for sun_path"
    return Fallback(tmp, parent, paths)


PLANTS = [
    pytest.param(NOBODY, f"owned by uid {NOBODY}, {OWNER}", id="another-uid", marks=needs_root),
    pytest.param(UID, f"mode 0777 {WRITABLE}", id="ours-0777"),
]


@pytest.mark.parametrize(("owner", "why"), PLANTS)
async def test_planted_fallback_parent_is_refused(
    ms_dirs: MsDirs, fallback: Fallback, owner: int, why: str
) -> None:
    planted = owned(fallback.parent, owner, 0o777)
    line = f"multiserver: {refusal(planted, f'{why}: {REPLACE}')}\n"
    for argv in (["new", "-d", "-n", "p", "--", "sleep", "100"], ["ls"]):
        result = await ms_run(*argv)
        assert (result.returncode, result.stderr.decode(), result.stdout) == (1, line, b""), argv
    with pytest.raises(UnsafeDirectory) as refused:
        async with open_client(fallback.paths, start=True):
            pass
    assert f"multiserver: {refused.value}\n" == line
    assert os.listdir(planted) == []
    assert stat.S_IMODE(planted.stat().st_mode) == 0o777 and planted.stat().st_uid == owner
    assert daemon_pids_under(ms_dirs.root) == []


# --- finding 4's race -------------------------------------------------------------------------

needs_renameat2 = pytest.mark.skipif(
    not renameat2_available(), reason="no renameat2 in this libc (glibc 2.28+)"
)
REL = f"runtime-{UID}"  # the fallback parent, from $TMPDIR
SOCKET = "multiserver-daemon-1.socket"


@attrs.frozen
class RaceRun:
    requests: int  # `new -d` commands run meanwhile
    made: int  # of which started a session
    lines: frozenset[str]  # what the refused ones said
    attacker: dict[str, object]  # its report


async def race(attacker: OtherUser, seconds: float) -> RaceRun:
    """``new -d`` again and again for ``seconds`` while ``attacker`` runs;
    then the attacker's report."""
    requests = made = 0
    lines: set[str] = set()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            result = await ms_run("new", "-d", "--", "sh", "-c", "echo DB_PASSWORD=secret")
            requests += 1
            if result.returncode == 0:
                made += 1
            else:
                lines.add(result.stderr.decode())
    finally:
        report = attacker.stop()
    print(f"finding 4 race, {seconds:g} s: {requests} requests, {made} made, attacker {report}")
    return RaceRun(requests, made, frozenset(lines), report)


async def race_against_the_planter(ms_dirs: MsDirs, fallback: Fallback, seconds: float) -> None:
    """The finding as it was: the attacker made $TMPDIR/runtime-UID first
    (0777, its own), the user's runtime dir is in it, and the attacker
    swaps it with a dir of its own holding its fake daemon, in a loop
    (one parent: no write on either dir is needed to swap them)."""
    planted = owned(fallback.parent, NOBODY, 0o777)
    fallback.paths.dir.mkdir(mode=0o700)  # the user's, from before: what the swaps exchange
    pairs = [(f"{REL}/multiserver", f"{REL}/evil")]
    attacker = start_other_user(swapper(fallback.tmp, pairs, f"{REL}/evil/{SOCKET}"))
    run = await race(attacker, seconds)
    assert run.made == 0 and run.requests > 0
    why = f"owned by uid {NOBODY}, {OWNER}: {REPLACE}"
    assert run.lines == {f"multiserver: {refusal(planted, why)}\n"}
    assert run.attacker["done"] == run.attacker["tried"] != 0, run.attacker  # every swap worked
    assert (run.attacker["connections"], run.attacker["bytes"]) == (0, 0), run.attacker
    assert daemon_pids_under(ms_dirs.root) == []


async def race_the_planter_lost(ms_dirs: MsDirs, fallback: Fallback, seconds: float) -> None:
    """What is left of the finding once the user's client made the
    parent: $TMPDIR open to all as /tmp is (root's, sticky), the attacker
    with a dir and a fake daemon of its own there, swapping the user's
    parent, or the runtime dir in it, with its own, in a loop."""
    fallback.tmp.chmod(0o1777)
    first = await ms_run("new", "-d", "-n", "first", "--", "sleep", "100")
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(fallback.parent.stat().st_mode) == 0o700
    pairs = [(REL, "evil"), (f"{REL}/multiserver", "evil/multiserver")]
    attacker = start_other_user(swapper(fallback.tmp, pairs, f"evil/multiserver/{SOCKET}"))
    run = await race(attacker, seconds)
    assert run.made == run.requests > 0, run.lines
    # Sticky $TMPDIR: not the parent's owner; the parent 0700: not let in.
    failed = run.attacker["failed"]
    assert run.attacker["done"] == 0 and isinstance(failed, dict), run.attacker
    assert set(failed) <= {"EPERM", "EACCES"}, run.attacker
    assert (run.attacker["connections"], run.attacker["bytes"]) == (0, 0), run.attacker


RACES = [
    pytest.param(race_against_the_planter, id="planted-parent"),
    pytest.param(race_the_planter_lost, id="users-parent"),
]


Race = Callable[[MsDirs, Fallback, float], Awaitable[None]]


@needs_root
@needs_renameat2
@pytest.mark.parametrize("form", RACES)
async def test_finding_4_race_reaches_the_fake_zero_times(
    ms_dirs: MsDirs, fallback: Fallback, form: Race
) -> None:
    await form(ms_dirs, fallback, QUICK_RACE)


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_root
@needs_renameat2
@pytest.mark.parametrize("form", RACES)
async def test_finding_4_race_for_a_minute(ms_dirs: MsDirs, fallback: Fallback, form: Race) -> None:
    await form(ms_dirs, fallback, SLOW_RACE)


# --- what is read from, and written to, the trusted dirs -----------------------------------------


@pytest.fixture
def open_parent(ms_dirs: MsDirs) -> Path:
    """A dir others may write (0777), as a planted parent is: the
    runtime, state and config dirs of ``ms_dirs`` moved under it."""
    parent = ms_dirs.root / "open"
    parent.mkdir()
    parent.chmod(0o777)
    return parent


def test_files_in_an_untrusted_dir_are_not_used(
    ms_dirs: MsDirs, open_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multiserver_cli import _shown
    from multiserver_cli._settings import Settings
    from restore import Hold, HoldRecord, HostsFileError, live_holds, load_hosts, read_saved
    from restore.remote._ssh import control_dir

    runtime, state, config = (open_parent / n for n in ("run", "state", "config"))
    for d in (runtime, state, config):
        d.mkdir(mode=0o700)
    monkeypatch.setenv("MULTISERVER_RUNTIME_DIR", str(runtime))
    why = refusal(open_parent, f"mode 0777 {WRITABLE}: {REPLACE}")
    # What another user could have put there is not read...
    (config / "config.toml").write_text('shell = "/tmp/theirs"\n')
    settings = Settings.read(config / "config.toml")
    assert settings.problems == [f"{config / 'config.toml'} is not used: {why}"]
    assert settings.value("shell") == ""
    (config / "hosts.json").write_text('{"format": 1, "hosts": []}')
    with pytest.raises(HostsFileError) as refused:
        load_hosts(config / "hosts.json")
    assert str(refused.value) == f"the hosts file {config / 'hosts.json'} is not used: {why}"
    (state / "arrangement.sqlite3").write_bytes(b"SQLite format 3\0")
    assert read_saved(state) is None  # the whole store decides: it refuses the dir
    (runtime / _shown.DIR_NAME).mkdir(mode=0o700)
    (runtime / _shown.DIR_NAME / "abc-1").write_text("5")
    assert _shown.load() == {}
    # ...nor is anything written there.
    _shown.record("abc", 2, 7)
    hold = Hold("s", "/x.socket", "abc", 3, os.getpid(), os.getpid())
    assert HoldRecord.write(hold) is None
    assert live_holds() == {}
    with pytest.raises(UnsafeDirectory) as refused:
        control_dir()  # ssh's control sockets
    assert str(refused.value) == why
    assert sorted(os.listdir(runtime / _shown.DIR_NAME)) == ["abc-1"]
    assert sorted(os.listdir(runtime)) == [_shown.DIR_NAME]
    # The same files in a trusted dir are.
    open_parent.chmod(0o700)
    assert _shown.load() == {("abc", 1): 5}
    assert Settings.read(config / "config.toml").value("shell") == "/tmp/theirs"
    assert load_hosts(config / "hosts.json") == {}
