"""A person's kitty layout saved, lost in a reboot, and opened again.

kitty runs for real, headless under Xvfb (``--config NONE``, remote control
on a private socket). The person's OS window has two tabs: ``edit`` split
three ways (a vertical divider, then the right side stacked) with set
ratios, and ``logs``; every window is attached to a session. ``save --from
kitty`` records it; then kitty, the daemon and every child are SIGKILLed
(a reboot); a fresh kitty starts and ``restore --open kitty`` opens the
layout in it. ``kitty @ ls`` then shows the same tab titles, the same split
tree with ratios within 5%, each window attached to the right session, and
``kitty @ get-text`` of each shows what the session printed before the
reboot and the marker. A second ``restore --open`` opens nothing new.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from multiserver_cli.commands.save import attached_session
from restore._plan import RELAUNCH_MARKER
from restore.layout._layout import LayoutNode, PaneNode, SplitNode, kitty_pairs
from tests.cli.conftest import SCREEN_TIMEOUT, ms, person_env, wait_session
from tests.cli.test_layout_tmux import all_saved, make_sessions
from tests.conftest import (
    POLL_INTERVAL,
    MsDirs,
    daemon_pids_under,
    is_alive,
    kill_children_of,
    wait_until_sync,
)
from tests.remote.sshd import process_tree

KITTY = shutil.which("kitty")
XVFB = shutil.which("Xvfb")
pytestmark = pytest.mark.skipif(
    KITTY is None or XVFB is None,
    reason="kitty or Xvfb is not installed (make test installs them where it can: apt, as root)",
)


@attrs.define
class Display:
    """An Xvfb server on a display number it picks itself (``-displayfd``)."""

    proc: subprocess.Popen[bytes]
    number: str

    @classmethod
    def start(cls) -> Display:
        assert XVFB is not None
        r, w = os.pipe()
        # -noreset: by default the server resets whenever its last client
        # leaves, and drops a client that connects meanwhile: an xterm
        # starting while xdotool polled for its window died with "Can't
        # open display" (3 times in 40 under load; never with -noreset).
        proc = subprocess.Popen(
            [
                XVFB, "-displayfd", str(w), "-screen", "0", "1280x800x24",
                "-nolisten", "tcp", "-noreset",
            ],
            pass_fds=[w],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(w)
        try:
            with os.fdopen(r, "rb") as f:
                number = f.readline().decode().strip()  # written once it listens
        except BaseException:
            proc.kill()
            raise
        if not number.isdigit():
            proc.kill()
            pytest.fail("Xvfb did not start")
        return cls(proc, number)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@attrs.define
class KittyRun:
    """One kitty instance with remote control on ``socket``; ``options``
    are more ``-o`` settings over ``--config NONE``'s defaults."""

    socket: Path
    env: dict[str, str]
    options: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None

    def start(self, *argv: str) -> None:
        assert KITTY is not None
        self.proc = subprocess.Popen(
            [
                KITTY, "--config", "NONE", "-o", "allow_remote_control=yes",
                "-o", "enabled_layouts=splits,stack", "--listen-on", f"unix:{self.socket}",
                *(a for option in self.options for a in ("-o", option)),
                *argv,
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        assert wait_until_sync(lambda: self.socket.exists(), SCREEN_TIMEOUT), "kitty did not start"
        assert wait_until_sync(self.answers, SCREEN_TIMEOUT), "kitty does not answer"

    def answers(self) -> bool:
        return self.at_check("ls") is not None

    def at_check(self, *args: str) -> str | None:
        assert KITTY is not None
        done = subprocess.run(
            [KITTY, "@", "--to", f"unix:{self.socket}", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return done.stdout if done.returncode == 0 else None

    def at(self, *args: str) -> str:
        out = self.at_check(*args)
        if out is None:
            pytest.fail(f"kitty @ {' '.join(args)} failed")
        return out

    def ls(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = json.loads(self.at("ls"))
        return data

    def tabs(self) -> list[dict[str, Any]]:
        return [t for w in self.ls() for t in w["tabs"]]

    def kill(self) -> None:
        if self.proc is not None:
            kill_tree(self.proc)
            self.proc = None


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and every process under it, by pid; reap ``proc``."""
    pids = process_tree(proc.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)
    wait_until_sync(lambda: not any(is_alive(p) for p in pids), 5.0)


@pytest.fixture
def display() -> Iterator[Display]:
    d = Display.start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def kittys(ms_dirs: MsDirs, display: Display) -> Iterator[Callable[[str], KittyRun]]:
    made: list[KittyRun] = []
    env = {**person_env(ms_dirs), "DISPLAY": f":{display.number}"}
    env.pop("KITTY_LISTEN_ON", None)
    env.pop("KITTY_WINDOW_ID", None)

    def make(name: str) -> KittyRun:
        k = KittyRun(ms_dirs.root / f"{name}.sock", env)
        made.append(k)
        return k

    try:
        yield make
    finally:
        for k in made:
            k.kill()


def tree_of(tab: dict[str, Any]) -> LayoutNode:
    return kitty_pairs(tab["layout_state"], [w["id"] for w in tab["windows"]])


def window_session(window: dict[str, Any]) -> str | None:
    for argv in [window["cmdline"], *(p["cmdline"] for p in window["foreground_processes"])]:
        name = attached_session(argv)
        if name:
            return name
    return None


def order(node: LayoutNode) -> list[int]:
    if isinstance(node, PaneNode):
        return [node.pane]
    return [p for c in node.children for p in order(c)]


def assert_same_tree(a: LayoutNode, b: LayoutNode) -> None:
    assert type(a) is type(b)
    if isinstance(a, SplitNode):
        assert isinstance(b, SplitNode)
        assert a.vertical == b.vertical and len(a.children) == len(b.children)
        for x, y in zip(a.sizes, b.sizes, strict=True):
            assert abs(x - y) <= 0.05, (a, b)
        for x, y in zip(a.children, b.children, strict=True):
            assert_same_tree(x, y)


async def wait_until(check: Callable[[], object], what: str) -> None:
    with trio.move_on_after(SCREEN_TIMEOUT):
        while not check():
            await trio.sleep(POLL_INTERVAL * 4)
        return
    pytest.fail(f"not {what} within {SCREEN_TIMEOUT} s")


async def test_a_kitty_layout_comes_back_after_a_reboot(
    ms_dirs: MsDirs, kittys: Callable[[str], KittyRun]
) -> None:
    await make_sessions(ms_dirs, "abcd")
    first = kittys("kitty-1")
    await trio.to_thread.run_sync(first.start, "multiserver", "attach", "a")
    (w_a,) = [w["id"] for t in first.tabs() for w in t["windows"]]
    first.at("set-tab-title", "--match", f"window_id:{w_a}", "edit")
    first.at("goto-layout", "--match", f"window_id:{w_a}", "splits")
    w_b = int(first.at("launch", "--location", "vsplit", "multiserver", "attach", "b"))
    first.at("resize-window", "--match", f"id:{w_b}", "--axis", "horizontal", "--increment", "-12")
    w_c = int(first.at("launch", "--location", "hsplit", "multiserver", "attach", "c"))
    first.at("resize-window", "--match", f"id:{w_c}", "--axis", "vertical", "--increment", "-6")
    first.at("launch", "--type=tab", "--tab-title", "logs", "multiserver", "attach", "d")
    for name in "abcd":
        await wait_session(ms_dirs, name, lambda c: c is not None and c.held, "held")
    for tab in first.tabs():
        for w in tab["windows"]:
            name = window_session(w)
            first.at("send-text", "--match", f"id:{w['id']}", f"echo typed-{name}-$((6*7))\r")
    await wait_until(lambda: all_saved(ms_dirs, "abcd"), "in the kept output")
    before = {t["title"]: tree_of(t) for t in first.tabs()}
    edit = before["edit"]
    assert isinstance(edit, SplitNode) and abs(edit.sizes[0] - 0.5) > 0.1, edit  # set ratios

    saved = await ms(ms_dirs, "save", "--from", "kitty", "--to", f"unix:{first.socket}")
    assert "saved the layout of kitty: 2 tabs, 4 sessions" in saved.stderr.decode()

    # A reboot: the terminal, the daemon and every child SIGKILLed.
    first.kill()
    for pid in daemon_pids_under(ms_dirs.root):
        kill_children_of(pid)
        os.kill(pid, signal.SIGKILL)
    assert wait_until_sync(lambda: not daemon_pids_under(ms_dirs.root), 5.0)

    second = kittys("kitty-2")
    await trio.to_thread.run_sync(second.start, "sh")
    restored = await ms(ms_dirs, "restore", "--open", "kitty", "--to", f"unix:{second.socket}")
    assert "opened 4 panes in kitty" in restored.stderr.decode(), restored.stderr
    os_windows = second.ls()
    assert len(os_windows) == 2  # the one kitty opened with, and the restored "main"
    opened = os_windows[-1]["tabs"]
    assert [t["title"] for t in opened] == ["edit", "logs"]
    for tab in opened:
        assert_same_tree(before[tab["title"]], tree_of(tab))

    windows = {w["id"]: w for t in opened for w in t["windows"]}
    ids = [i for t in opened for i in order(tree_of(t))]
    assert [window_session(windows[i]) for i in ids] == list("abcd")
    for wid, name in zip(ids, "abcd", strict=True):

        def shown(wid: int = wid) -> str:
            return second.at("get-text", "--match", f"id:{wid}", "--extent", "all")

        await wait_until(lambda shown=shown: RELAUNCH_MARKER[:30] in shown(), "marked")
        text = shown()
        # What it showed before the reboot (typed, not printed by its
        # command again), then the marker.
        assert text.index(f"typed-{name}-42") < text.index(RELAUNCH_MARKER[:30]), text

    again = await ms(ms_dirs, "restore", "--open", "kitty", "--to", f"unix:{second.socket}")
    assert "opened 0 panes in kitty" in again.stderr.decode(), again.stderr
    assert len(second.ls()) == 2
