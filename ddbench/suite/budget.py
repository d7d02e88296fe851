"""A case's latency budget, as the suite states it (resolved and checked by suite/resolve.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddbench.suite.model_budget import ModelBudget, model_budgets_from_json
from ddbench.suite.timing_settings import TimingSettings


@dataclass(frozen=True)
class RatioLimit:
    """candidate / baseline, both timed interleaved in the same run: stable across machines and days."""

    candidate: str
    baseline: str
    max: float


@dataclass(frozen=True)
class Budget:
    timed: tuple[str, ...] = ()  # backends to time; empty: every backend the case runs
    regression_tolerance: float | None = 0.05  # slowdown allowed vs the stored baseline (None: not judged)
    ratios: tuple[RatioLimit, ...] = ()
    ceiling_us: tuple[tuple[str, float], ...] = ()  # absolute ceilings per backend, in microseconds
    missing_baseline: str = "warn"
    timing: TimingSettings = field(default_factory=TimingSettings)
    model: tuple[ModelBudget, ...] = ()  # limits on modeled figures, at most one per GPU

    def ceiling(self, backend: str) -> float | None:
        return dict(self.ceiling_us).get(backend)

    def model_limits(self, gpu: str) -> ModelBudget | None:
        return next((m for m in self.model if m.gpu == gpu), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "timed": list(self.timed),
            "regression_tolerance": self.regression_tolerance,
            "ratios": [{"candidate": r.candidate, "baseline": r.baseline, "max": r.max} for r in self.ratios],
            "ceiling_us": dict(self.ceiling_us),
            "missing_baseline": self.missing_baseline,
            "timing": self.timing.to_json(),
            **({"model": [m.to_json() for m in self.model]} if self.model else {}),
        }


def budget_from_json(data: dict[str, Any]) -> Budget:
    return Budget(
        timed=tuple(data.get("timed", ())),
        regression_tolerance=data.get("regression_tolerance", 0.05),
        ratios=tuple(
            RatioLimit(r["candidate"], r["baseline"], float(r["max"])) for r in data.get("ratios", ())
        ),
        ceiling_us=tuple((k, float(v)) for k, v in sorted(data.get("ceiling_us", {}).items())),
        missing_baseline=data.get("missing_baseline", "warn"),
        timing=TimingSettings.from_json(data.get("timing")),
        model=model_budgets_from_json(data.get("model")),
    )
