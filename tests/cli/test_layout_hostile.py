"""Layouts read from, and written for, terminals that hold what they
should not (issue 23): each is one clear line (or a "not saved" line),
never a traceback, a hang past its bound, or an executed line."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from restore import Kitty, TerminalError, window_name_for, window_name_problem
from restore.layout import _kitty
from restore.store._model import Arrangement, SessionLeaf, Tab, Window
from restore.store._store import ArrangementStore
from tests.cli import test_layout_tmux
from tests.cli.conftest import person_env, run_ms
from tests.cli.test_layout_tmux import TmuxServer
from tests.conftest import MsDirs
from tests.timing import TIMER_SLACK


@contextlib.contextmanager
def dripping_peer(path: Path, every: float) -> Iterator[None]:
    """A unix socket that accepts, reads nothing useful back, and sends a
    byte every ``every`` seconds until the test is done (30 s at most)."""
    done = threading.Event()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()

        def drip() -> None:
            listener.settimeout(30)
            with contextlib.suppress(OSError), listener.accept()[0] as conn:
                end = time.monotonic() + 30
                while not done.is_set() and time.monotonic() < end:
                    conn.sendall(b"x")
                    done.wait(every)

        thread = threading.Thread(target=drip, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(35)


def test_a_kitty_that_drips_is_cut_at_the_call_s_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is the whole call's, not each recv's: a byte every 0.2 s
    would keep a 1 s per-recv timeout from ever firing."""
    bound = 1.0
    monkeypatch.setattr(_kitty, "COMMAND_TIMEOUT", bound)
    sock = tmp_path / "kitty.sock"
    with dripping_peer(sock, 0.2):
        t0 = time.monotonic()
        with pytest.raises(TerminalError) as caught:
            Kitty.at(f"unix:{sock}").ls()
        took = time.monotonic() - t0
    assert str(caught.value) == "reading kitty's windows: kitty did not answer within 1 s"
    assert took < bound + TIMER_SLACK, took


