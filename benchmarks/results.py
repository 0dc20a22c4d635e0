"""What a figure produces: its settings, result rows with their targets
(``Limit``), and the statistics every figure uses (medians, per-run ratios,
ranges). Pure: no processes, no I/O."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Any

import attrs


@attrs.frozen
class Settings:
    runs: int
    quick: bool
    sessions: int = 200
    # The larger session count (start, memory, reattach at scale).
    many: int = 1000
    # time.monotonic() past which every figure does one run only, so that a
    # slow machine still finishes the whole run within its budget.
    late: float | None = None

    def runs_within(self, seconds: float, at_least: int = 3) -> Iterator[int]:
        """Run numbers 0, 1, ... up to ``runs``; after ``at_least`` runs (or
        ``runs`` if fewer), no run starts that would, at the mean pace so
        far, end past ``seconds`` from the first; past ``late``, no second
        run starts at all. A loaded machine shortens a figure instead of
        running past the whole run's budget. Rows say how many runs they
        got."""
        t0 = time.monotonic()
        for i in range(self.runs):
            now = time.monotonic()
            spent = now - t0
            if i >= 1 and self.late is not None and now > self.late:
                return
            if i >= min(at_least, self.runs) and spent + spent / i > seconds:
                return
            yield i


@attrs.frozen
class Limit:
    """A target: ``observed op bound``, where ``observed`` is the median
    itself, its ratio to the same run's baseline, or another comparison
    (``what`` names it, e.g. "ms", "x raw PTY", "x faster than dtach")."""

    op: str  # "<", "<=", ">="
    bound: float
    observed: float
    what: str

    @property
    def met(self) -> bool:
        if self.op == "<":
            return self.observed < self.bound
        if self.op == "<=":
            return self.observed <= self.bound
        if self.op == ">=":
            return self.observed >= self.bound
        raise ValueError(f"unknown comparison {self.op!r}")

    def text(self) -> str:
        return f"{self.op} {self.bound:g}{_unit_gap(self.what)}{self.what}"

    def verdict(self) -> str:
        """'0.81x raw PTY against >= 0.95x raw PTY: **missed**, by 0.14x raw PTY (...)'"""
        gap = abs(self.observed - self.bound)
        how = "met" if self.met else "**missed**"
        side = "with a margin of" if self.met else "short by"
        rel = f" ({self.observed / self.bound:.2f}x the limit)" if self.bound else ""
        sep = _unit_gap(self.what)
        return (
            f"{self.observed:.3g}{sep}{self.what} against {self.text()}: {how}, "
            f"{side} {gap:.3g}{sep}{self.what}{rel}"
        )


def _unit_gap(what: str) -> str:
    return "" if what.startswith("x") else " "


@attrs.frozen
class Row:
    """One line of the results table. ``value`` and ``baseline_value`` are
    medians of ``runs`` runs, in ``unit``; None when not measured."""

    figure: str
    subject: str
    value: float | None
    unit: str
    runs: int
    baseline: str
    baseline_value: float | None
    target: str = ""
    met: bool | None = None
    detail: str = ""
    samples: tuple[float, ...] = ()
    baseline_samples: tuple[float, ...] = ()
    # When given, ``target`` and ``met`` are their text and outcome (all met).
    limits: tuple[Limit, ...] = ()

    @classmethod
    def against(cls, limits: Limit | Sequence[Limit | None] | None, **fields: Any) -> Row:
        """A row whose target and outcome come from ``limits``."""
        if isinstance(limits, Limit):
            limits = [limits]
        given = tuple(lim for lim in limits or () if lim is not None)
        if not given:
            return cls(**fields)
        return cls(
            **fields,
            target="; ".join(lim.text() for lim in given),
            met=all(lim.met for lim in given),
            limits=given,
        )

    @property
    def ratio(self) -> float | None:
        """The median of the per-run ratios (subject over the baseline of the
        same run), which cancels drift in the machine's load; the ratio of
        the medians when the runs do not pair up."""
        if self.value is None or not self.baseline_value:
            return None
        pairs = list(zip(self.samples, self.baseline_samples, strict=False))
        if pairs and len(self.samples) == len(self.baseline_samples) and all(b for _, b in pairs):
            return median([a / b for a, b in pairs])
        return self.value / self.baseline_value


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def paired_ratio(samples: Sequence[float], baseline: Sequence[float]) -> float:
    """The median of the per-run ratios (run i over baseline run i)."""
    return median([a / b for a, b in zip(samples, baseline, strict=True)])


def spread(samples: Sequence[float], scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    """'min-max' of the samples, for the detail column."""
    if not samples:
        return ""
    return f"{fmt.format(min(samples) * scale)}-{fmt.format(max(samples) * scale)}"


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "ms":
        return f"{value:.1f} ms" if value >= 10 else f"{value:.3f} ms"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    if unit == "MiB/s":
        return f"{value:.0f} MiB/s"
    return f"{value:.3g} {unit}"
