"""Percentiles and the small number formatting the report uses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class Dist:
    """A latency distribution in milliseconds."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float
    mean: float

    @classmethod
    def of_seconds(cls, values: Sequence[float]) -> Dist:
        ms = [v * 1000 for v in values]
        if not ms:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(len(ms), percentile(ms, 50), percentile(ms, 90), percentile(ms, 99),
                   max(ms), sum(ms) / len(ms))


def ratio(measured: float, baseline: float) -> float:
    """How many times better ``measured`` is than ``baseline`` for a "lower is
    better" figure is baseline/measured; callers pick the direction."""
    if not baseline or math.isnan(baseline) or math.isnan(measured) or not measured:
        return math.nan
    return measured / baseline


def fmt(value: float, unit: str = "", digits: int | None = None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def fmt_ratio(value: float) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.2f}×" if value < 10 else f"{value:,.0f}×"
