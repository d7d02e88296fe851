"""Robust statistics of timing samples (pure).

Median and IQR rather than mean and stdev: kernel timings have a long right tail (preemption, clock changes),
and one outlier must not move the figure a budget is judged on. The relative noise is IQR / median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LatencyStats:
    median_us: float
    q1_us: float
    q3_us: float
    mean_us: float
    stdev_us: float
    min_us: float
    max_us: float
    samples: int

    @property
    def iqr_us(self) -> float:
        return self.q3_us - self.q1_us

    @property
    def rel_noise(self) -> float:
        """IQR relative to the median: the spread a repeated measurement should expect."""
        return _iqr_over_median(self.q1_us, self.q3_us, self.median_us)

    def to_json(self) -> dict[str, float]:
        out = {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}
        out["iqr_us"] = round(self.iqr_us, 4)
        out["rel_noise"] = round(self.rel_noise, 5)
        return out

    @classmethod
    def from_json(cls, data: dict[str, float]) -> LatencyStats:
        """Raises ValueError naming the first missing or non-numeric field."""
        values = {}
        for name in cls.__dataclass_fields__:
            value = data.get(name) if isinstance(data, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"latency field {name!r} is missing or not a number")
            values[name] = value
        return cls(**values)


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _iqr_over_median(q1: float, q3: float, median: float) -> float:
    return (q3 - q1) / median if median > 0 else math.inf


def relative_noise(samples_us: Sequence[float]) -> float:
    """`summarize(samples_us).rel_noise` without the rest of the summary: the stopping rule asks it after
    every round, and sorting already-sorted samples is linear."""
    if not samples_us:
        raise ValueError("no timing samples")
    values = sorted(samples_us)
    q1, q3 = _quartiles(values)
    return _iqr_over_median(q1, q3, statistics.median(values))


def summarize(samples_us: Sequence[float]) -> LatencyStats:
    if not samples_us:
        raise ValueError("no timing samples")
    values = sorted(samples_us)
    q1, q3 = _quartiles(values)
    return LatencyStats(
        median_us=statistics.median(values),
        q1_us=q1,
        q3_us=q3,
        mean_us=statistics.fmean(values),
        stdev_us=statistics.stdev(values) if len(values) > 1 else 0.0,
        min_us=values[0],
        max_us=values[-1],
        samples=len(values),
    )


@dataclass(frozen=True)
class RatioStats:
    """candidate / baseline from interleaved rounds: per-round ratios, so slow machine drifts cancel."""

    candidate: str
    baseline: str
    median: float
    q1: float
    q3: float
    rounds: int

    @property
    def rel_noise(self) -> float:
        return (self.q3 - self.q1) / self.median if self.median > 0 else math.inf

    def to_json(self) -> dict[str, object]:
        return {
            "candidate": self.candidate,
            "baseline": self.baseline,
            "median": round(self.median, 5),
            "q1": round(self.q1, 5),
            "q3": round(self.q3, 5),
            "rel_noise": round(self.rel_noise, 5),
            "rounds": self.rounds,
        }


def paired_ratio(candidate: str, baseline: str, a_us: Sequence[float], b_us: Sequence[float]) -> RatioStats:
    ratios = sorted(x / y for x, y in zip(a_us, b_us, strict=True) if y > 0)
    if not ratios:
        raise ValueError("no paired samples")
    q1, q3 = _quartiles(ratios)
    return RatioStats(candidate, baseline, statistics.median(ratios), q1, q3, len(ratios))
