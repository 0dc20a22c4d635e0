"""tmux: reading its windows and panes, opening a plan in it.

An arrangement's window is a tmux session of that name, its tabs are the
session's windows, a tab's split tree is the window's layout. Every call
goes through ``Tmux.argv`` (``tmux``, or ``tmux -S SOCKET`` for a
private server), one command at a time under ``COMMAND_TIMEOUT``.
"""

from __future__ import annotations

import os
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


def counted_format(*fields: str) -> str:
    """A tmux format giving each of ``fields`` counted: its length in
    bytes, ``:``, then its bytes (``#{n:F}:#{F}``); one record a line."""
    return "".join(f"#{{n:{f}}}:#{{{f}}}" for f in fields)


def counted_records(out: str, width: int) -> list[tuple[str, ...]]:
    """The records of a ``counted_format`` of ``width`` fields, read by
    their counts: a name or a path that holds a newline, or any byte at
    all, is that field's (a line-and-separator split would cut it, or
    drop the window without a word). ``out`` is ``run``'s (its bytes are
    ``os.fsencode(out)``). ValueError if it is not such records."""
    data = os.fsencode(out)
    records: list[tuple[str, ...]] = []
    at = 0
    while at < len(data):
        fields: list[str] = []
        for _ in range(width):
            colon = data.find(b":", at)
            count = data[at:colon]
            if colon < 0 or not count.isdigit() or colon + 1 + int(count) > len(data):
                raise ValueError(f"not a counted field at byte {at}: {data[at : at + 40]!r}")
            end = colon + 1 + int(count)
            fields.append(os.fsdecode(data[colon + 1 : end]))
            at = end
        if data[at : at + 1] != b"\n":
            raise ValueError(f"not the end of a record at byte {at}: {data[at : at + 40]!r}")
        at += 1
        records.append(tuple(fields))
    return records


def tmux_literal(text: str) -> str:
    """``text`` as tmux takes it literally where it expands formats (a
    session's or a window's name: ``#(cmd)`` there runs cmd)."""
    return text.replace("#", "##")


@attrs.frozen
class Tmux:
    """A tmux server: ``("tmux",)`` is the user's default one (inside tmux,
    the one ``$TMUX`` names)."""

    argv: tuple[str, ...] = ("tmux",)

    def run(self, *args: str, what: str) -> str:
        return run_control([*self.argv, *args], what)

    def _records(self, command: str, fields: tuple[str, ...], what: str) -> list[tuple[str, ...]]:
        out = self.run(command, "-a", "-F", counted_format(*fields), what=what)
        try:
            return counted_records(out, len(fields))
        except ValueError as exc:
            raise TerminalError(f"{what}: {exc}") from exc

    def read(self) -> list[ReadTab]:
        """Every window of every session: its name, layout and panes."""
        windows = self._records(
            "list-windows",
            ("session_name", "window_id", "window_name", "window_layout"),
            "reading tmux's windows",
        )
        panes = self._records(
            "list-panes",
            ("window_id", "pane_id", "pane_pid", "pane_width", "pane_height", "pane_current_path"),
            "reading tmux's panes",
        )
        tree = process_tree()
        by_window: dict[str, dict[int, ReadPane]] = {}
        for window, pane_id, pid, width, height, cwd in panes:
            if not all(f.isdigit() for f in (pane_id.lstrip("%"), pid, width, height)):
                raise TerminalError(f"reading tmux's panes: not a pane: {pane_id!r} {pid!r}")
            pane = int(pane_id.lstrip("%"))
            argvs = process_argvs(descendants(int(pid), tree))
            by_window.setdefault(window, {})[pane] = ReadPane(
                pane, int(width), int(height), cwd, argvs
            )
        tabs: list[ReadTab] = []
        for session, window, name, layout in windows:
            try:
                layout_tree = parse_tmux_layout(layout)
            except LayoutError as exc:
                raise TerminalError(f"reading tmux's window {session}:{name!r}: {exc}") from exc
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
                title = tmux_literal(op.title)
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
                        "new-session", *fmt, "-d", "-s", tmux_literal(op.window), "-n", title, *size,
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
