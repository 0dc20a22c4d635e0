"""A person's tmux layout saved, lost in a reboot, and opened again.

A private tmux server (``tmux -S ROOT/tmux-N.sock -f /dev/null``) holds the
person's windows: one split three ways with set sizes, each pane attached
to a session, and one pane running a plain shell. ``save --from tmux``
records it; then the tmux server, the daemon and every child are SIGKILLed
(a reboot), a fresh tmux server starts, and ``restore --open tmux`` opens
the layout there. tmux then shows the same window names, the same split
tree with every pane's size within one cell, each pane attached to its
session, showing what the session printed before the reboot and the
marker. A second ``restore --open`` opens nothing new.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from multiserver_cli.commands.save import attached_session
from restore._plan import RELAUNCH_MARKER
from restore.layout._layout import LayoutNode, PaneNode, SplitNode, parse_tmux_layout
from restore.layout._terminals import descendants, process_argvs, process_tree
from restore.store._model import Arrangement, Node, SessionLeaf, Split
from restore.store._store import ArrangementStore
from tests.cli.conftest import SCREEN_TIMEOUT, ms, person_env, session_pids, wait_session
from tests.conftest import (
    POLL_INTERVAL,
    MsDirs,
    daemon_pids_under,
    is_alive,
    kill_children_of,
    wait_until_sync,
)

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")


@attrs.define
class TmuxServer:
    socket: Path
    env: dict[str, str]
    pids: list[int] = attrs.Factory(list)

    def tmux(self, *args: str) -> str:
        assert TMUX is not None
        done = subprocess.run(
            [TMUX, "-S", str(self.socket), "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            timeout=10,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"tmux {' '.join(args)} -> {done.returncode}: {done.stderr!r}")
        out = done.stdout.decode()
        if not self.pids:
            self.pids.append(int(self._display("#{pid}")))
        return out

    def _display(self, fmt: str) -> str:
        assert TMUX is not None
        return subprocess.run(
            [TMUX, "-S", str(self.socket), "display", "-p", fmt],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()

    def windows(self) -> dict[str, LayoutNode]:
        out = self.tmux(
            "list-windows", "-a", "-F", "#{session_name}:#{window_name} #{window_layout}"
        )
        return {
            name: parse_tmux_layout(layout)
            for name, layout in (line.split(" ", 1) for line in out.splitlines())
        }

    def pane_sessions(self) -> dict[int, str | None]:
        """Each pane's session (the ``multiserver attach`` running in it)."""
        out = self.tmux("list-panes", "-a", "-F", "#{pane_id} #{pane_pid}")
        tree = process_tree()
        found: dict[int, str | None] = {}
        for line in out.splitlines():
            pane, pid = line.split()
            names = [attached_session(a) for a in process_argvs(descendants(int(pid), tree))]
            found[int(pane.lstrip("%"))] = next((n for n in names if n), None)
        return found

    def screen(self, pane: int) -> str:
        return self.tmux("capture-pane", "-p", "-t", f"%{pane}")

    def kill(self) -> None:
        pane_pids = []
        with contextlib.suppress(subprocess.SubprocessError, OSError, pytest.fail.Exception):
            out = self.tmux("list-panes", "-a", "-F", "#{pane_pid}")
            pane_pids = [int(p) for p in out.split()]
        pids = [*self.pids, *(p for pid in pane_pids for p in session_pids(pid))]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until_sync(lambda: not any(is_alive(p) for p in pids), 5.0)


@pytest.fixture
def servers(ms_dirs: MsDirs) -> Iterator[list[TmuxServer]]:
    made: list[TmuxServer] = []
    try:
        yield made
    finally:
        for s in made:
            s.kill()


async def make_sessions(ms_dirs: MsDirs, names: str) -> None:
    """A detached shell session for each of ``names``, each in a dir of its
    own, having printed a line."""
    for name in names:
        (ms_dirs.root / name).mkdir()
        await ms(
            ms_dirs, "new", "-d", "-n", name, "--cwd", str(ms_dirs.root / name),
            "--", "sh", "-c", f"echo before-reboot-{name}; exec sh",
        )  # fmt: skip


def all_saved(ms_dirs: MsDirs, names: str) -> bool:
    """Every one of ``names`` has its typed line in what was kept on disk
    of it (its output file: its attach client writes it)."""
    from tests.cli.test_scrollback import kept

    return all(f"typed-{n}-42".encode() in kept(n) for n in names)