def test_a_kitty_socket_held_by_another_user_is_sent_nothing(tmp_path: Path) -> None:
    """kitty's socket may be an abstract name, or in a dir others write:
    another local user's listener there gets no command (issue 34)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another uid")
    from tests.multiserver.system.other_user import NOBODY, fake_daemon, start_other_user

    sock = tmp_path / "kitty.sock"
    other = start_other_user(fake_daemon(sock))
    try:
        with pytest.raises(TerminalError) as caught:
            Kitty.at(f"unix:{sock}").ls()
    finally:
        report = other.stop()
    assert str(caught.value) == (
        f"reading kitty's windows: unix:{sock}: the process listening runs as uid"
        f" {NOBODY}, not 0; refusing to talk to it"
    )
    assert (report["connections"], report["bytes"]) == (1, 0), report


# --- tmux, for real ---------------------------------------------------------------------

TMUX = shutil.which("tmux")
servers = test_layout_tmux.servers  # the fixture: every tmux server stopped by pid
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")


def saved() -> Arrangement:
    with ArrangementStore.open() as store:
        return store.load()


@needs_tmux
def test_a_pane_whose_cwd_is_not_utf8_is_saved_with_its_bytes(
    ms_dirs: MsDirs, servers: list[TmuxServer]
) -> None:
    cwd = os.fsdecode(bytes(ms_dirs.root) + b"/caf\xe9")
    os.mkdir(cwd)
    server = TmuxServer(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    servers.append(server)
    server.tmux("new-session", "-d", "-s", "dev", "-n", "code", "-c", cwd, "sh")
    done = run_ms(ms_dirs, "save", "--from", "tmux", "--to", str(server.socket), "--adopt-panes")
    said = done.stderr.decode()
    assert "saved the layout of tmux: 1 tab, 0 sessions, 1 pane(s)" in said, said
    (leaf,) = saved().leaves()
    assert os.fsencode(leaf.cwd) == bytes(ms_dirs.root) + b"/caf\xe9"


@needs_tmux
def test_a_tmux_window_named_with_a_newline_is_saved_under_that_name(
    ms_dirs: MsDirs, servers: list[TmuxServer]
) -> None:
    server = TmuxServer(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    servers.append(server)
    server.tmux("new-session", "-d", "-s", "dev", "-n", "ed\nit", "-c", str(ms_dirs.root), "sh")
    done = run_ms(ms_dirs, "save", "--from", "tmux", "--to", str(server.socket), "--adopt-panes")
    assert "1 tab, 0 sessions, 1 pane(s)" in done.stderr.decode(), done.stderr
    (window,) = saved().windows
    assert (window.name, [t.title for t in window.tabs]) == ("dev", ["ed\nit"])


@pytest.mark.parametrize("window", ["a.b", "c:d", "w\ntouch x", "#(touch x)", "a$b", ""])
def test_new_refuses_a_window_name_tmux_would_change(ms_dirs: MsDirs, window: str) -> None:
    done = run_ms(ms_dirs, "new", "-d", "--window", window, "--", "true", check=False)
    assert done.returncode == 2
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith(f"multiserver: bad --window {window!r}: "), line
    assert saved().windows == []  # nothing started, nothing saved


def test_names_a_terminal_gives_are_mapped_by_the_same_rule() -> None:
    for name in ("main", "work 2", "é", "kitty-3"):
        assert window_name_problem(name) is None and window_name_for(name) == name
    assert window_name_for("a\\\\b") == "a__b"  # tmux's escape of "a\b"
    assert window_name_for("x.y:z") == "x_y_z"
    assert window_name_for("#") == "_"
    for name in ("a\\\\b", "x.y:z", "#", " pad "):
        assert window_name_problem(name) is not None
        assert window_name_problem(window_name_for(name)) is None


def arranged(window: str, title: str) -> None:
    """A saved session in ``window``, its tab titled ``title`` (as an older
    or a tampered store may hold them)."""
    leaf = SessionLeaf("s1", ["sh"], "/")
    with ArrangementStore.open() as store:
        store.modify(lambda _old: Arrangement([Window(window, [Tab(leaf, title)])]))


def test_the_printed_plan_runs_no_line_from_a_name(ms_dirs: MsDirs) -> None:
    arranged("w\ntouch made-by-window", "t\ntouch made-by-title")
    done = run_ms(ms_dirs, "restore", "--open", "print")
    # stdout is the script alone (`restore --open print | sh`): the
    # restore's report goes to stderr.
    script = done.stdout.decode()
    assert "NAME " not in script and "OUTCOME" in done.stderr.decode()
    # Nothing was opened: it says what it printed (issue 36: "opened 1 pane in print").
    assert "printed the commands for 1 pane" in done.stderr.decode(), done.stderr
    assert "# w\\ntouch made-by-window / t\\ntouch made-by-title" in script, script
    # Run it, with a wezterm that only answers a pane id.
    bin_dir = ms_dirs.root / "bin"
    bin_dir.mkdir()
    (bin_dir / "wezterm").write_text("#!/bin/sh\necho 7\n")
    (bin_dir / "wezterm").chmod(0o755)
    ran = subprocess.run(
        ["sh", "-c", script],
        cwd=ms_dirs.root,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        timeout=30,
    )
    assert ran.returncode == 0, ran.stderr
    assert not list(ms_dirs.root.glob("made-by-*"))


@needs_tmux
def test_a_tab_title_is_no_tmux_format_when_opened(
    ms_dirs: MsDirs, servers: list[TmuxServer]
) -> None:
    arranged("main", "#(touch made-by-title)")
    server = TmuxServer(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    servers.append(server)
    server.tmux("new-session", "-d", "-s", "base", "sh")
    done = run_ms(ms_dirs, "restore", "--open", "tmux", "--to", str(server.socket), check=False)
    assert "opened 1 pane in tmux" in done.stderr.decode(), done.stderr
    names = server.tmux("list-windows", "-a", "-F", "#{session_name}:#{window_name}")
    assert "main:#(touch made-by-title)" in names.splitlines(), names
    assert not list(ms_dirs.root.glob("made-by-*"))
    assert not list(Path(ms_dirs.root / "home").glob("made-by-*"))
