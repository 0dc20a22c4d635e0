"""The report: the machine and versions, the results table, the targets met
or missed, the method (each benchmark module's docstring) and, where
matplotlib is installed, a PNG chart. Markdown for docs/benchmarks.md, JSON
with every sample for later comparison."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import attrs
import trio

import multiserver
from benchmarks import chart as chart_module, installed as installed_module
from benchmarks.installed import installed
from benchmarks.peers import PEERS
from benchmarks.results import (
    Limit,
    Row,
    fmt_value,
)

REPO = Path(__file__).resolve().parent.parent
# Hand-written: what profiles showed about the missed targets (dated inside).
FINDINGS = Path(__file__).resolve().parent / "findings.md"


@attrs.frozen
class RunInfo:
    date: str
    seconds: float
    runs: int
    quick: bool
    only: tuple[str, ...]
    machine: tuple[tuple[str, str], ...]
    # 1-minute load average when the run started and ended: other work on the
    # machine (a test suite, a build) shows up here and in the spread.
    load: tuple[float, float]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _git(*args: str) -> str:
    # GIT_OPTIONAL_LOCKS=0: never take the index lock (others commit meanwhile).
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _multiserver_version() -> str:
    commit = _git("rev-parse", "--short", "HEAD")
    if not commit:
        return multiserver.__version__
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return f"{multiserver.__version__} (commit {commit}{', uncommitted changes' if dirty else ''})"


def machine() -> tuple[tuple[str, str], ...]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return (
        ("CPUs (nproc)", str(usable)),
        ("CPU model", _cpu_model()),
        ("memory", _memory()),
        ("kernel", f"{platform.system()} {platform.release()}"),
        ("python", platform.python_version()),
        ("trio", trio.__version__),
        ("multiserver", _multiserver_version()),
        ("multiserver command, as timed", installed().describe()),
        *((p.name, p.version()) for p in PEERS),
    )


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


# --- formatting --------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: Sequence[Row]) -> str:
    head = (
        "| figure | subject | median | runs | baseline, same run | ratio | target | met | detail |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    last_figure = None
    for r in rows:
        figure = r.figure if r.figure != last_figure else ""
        last_figure = r.figure
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        met = {True: "met", False: "**missed**", None: ""}[r.met]
        cells = [
            figure,
            r.subject,
            fmt_value(r.value, r.unit) if r.value is not None else "not measured",
            str(r.runs) if r.runs else "-",
            f"{r.baseline}: {fmt_value(r.baseline_value, r.unit)}" if r.baseline else "-",
            ratio,
            r.target,
            met,
            r.detail,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return head + "\n".join(lines) + "\n"


def verdicts(rows: Sequence[Row]) -> list[str]:
    """One line per row with a target: met or missed, and by how much."""
    out: list[str] = []
    for r in rows:
        if r.met is None or r.value is None:
            continue
        if r.limits:
            out.extend(f"- {r.figure}, {r.subject}: {lim.verdict()}" for lim in r.limits)
            continue
        limit = float(r.target.split()[1])
        how = "met" if r.met else "**missed**"
        gap = fmt_value(abs(limit - r.value), r.unit)
        out.append(
            f"- {r.figure}, {r.subject}: {fmt_value(r.value, r.unit)} against {r.target}: "
            f"{how}, {'under' if r.met else 'over'} by {gap} ({r.value / limit:.2f}x the limit)"
        )
    return out


def peer_comparison(rows: Sequence[Row]) -> list[str]:
    """multiserver's best row against each measured peer, per figure."""
    out = []
    by_figure: dict[str, list[Row]] = {}
    for r in rows:
        by_figure.setdefault(r.figure, []).append(r)
    peer_names = {p.name for p in PEERS}
    for figure, group in by_figure.items():
        ours = [r for r in group if r.subject.startswith("multiserver") and r.value]
        theirs = [r for r in group if r.subject in peer_names and r.value]
        if not ours or not theirs:
            continue
        # Throughput: higher is better; every other figure: lower is.
        higher = group[0].unit == "MiB/s"
        best = (max if higher else min)(ours, key=lambda r: r.value or 0.0)
        parts = [
            f"{p.subject} {fmt_value(p.value, p.unit)} = {(p.value or 0.0) / (best.value or 1.0):.2f}x"
            for p in theirs
        ]
        out.append(
            f"- {figure}: {_ours(best.subject)} "
            f"{fmt_value(best.value, best.unit)}; each peer, and its figure over "
            f"multiserver's: {'; '.join(parts)}"
        )
    return out