def leaves_of(node: Node) -> list[SessionLeaf]:
    if isinstance(node, SessionLeaf):
        return [node]
    return [x for c in node.children for x in leaves_of(c)]


def shape(node: LayoutNode) -> object:
    """A tree's shape and sizes, without pane ids."""
    if isinstance(node, PaneNode):
        return "pane"
    return (node.vertical, [shape(c) for c in node.children], list(node.sizes))


def panes_in_order(node: LayoutNode) -> list[int]:
    if isinstance(node, PaneNode):
        return [node.pane]
    return [p for c in node.children for p in panes_in_order(c)]


def assert_same_within_a_cell(a: LayoutNode, b: LayoutNode) -> None:
    assert type(a) is type(b), (shape(a), shape(b))
    if isinstance(a, SplitNode):
        assert isinstance(b, SplitNode)
        assert a.vertical == b.vertical and len(a.children) == len(b.children)
        for x, y in zip(a.sizes, b.sizes, strict=True):
            assert abs(x - y) <= 1, (shape(a), shape(b))
        for x, y in zip(a.children, b.children, strict=True):
            assert_same_within_a_cell(x, y)


async def wait_until(check: object, what: str) -> None:
    with trio.move_on_after(SCREEN_TIMEOUT):
        while not check():  # type: ignore[operator]
            await trio.sleep(POLL_INTERVAL * 4)
        return
    pytest.fail(f"not {what} within {SCREEN_TIMEOUT} s")


async def test_a_tmux_layout_comes_back_after_a_reboot(
    ms_dirs: MsDirs, servers: list[TmuxServer]
) -> None:
    env = person_env(ms_dirs)
    await make_sessions(ms_dirs, "abcd")
    first = TmuxServer(ms_dirs.root / "tmux-1.sock", env)
    servers.append(first)
    first.tmux(
        "new-session", "-d", "-s", "work", "-n", "edit", "-x", "120", "-y", "40",
        "multiserver attach a",
    )  # fmt: skip
    first.tmux("split-window", "-t", "work:edit", "-h", "-l", "30%", "multiserver attach b")
    first.tmux("split-window", "-t", "work:edit.1", "-v", "-l", "25%", "multiserver attach c")
    first.tmux("new-window", "-t", "work", "-n", "logs", "multiserver attach d")
    first.tmux("new-window", "-t", "work", "-n", "scratch", "sh")
    for name in "abcd":
        await wait_session(ms_dirs, name, lambda c: c is not None and c.held, "held")
    before = first.windows()
    # What each session shows before the reboot, typed by the person; its
    # attach client keeps it in the store as its scrollback.
    panes = first.pane_sessions()
    for pane, name in panes.items():
        if name is not None:
            first.tmux("send-keys", "-t", f"%{pane}", f"echo typed-{name}-$((6*7))", "Enter")
    await wait_until(lambda: all_saved(ms_dirs, "abcd"), "in the kept output")

    saved = await ms(ms_dirs, "save", "--from", "tmux", "--to", str(first.socket))
    said = saved.stderr.decode()
    assert "saved the layout of tmux: 3 tabs, 4 sessions" in said, said
    assert "work / scratch / pane" in said and "not a multiserver session" in said, said

    # A reboot: the terminal, the daemon and every child SIGKILLed.
    first.kill()
    for pid in daemon_pids_under(ms_dirs.root):
        kill_children_of(pid)
        os.kill(pid, signal.SIGKILL)
    assert wait_until_sync(lambda: not daemon_pids_under(ms_dirs.root), 5.0)

    second = TmuxServer(ms_dirs.root / "tmux-2.sock", env)
    servers.append(second)
    # Named: unnamed, tmux names it after its program, once it has run
    # (``tmux`` until then: issue 36 saw that race).
    second.tmux("new-session", "-d", "-s", "base", "-n", "shell", "sh")
    restored = await ms(ms_dirs, "restore", "--open", "tmux", "--to", str(second.socket))
    assert "opened 4 panes in tmux" in restored.stderr.decode(), restored.stderr
    after = second.windows()
    assert sorted(after) == ["base:shell", "work:edit", "work:logs"]
    assert_same_within_a_cell(before["work:edit"], after["work:edit"])
    assert_same_within_a_cell(before["work:logs"], after["work:logs"])

    # Each pane attached to its session, in the saved order, showing what
    # it printed before the reboot, then the marker.
    order = panes_in_order(after["work:edit"]) + panes_in_order(after["work:logs"])
    await wait_until(
        lambda: [second.pane_sessions().get(p) for p in order] == list("abcd"), "attached"
    )
    for pane, name in zip(order, "abcd", strict=True):
        await wait_until(lambda p=pane: RELAUNCH_MARKER[:30] in second.screen(p), "marked")
        screen = second.screen(pane)
        # What it showed before the reboot (typed, not printed by its
        # command again), then the marker.
        assert screen.index(f"typed-{name}-42") < screen.index(RELAUNCH_MARKER[:30]), screen

    again = await ms(ms_dirs, "restore", "--open", "tmux", "--to", str(second.socket))
    assert "opened 0 panes in tmux" in again.stderr.decode(), again.stderr
    assert "a: held by a client, left where it is" in again.stderr.decode()
    assert sorted(second.windows()) == sorted(after)


