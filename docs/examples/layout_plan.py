"""An app's view of restore --open: an arrangement in, terminal operations
out (pure), then an executor (here: tmux, when given a socket).

    python docs/examples/layout_plan.py            # print the plan
    python docs/examples/layout_plan.py SOCKET     # open it in that tmux server
"""

import sys

from restore import (
    Arrangement,
    OpenTab,
    SessionLeaf,
    Split,
    SplitPane,
    Tab,
    Tmux,
    Window,
    open_plan,
)

editor = SessionLeaf("editor", ["vim"], "/tmp", cols=80, rows=40)
tests = SessionLeaf("tests", ["sh"], "/tmp", cols=40, rows=30)
logs = SessionLeaf("logs", ["sh"], "/tmp", cols=40, rows=9)
layout = Split(True, [editor, Split(False, [tests, logs], [0.75, 0.25])], [0.66, 0.34])
arrangement = Arrangement([Window("work", [Tab(layout, "code")])])


def attach(leaf: SessionLeaf) -> tuple[str, ...]:
    # What each pane runs; here a stand-in that shows the session's name.
    return ("sh", "-c", f"echo {leaf.name}; exec sh")


ops = open_plan(arrangement, attach)
for op in ops:
    if isinstance(op, OpenTab):
        print(f"tab {op.title!r} in window {op.window!r}: pane {op.pane} runs {op.command.session}")
    else:
        assert isinstance(op, SplitPane)
        side = "right of" if op.vertical else "below"
        print(f"pane {op.pane} {side} pane {op.target}, {op.percent}%: {op.command.session}")

if len(sys.argv) > 1:
    panes = Tmux(("tmux", "-S", sys.argv[1])).open(ops, env={})
    print("opened:", panes)
