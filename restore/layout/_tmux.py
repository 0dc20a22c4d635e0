"""tmux: reading its windows and panes, opening a plan in it.

An arrangement's window is a tmux session of that name, its tabs are the
session's windows, a tab's split tree is the window's layout. Every call
goes through ``Tmux.argv`` (``tmux``, or ``tmux -S SOCKET`` for a
private server), one command at a time under ``COMMAND_TIMEOUT``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

import attrs

from restore.layout._layout import LayoutError, Op, OpenTab, SplitPane, parse_tmux_layout
from restore.layout._terminals import (
    ReadPane,
    ReadTab,
    TerminalError,
    descendants,
    process_argvs,
    process_tree,
    run_control,
)

_SEP = "\x1f"  # between fields of a format: a byte no name holds


@attrs.frozen
class Tmux:
    """A tmux server: ``("tmux",)`` is the user's default one (inside tmux,
    the one ``$TMUX`` names)."""

    argv: tuple[str, ...] = ("tmux",)

    def run(self, *args: str, what: str) -> str:
        return run_control([*self.argv, *args], what)

    def read(self) -> list[ReadTab]:
        """Every window of every session: its name, layout and panes."""
        fmt = _SEP.join(["#{session_name}", "#{window_id}", "#{window_name}", "#{window_layout}"])
        windows = self.run("list-windows", "-a", "-F", fmt, what="reading tmux's windows")
        pfmt = _SEP.join(
            [
                "#{window_id}",
                "#{pane_id}",
                "#{pane_pid}",
                "#{pane_width}",
                "#{pane_height}",
                "#{pane_current_path}",
            ]
        )
        panes = self.run("list-panes", "-a", "-F", pfmt, what="reading tmux's panes")
        tree = process_tree()
        by_window: dict[str, dict[int, ReadPane]] = {}
        for line in panes.splitlines():
            fields = line.split(_SEP)
            if len(fields) != 6:
                continue
            window, pane_id, pid, width, height, cwd = fields
            if not all(f.isdigit() for f in (pane_id.lstrip("%"), pid, width, height)):
                raise TerminalError(f"reading tmux's panes: not a pane: {line[:80]!r}")
            pane = int(pane_id.lstrip("%"))
            argvs = process_argvs(descendants(int(pid), tree))
            by_window.setdefault(window, {})[pane] = ReadPane(
                pane, int(width), int(height), cwd, argvs
            )
        tabs: list[ReadTab] = []
        for line in windows.splitlines():
            fields = line.split(_SEP)
            if len(fields) != 4:
                continue
            session, window, name, layout = fields
            try:
                layout_tree = parse_tmux_layout(layout)
            except LayoutError as exc:
                raise TerminalError(f"reading tmux's window {session}:{name}: {exc}") from exc
            tabs.append(ReadTab(session, name, layout_tree, by_window.get(window, {})))
        return tabs

    def sessions(self) -> set[str]:
        try:
            out = self.run("list-sessions", "-F", "#{session_name}", what="listing tmux sessions")
        except TerminalError as exc:
            # A server with no sessions is not running: nothing to list.
            if "no server running" in str(exc) or "error connecting" in str(exc):
                return set()
            raise
        return set(out.splitlines())

    def open(
        self,
        ops: Sequence[Op],
        env: Mapping[str, str],
        sizes: Mapping[str, tuple[int, int]] | None = None,
    ) -> dict[int, str]:
        """Run ``ops``: a new tab is a window of the tmux session named as
        the arrangement's window (made, detached, at ``sizes[window]``
        (cols, rows) when it does not exist), a split is ``split-window``.
        ``env`` is given to every pane. Returns each op's pane as tmux's
        pane id. TerminalError on the first command that fails (what was
        opened stays open)."""
        existing = self.sessions()
        panes: dict[int, str] = {}
        fmt = ("-P", "-F", "#{pane_id}")
        for op in ops:
            envs = [a for k, v in sorted(env.items()) for a in ("-e", f"{k}={v}")]
            shell = shlex.join(op.command.argv)
            what = f"opening {op.command.session} in tmux"
            if isinstance(op, OpenTab):
                title = op.title
                if op.window in existing:
                    out = self.run(
                        "new-window", *fmt, "-d", "-t", f"={op.window}:", "-n", title,
                        "-c", op.command.cwd, *envs, shell, what=what,
                    )  # fmt: skip
                else:
                    size: list[str] = []
                    if sizes and op.window in sizes:
                        cols, rows = sizes[op.window]
                        size = ["-x", str(cols), "-y", str(rows)]
                    out = self.run(
                        "new-session", *fmt, "-d", "-s", op.window, "-n", title, *size,
                        "-c", op.command.cwd, *envs, shell, what=what,
                    )  # fmt: skip
                    existing.add(op.window)
            else:
                assert isinstance(op, SplitPane)
                out = self.run(
                    "split-window", *fmt, "-d", "-t", panes[op.target],
                    "-h" if op.vertical else "-v", "-l", f"{op.percent}%",
                    "-c", op.command.cwd, *envs, shell, what=what,
                )  # fmt: skip
            panes[op.pane] = out.strip()
        return panes
