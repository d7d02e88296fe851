"""Latency figures that a comparison may divide by: finite, positive and in order, or a ValueError (pure).

A hand-edited baseline (or results file) with a NaN median made a regression gate pass ("+nan%", "same"),
and a zero median divided by zero; every figure that reaches a comparison goes through here first.
"""

from __future__ import annotations

import math
from typing import Any

from ddbench.timing.stats import LatencyStats

# Figures that must be positive: a kernel takes time, and the median is the denominator of every change.
_POSITIVE = ("median_us", "q1_us", "q3_us", "mean_us", "min_us", "max_us")
# Derived figures a file may carry; recomputed from the others, but never allowed to be NaN or negative.
_DERIVED = ("iqr_us", "rel_noise")


def checked_latency(data: Any) -> LatencyStats:
    """LatencyStats from JSON, refusing what would make a comparison lie; the ValueError names the field."""
    if not isinstance(data, dict):
        raise ValueError("latency must be an object of figures")
    for name in (*_POSITIVE, "stdev_us", *_DERIVED):
        value = data.get(name)
        if name in _DERIVED and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"latency.{name} is missing or not a number")
        if not math.isfinite(value):
            raise ValueError(f"latency.{name} is {value}, not a finite number")
        if name in _POSITIVE and value <= 0:
            raise ValueError(f"latency.{name} is {value:g}; a latency must be positive")
        if value < 0:
            raise ValueError(f"latency.{name} is {value:g}; it cannot be negative")
    samples = data.get("samples")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"latency.samples is {samples!r}; it must be a whole number of at least 1")
    stats = LatencyStats.from_json(data)
    order = (stats.min_us, stats.q1_us, stats.median_us, stats.q3_us, stats.max_us)
    if list(order) != sorted(order):
        raise ValueError(
            "latency figures out of order: min_us <= q1_us <= median_us <= q3_us <= max_us must hold "
            f"(got {' / '.join(f'{v:g}' for v in order)}; a negative IQR cannot be measured)"
        )
    if not stats.min_us <= stats.mean_us <= stats.max_us:
        raise ValueError(f"latency.mean_us {stats.mean_us:g} lies outside min_us..max_us")
    return stats


def comparable(stats: LatencyStats) -> bool:
    """Whether a median may be divided by (a LatencyStats built in code, not loaded, can hold anything)."""
    return math.isfinite(stats.median_us) and stats.median_us > 0 and math.isfinite(stats.rel_noise)