def markdown(
    rows: Sequence[Row],
    info: RunInfo,
    modules: Sequence[ModuleType],
    chart: str | None,
    chart_note: str,
) -> str:
    parts = [
        "# Benchmarks\n",
        "Generated by `make bench` (`.venv/bin/python -m benchmarks`); do not edit by hand. "
        f"Run on {info.date}; the whole run took {info.seconds:.0f} s"
        + (" (`--quick`)" if info.quick else "")
        + (f" (only: {', '.join(info.only)})" if info.only else "")
        + ".\n",
        "## Machine and versions\n",
        "| | |\n|---|---|\n"
        + "".join(f"| {k} | {_cell(v)} |\n" for k, v in info.machine)
        + f"| load average (1 min), start / end | {info.load[0]:.2f} / {info.load[1]:.2f} |\n",
        *_summaries(rows, modules),
        "## Results\n",
        f"Every figure is the median of up to {info.runs} runs (the runs column gives the "
        "count: past its share of the 10-minute budget, a figure stops after 3 runs, or 2 "
        "for memory at 1,000 sessions); each subject and its baseline are "
        "measured in the same run, interleaved run by run. The ratio is the median of the "
        "per-run ratios, subject over the baseline of the same run (for times and memory, "
        "lower is better; for throughput, higher is). Sessions run `sleep 1000` unless the method says otherwise. "
        "Every `multiserver` command a figure runs is the one installed from a wheel of this "
        "checkout into a venv of its own (`benchmarks/installed.py`; the machine table says "
        "where), never the dev venv's editable install. Every process a benchmark starts is stopped "
        "by pid; daemons and peers use fresh dirs under /tmp. The machine may be shared: "
        "other work (see the load average above) slows every subject, so the ratios to the "
        "same run's baseline travel better than the absolute figures.\n",
        table(rows),
    ]
    v = verdicts(rows)
    if v:
        parts += ["## Targets (issues 2, 3, 4, 6, 22, 23 and 25)\n", "\n".join(v) + "\n"]
    c = peer_comparison(rows)
    if c:
        parts += ["## Against the peers\n", "\n".join(c) + "\n"]
    if FINDINGS.exists():
        parts += ["## Why targets are missed: profiles\n", FINDINGS.read_text()]
    parts.append("## Chart\n")
    parts.append(f"{_first_paragraph(chart_module.__doc__)}\n")
    parts.append(f"![benchmarks]({chart})\n" if chart else chart_note + "\n")
    parts.append("## Method\n")
    parts.append(
        f"### the command as timed (`benchmarks/installed.py`)\n\n{installed_module.__doc__.strip()}\n"
    )
    for mod in modules:
        doc = (mod.__doc__ or "").strip()
        parts.append(f"### {mod.NAME} (`benchmarks/{mod.NAME}.py`)\n\n{doc}\n")
    return "\n".join(parts)


def _summaries(rows: Sequence[Row], modules: Sequence[ModuleType]) -> list[str]:
    """The headline tables of the modules that have one (``SUMMARY``, its
    title, and ``summary(rows)``), before the full results table."""
    parts: list[str] = []
    for mod in modules:
        text = mod.summary(rows) if hasattr(mod, "summary") else ""
        if text:
            parts += [f"## {mod.SUMMARY}\n", text]
    return parts


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def write_json(path: Path, rows: Sequence[Row], info: RunInfo) -> None:
    data = {
        "info": attrs.asdict(info),
        "rows": [{**attrs.asdict(r), "ratio": r.ratio} for r in rows],
    }
    path.write_text(json.dumps(data, indent=2) + "\n")


def read_json(path: Path) -> tuple[list[Row], RunInfo]:
    """The rows and run ``write_json`` wrote, samples and targets included."""
    data = json.loads(path.read_text())
    rows = []
    for raw in data["rows"]:
        fields = {k: v for k, v in raw.items() if k != "ratio"}
        fields["samples"] = tuple(fields.get("samples", ()))
        fields["baseline_samples"] = tuple(fields.get("baseline_samples", ()))
        fields["limits"] = tuple(Limit(**lim) for lim in fields.get("limits", ()))
        rows.append(Row(**fields))
    info = dict(data["info"])
    info["only"] = tuple(info["only"])
    info["machine"] = tuple((k, v) for k, v in info["machine"])
    info["load"] = tuple(info["load"])
    return rows, RunInfo(**info)


def heading(info: RunInfo) -> str:
    """The chart's first line: when, what and where."""
    machine = dict(info.machine)
    partial = " (partial run)" if info.only or info.quick else ""
    return (
        f"multiserver benchmarks{partial}, {info.date}: multiserver {machine['multiserver']}; "
        f"{machine['CPUs (nproc)']} CPUs, load average {info.load[0]:.2f} at the start, "
        f"{info.load[1]:.2f} at the end. The full tables: docs/benchmarks.md"
    )


def _ours(subject: str) -> str:
    """multiserver's subject, once: ``multiserver (how)`` (a subject may
    already be written so: "multiserver (touches no session)")."""
    how = subject.removeprefix("multiserver").strip(", :")
    if how.startswith("(") and how.endswith(")"):
        how = how[1:-1]
    return f"multiserver ({how})" if how else "multiserver"
