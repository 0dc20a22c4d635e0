"""The picture of a run (docs/benchmarks.png): one page of the headline
comparisons, beside the peers and the raw baselines of the same run, read
at a glance. The full tables stay in the markdown.

Panels: command start-up; attached throughput and its CPU; keystroke
echo; the daemon's memory at 200 and 1,000 sessions; restore (at login
after a reboot, with the daemons alive, and the library at scale). Each
bar says its value and its ratio to the baseline it is judged against;
a target is a red line (dashed across the panel when every bar shares it,
a short mark on the bar when it is the bar's own). Labels wrap; nothing is
cut off. Rows a run did not measure are left out, and a peer that is not
installed says so in place of its bar.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from benchmarks.peers import PEERS
from benchmarks.results import Limit, Row

MULTISERVER = "#1f77b4"
PEER = "#8c8c8c"
BASELINE = "#2ca02c"
TARGET = "#d62728"
LABEL_WIDTH = 30
TITLE_WIDTH = 70
PEER_NAMES = tuple(p.name for p in PEERS)


@attrs.frozen
class Bar:
    label: str
    value: float | None  # None: not measured (the note says why)
    color: str
    note: str
    target: float | None = None  # this bar's own target, in the panel's unit
    group: str = ""  # a line separates bars of different groups


@attrs.frozen
class Panel:
    title: str
    unit: str
    bars: tuple[Bar, ...]
    # (x, label): targets every bar shares, dashed across the panel
    lines: tuple[tuple[float, str], ...] = ()
    # (x, label): a reference, dotted (e.g. python -c pass)
    references: tuple[tuple[float, str], ...] = ()


def _fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.0f} ms" if value >= 10 else f"{value:.2f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    if unit == "MiB/s":
        return f"{value:.0f} MiB/s"
    return f"{value:.3g} {unit}"


def _color(r: Row) -> str:
    return MULTISERVER if r.subject.startswith("multiserver") else PEER


def _absolute(limit: Limit, r: Row) -> float | None:
    """Where ``limit`` falls in the row's own unit: its bound, or the bound
    times the baseline it is a ratio to; None for other comparisons."""
    if limit.what == r.unit:
        return limit.bound
    named = limit.what.removeprefix("x ").strip()
    if limit.what.startswith("x") and r.baseline_value and r.baseline.startswith(named):
        return limit.bound * r.baseline_value
    return None


def _row_bar(r: Row, label: str, short_base: str, own_target: bool = True) -> Bar:
    assert r.value is not None
    ratio = f" · {r.ratio:.2f}x {short_base}" if r.ratio is not None and short_base else ""
    target = None
    if own_target:
        marks = [x for lim in r.limits if (x := _absolute(lim, r)) is not None]
        target = marks[0] if marks else None
    return Bar(label, r.value, _color(r), _fmt(r.value, r.unit) + ratio, target)


def _short(subject: str) -> str:
    """A subject's name without its command line: 'multiserver', 'floor'."""
    name = subject.split(":")[0]
    return "floor: cat copying PTY to PTY" if name == "floor" else name


def _figure(rows: Sequence[Row], prefix: str) -> list[Row]:
    return [r for r in rows if r.figure.startswith(prefix)]


def _peers_of(group: Sequence[Row], short_base: str) -> list[Bar]:
    """A bar per peer of the figure: measured, or why not."""
    bars = []
    for name in PEER_NAMES:
        r = next((r for r in group if r.subject == name), None)
        if r is None:
            continue
        if r.value is None:
            why = "not installed" if "not installed" in r.detail else "not measured"
            bars.append(Bar(name, None, PEER, why))
        else:
            bars.append(_row_bar(r, name, short_base))
    return bars