async def test_a_session_made_in_a_tmux_pane_is_saved_where_it_is(
    ms_dirs: MsDirs, servers: list[TmuxServer]
) -> None:
    """No separate save: `multiserver new` inside a pane records the layout
    (in the background), with the new session in that pane."""
    await ms(ms_dirs, "new", "-d", "-n", "old", "--", "sh")
    server = TmuxServer(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    servers.append(server)
    server.tmux("new-session", "-d", "-s", "dev", "-n", "code", "-x", "100", "-y", "30", "sh")
    server.tmux("split-window", "-t", "dev:code", "-v", "-l", "40%", "multiserver attach old")
    server.tmux("send-keys", "-t", "dev:code.0", "multiserver new -n fresh -- sh", "Enter")

    def saved() -> Arrangement:
        with ArrangementStore.open() as store:
            return store.load()

    def placed() -> bool:
        w = saved().window("dev")
        return w is not None and [x.name for t in w.tabs for x in leaves_of(t.root)] == [
            "fresh",
            "old",
        ]

    await wait_until(placed, "saved in its pane")
    (tab,) = saved().windows[0].tabs
    assert tab.title == "code"
    assert isinstance(tab.root, Split) and not tab.root.vertical
    assert tab.root.sizes is not None and abs(tab.root.sizes[0] - 0.6) < 0.05


def test_the_documented_example_runs(ms_dirs: MsDirs, servers: list[TmuxServer]) -> None:
    """docs/examples/layout_plan.py prints its plan, then opens it in tmux."""
    example = Path(__file__).parents[2] / "docs" / "examples" / "layout_plan.py"
    server = TmuxServer(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    servers.append(server)
    done = subprocess.run(
        [sys.executable, str(example), str(server.socket)],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "pane 2 right of pane 1, 34%: tests" in done.stdout, done.stdout
    server.pids.append(int(server._display("#{pid}")))
    layout = server.windows()["work:code"]
    assert isinstance(layout, SplitNode) and layout.vertical
    assert [type(c) for c in layout.children] == [PaneNode, SplitNode]


async def test_adopted_panes_become_sessions_at_the_next_restore(
    ms_dirs: MsDirs, servers: list[TmuxServer]
) -> None:
    """--adopt-panes: a pane running something else is saved as a new
    session in its cwd, and restore starts it (it had no child yet)."""
    project = ms_dirs.root / "project"
    project.mkdir()
    server = TmuxServer(ms_dirs.root / "tmux.sock", person_env(ms_dirs))
    servers.append(server)
    server.tmux("new-session", "-d", "-s", "dev", "-n", "code", "-c", str(project), "sh")
    plain = await ms(ms_dirs, "save", "--from", "tmux", "--to", str(server.socket))
    assert "dev / code / pane 0: runs sh, not a multiserver session" in plain.stderr.decode()
    assert "0 sessions" in plain.stderr.decode()

    adopted = await ms(
        ms_dirs, "save", "--from", "tmux", "--to", str(server.socket), "--adopt-panes"
    )
    assert "1 pane(s) to start as new sessions" in adopted.stderr.decode(), adopted.stderr
    with ArrangementStore.open() as store:
        (leaf,) = store.load().leaves()
    assert (leaf.name, leaf.argv, leaf.cwd, leaf.ref) == (
        "project",
        ["/bin/sh"],
        str(project),
        None,
    )

    restored = await ms(ms_dirs, "restore")
    assert "project: relaunched (never started" in restored.stderr.decode(), restored.stderr
    started = await wait_session(ms_dirs, "project", lambda c: c is not None, "started")
    assert started is not None and started.cwd == str(project)
