"""What timing one case produced: each backend's measurement, the paired ratios, the budget's verdict."""

from __future__ import annotations

from dataclasses import dataclass

from ddbench.metrics.latency_verdict import LatencyVerdict
from ddbench.suite.budget import Budget
from ddbench.timing.sampler import Measurement
from ddbench.timing.stats import RatioStats


@dataclass
class CaseTiming:
    budget: Budget
    measurements: dict[str, Measurement]
    ratios: list[RatioStats]
    verdict: LatencyVerdict

    def to_json(self) -> dict[str, object]:
        return {
            "budget": self.budget.to_json(),
            "backends": {name: m.to_json() for name, m in self.measurements.items()},
            "ratios": [r.to_json() for r in self.ratios],
            "verdict": self.verdict.to_json(),
        }