def _commands(rows: Sequence[Row]) -> Panel | None:
    from benchmarks import commands

    bars: list[Bar] = []
    pass_ms: float | None = None
    for command in commands.COMMANDS:
        group = _figure(rows, commands.FIGURE.format(command.name))
        ours = [r for r in group if r.subject.startswith("multiserver") and r.value is not None]
        if not ours:
            continue
        for r in ours:
            pass_ms = pass_ms or r.baseline_value
            label = (
                command.name if r.subject != commands.MANY else f"{command.name}, 1,000 sessions"
            )
            # The shared 3x-pass target is one line; the 1,000-session row's
            # own target is 1.3x its 1-session figure.
            bar = _row_bar(r, label, "pass", own_target=False)
            if r.subject == commands.MANY and r.limits:
                growth = r.limits[0]
                bar = attrs.evolve(
                    bar,
                    target=growth.bound * (ours[0].value or 0.0),
                    note=f"{_fmt(r.value or 0.0, 'ms')} · {growth.observed:.2f}x at 1 session",
                )
            bars.append(attrs.evolve(bar, group=command.name))
        for r in group:
            if r.subject in PEER_NAMES and r.value is not None:
                bar = _row_bar(r, f"{command.name}: {r.subject}", "pass")
                bars.append(attrs.evolve(bar, group=command.name))
    if not bars or pass_ms is None:
        return None
    return Panel(
        "Command start-up: one fresh process, spawn to exit (ms, lower is better); "
        "target: 3x python -c pass, and at 1,000 sessions 1.3x the same command at 1",
        "ms",
        tuple(bars),
        lines=((commands.AT_MOST_PASS * pass_ms, f"target: {commands.AT_MOST_PASS:g}x pass"),),
        references=((pass_ms, f"python -c pass, {_fmt(pass_ms, 'ms')}"),),
    )


def _compare(
    rows: Sequence[Row],
    prefix: str,
    title: str,
    base_label: str,
    short_base: str,
    keep: Callable[[Row], bool] = lambda r: True,
) -> Panel | None:
    """multiserver's rows, then the peers', then the baseline as a bar."""
    group = [r for r in _figure(rows, prefix) if keep(r)]
    ours = [r for r in group if r.subject.startswith("multiserver") and r.value is not None]
    others = [
        r
        for r in group
        if r.value is not None
        and not r.subject.startswith("multiserver")
        and r.subject not in PEER_NAMES
    ]
    if not ours:
        return None
    bars = [_row_bar(r, _short(r.subject), short_base) for r in ours]
    bars += [_row_bar(r, _short(r.subject), short_base) for r in others]
    bars += _peers_of(group, short_base)
    base = ours[0]
    if base.baseline_value is not None:
        bars.append(
            Bar(base_label, base.baseline_value, BASELINE, _fmt(base.baseline_value, base.unit))
        )
    return Panel(title, base.unit, tuple(bars))


def _memory(rows: Sequence[Row]) -> Panel | None:
    bars: list[Bar] = []
    unit = "MiB"
    for count in ("200", "1000"):
        group = _figure(rows, f"memory (PSS) with {count} idle sessions")
        ours = [r for r in group if r.subject.startswith("multiserver") and r.value is not None]
        if not ours:
            continue
        n = f"{int(count):,}"
        bars += [
            attrs.evolve(_row_bar(r, f"{n}: multiserver daemon", "raw"), group=n) for r in ours
        ]
        for b in _peers_of(group, "raw"):
            bars.append(attrs.evolve(b, label=f"{n}: {b.label}", group=n))
        base = ours[0]
        if base.baseline_value is not None:
            bars.append(
                Bar(
                    f"{n}: raw, bare python holding the PTYs",
                    base.baseline_value,
                    BASELINE,
                    _fmt(base.baseline_value, unit),
                    group=n,
                )
            )
    if not bars:
        return None
    return Panel(
        "Memory (PSS) of the server side with 200 and 1,000 idle sessions (MiB, lower is better)",
        unit,
        tuple(bars),
    )


def _restore(rows: Sequence[Row]) -> Panel | None:
    picks = (  # figure, a word its subject has, the bar's label
        ("restore at login", "reboot", "at login, after a reboot: 100 on 3 daemons, relaunched"),
        ("restore at login", "alive", "at login, daemons alive: 100 on 3 daemons, reattached"),
        ("restore 1000 sessions across 10 daemons (ms)", "", "library: 1,000 on 10 daemons"),
        ("restore 1000 sessions across 10 daemons (s)", "", "command: 1,000 on 10 daemons"),
        ("restore 10000 sessions across 100 daemons", "", "library: 10,000 on 100 (simulated)"),
    )
    bars = []
    for prefix, word, label in picks:
        for r in _figure(rows, prefix):
            if r.value is None or word not in r.subject:
                continue
            scale = 1000.0 if r.unit == "s" else 1.0
            marks = [lim.bound * scale for lim in r.limits if lim.what == r.unit]
            target = marks[0] if marks else None
            note = _fmt(r.value * scale, "ms")
            if target is not None:
                note += f" · target < {_fmt(target, 'ms')}"
            bars.append(Bar(label, r.value * scale, _color(r), note, target))
    if not bars:
        return None
    return Panel(
        "Restore: sessions back, from the call or the spawn to the return "
        "(ms, lower is better); red mark: each one's target",
        "ms",
        tuple(bars),
    )


