"""Judge measured latency against a case's budget (pure).

Regression rule (noise-aware, after nvbench's compare script and asv): a backend regressed only when its
median slowdown against the stored baseline exceeds BOTH the suite's tolerance AND the larger relative noise
(IQR / median) of the two measurements. A change smaller than what either measurement's own spread explains
cannot be told from noise; a change above the noise but within the tolerance is accepted by the suite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from ddbench.metrics.verdict import FAIL, PASS
from ddbench.suite.budget import Budget
from ddbench.timing.stats import LatencyStats, RatioStats

NO_BASELINE, NOT_JUDGED = "no-baseline", "not-judged"  # besides the parity verdicts' PASS and FAIL


@dataclass(frozen=True)
class BudgetCheck:
    kind: str  # regression, ratio or ceiling
    subject: str  # a backend, or candidate/baseline
    status: str
    value: float | None
    limit: float | None
    detail: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LatencyVerdict:
    status: str
    checks: tuple[BudgetCheck, ...]

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "checks": [c.to_json() for c in self.checks]}


def regression(current: LatencyStats, baseline: LatencyStats, tolerance: float) -> tuple[bool, float, float]:
    """(regressed?, slowdown, noise): slowdown = current/baseline - 1; noise = max relative IQR."""
    slowdown = current.median_us / baseline.median_us - 1.0
    noise = max(current.rel_noise, baseline.rel_noise)
    return slowdown > tolerance and slowdown > noise, slowdown, noise


def _regression_check(
    name: str, current: LatencyStats, baseline: LatencyStats | None, budget: Budget
) -> BudgetCheck:
    tolerance = budget.regression_tolerance
    if baseline is None:
        status = FAIL if budget.missing_baseline == "fail" else NO_BASELINE
        detail = "no baseline for this device and timing mode"
        return BudgetCheck("regression", name, status, current.median_us, None, detail)
    regressed, slowdown, noise = regression(current, baseline, tolerance or 0.0)
    detail = (
        f"{current.median_us:.2f} us vs baseline {baseline.median_us:.2f} us ({slowdown:+.1%}; "
        f"tolerance {tolerance:.0%}, noise {noise:.1%})"
    )
    return BudgetCheck("regression", name, FAIL if regressed else PASS, slowdown, tolerance, detail)


def judge_budget(
    budget: Budget,
    measured: Mapping[str, LatencyStats],
    ratios: Sequence[RatioStats],
    baselines: Mapping[str, LatencyStats],
) -> LatencyVerdict:
    checks = [
        BudgetCheck(
            "timed", name, FAIL, None, None, "not timed: the backend did not run (cleanly) in this case"
        )
        for name in budget.timed
        if name not in measured
    ]
    if budget.regression_tolerance is not None:
        checks += [_regression_check(n, s, baselines.get(n), budget) for n, s in measured.items()]
    measured_ratios = {(r.candidate, r.baseline): r for r in ratios}
    for limit in budget.ratios:
        subject = f"{limit.candidate}/{limit.baseline}"
        r = measured_ratios.get((limit.candidate, limit.baseline))
        if r is None:
            checks.append(
                BudgetCheck("ratio", subject, FAIL, None, limit.max, "not measured: both must be timed")
            )
            continue
        status = PASS if r.median <= limit.max else FAIL
        checks.append(
            BudgetCheck(
                "ratio",
                subject,
                status,
                r.median,
                limit.max,
                f"{r.median:.3f} (IQR {r.q1:.3f}-{r.q3:.3f}, {r.rounds} rounds) vs {limit.max:g}",
            )
        )
    for name, ceiling in budget.ceiling_us:
        stats = measured.get(name)
        if stats is None:
            checks.append(BudgetCheck("ceiling", name, FAIL, None, ceiling, "not timed"))
            continue
        status = PASS if stats.median_us <= ceiling else FAIL
        checks.append(
            BudgetCheck(
                "ceiling",
                name,
                status,
                stats.median_us,
                ceiling,
                f"{stats.median_us:.2f} us vs {ceiling:g} us",
            )
        )
    statuses = {c.status for c in checks}
    overall = (
        FAIL
        if FAIL in statuses
        else NO_BASELINE
        if NO_BASELINE in statuses
        else PASS
        if checks
        else NOT_JUDGED
    )
    return LatencyVerdict(overall, tuple(checks))