def panels(rows: Sequence[Row]) -> tuple[list[Panel], list[Panel]]:
    """The page's two columns: start-up and memory; the attached client and restore."""
    left = [_commands(rows), _memory(rows)]
    right = [
        _compare(
            rows,
            "attached throughput, 32 MiB",
            "Attached throughput: 32 MiB to a terminal (MiB/s, higher is better)",
            "raw PTY: the program on the terminal itself",
            "raw",
            keep=lambda r: not r.subject.startswith("reader ceiling"),
        ),
        _compare(
            rows,
            "attached throughput: CPU seconds",
            "CPU seconds, all processes, for those 32 MiB (lower is better)",
            "raw PTY: the program on the terminal itself",
            "raw",
        ),
        _compare(
            rows,
            "keystroke echo round trip, p50",
            "Keystroke echo round trip, p50 (ms, lower is better)",
            "raw PTY: the program on the terminal itself",
            "raw",
        ),
        _restore(rows),
    ]
    return [p for p in left if p is not None], [p for p in right if p is not None]


def _draw(ax: Any, panel: Panel) -> None:
    bars = panel.bars
    y = list(range(len(bars)))
    values = [b.value or 0.0 for b in bars]
    ax.barh(y, values, color=[b.color for b in bars], height=0.7)
    ax.set_yticks(y, [textwrap.fill(b.label, LABEL_WIDTH) for b in bars], fontsize=9)
    ax.invert_yaxis()
    marks = [b.target for b in bars if b.target is not None]
    right = max([*values, *marks, *(x for x, _ in panel.lines)], default=1.0) or 1.0
    ax.set_xlim(0, right * 1.55)
    for i, b in enumerate(bars):
        ax.text(
            max(b.value or 0.0, b.target or 0.0) + right * 0.015,
            i,
            b.note,
            va="center",
            fontsize=8.5,
            color="#222222",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.4, "alpha": 0.85},
        )
        if b.target is not None:
            ax.plot([b.target, b.target], [i - 0.45, i + 0.45], color=TARGET, linewidth=2.5)
        if i and b.group != bars[i - 1].group:
            ax.axhline(i - 0.5, color="#bbbbbb", linewidth=0.8)
    if marks:
        ax.plot([], [], color=TARGET, linewidth=2.5, label="the bar's own target")
    for x, label in panel.lines:
        ax.axvline(x, color=TARGET, linestyle="--", linewidth=1.5, label=label)
    for x, label in panel.references:
        ax.axvline(x, color=BASELINE, linestyle=":", linewidth=1.5, label=label)
    if panel.lines or panel.references or marks:
        # Below the axis, where it hides no bar.
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8.5, frameon=False
        )
    ax.set_title(textwrap.fill(panel.title, TITLE_WIDTH), fontsize=10.5, loc="left")
    ax.set_xlabel(panel.unit, fontsize=9)
    ax.tick_params(axis="x", labelsize=8.5)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)


def draw(rows: Sequence[Row], path: Path, heading: str) -> str:
    """Draw the page into ``path``. Returns "" on success, else why no
    chart was drawn."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return "No chart: matplotlib is not installed (`make bench` installs the bench extra)."
    columns = panels(rows)
    if not any(columns):
        return "No chart: none of its figures was measured."
    heights = [[len(p.bars) * 0.32 + 1.5 for p in col] for col in columns]
    total = max(sum(h) for h in heights)
    fig = plt.figure(figsize=(18, total + 1.2), layout="constrained")
    fig.suptitle(textwrap.fill(heading, 150), fontsize=12, x=0.01, ha="left")
    subfigs: Any = fig.subfigures(1, 2)
    for sub, col, hs in zip(subfigs, columns, heights, strict=True):
        if not col:
            continue
        spare = total - sum(hs)
        axes = sub.subplots(
            len(hs) + bool(spare > 0.5),
            1,
            squeeze=False,
            height_ratios=[*hs, spare] if spare > 0.5 else hs,
        )[:, 0]
        for ax, panel in zip(axes, col, strict=False):
            _draw(ax, panel)
        for ax in axes[len(col) :]:
            ax.axis("off")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return ""
