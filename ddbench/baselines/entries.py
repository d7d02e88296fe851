"""Turning a timed case result into baseline entries, and deciding whether it may become one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ddbench.baselines.checked_latency import checked_latency
from ddbench.baselines.entry import BaselineEntry, ClockRange
from ddbench.metrics import PASS, SKIPPED
from ddbench.results.case_result import CaseResult
from ddbench.suite.ids import workload_hash
from ddbench.timing.remedy import noise_refusal
from ddbench.timing.stats import LatencyStats

KERNEL_BACKENDS = ("cuda", "cuda-emu")


@dataclass(frozen=True)
class Refusal:
    """Why one case may not become a baseline. `noise` alone is the one kind a run may shrug off (that case
    keeps its old entry); any other kind means the measurement itself cannot be trusted."""

    kind: str  # error, parity, unjudged, untimed, figures, noise
    text: str

    def __str__(self) -> str:
        return self.text


def refusals(result: CaseResult) -> list[Refusal]:
    """Why this result may not become a baseline: parity must have passed and every timing be quiet."""
    out = []
    if result.error:  # `inputs: ...` or `timing: ...`: the case's own error says which
        out.append(Refusal("error", result.error))
    failed = [p for p in result.pairs if p.verdict.status not in (PASS, SKIPPED)]
    out += [
        Refusal(
            "parity",
            f"parity {p.candidate} vs {p.against}: {p.verdict.status} ({'; '.join(p.verdict.reasons)})",
        )
        for p in failed
    ]
    for name in result.timing.measurements if result.timing else ():
        if not any(p.verdict.status == PASS and name in (p.candidate, p.against) for p in result.pairs):
            out.append(Refusal("unjudged", f"{name}: parity not judged (no passing bound names it)"))
    if result.timing is None:
        out.append(Refusal("untimed", "not timed"))
        return out
    limit = result.timing.budget.timing.max_rel_noise
    for name, m in result.timing.measurements.items():
        try:
            checked_latency(m.stats.to_json())
        except ValueError as err:
            out.append(Refusal("figures", f"{name}: latency figures not storable ({err})"))
            continue
        if m.stats.rel_noise > limit:
            text = noise_refusal(m.stats.rel_noise, limit, m.stats.samples, m.stop_reason)
            out.append(Refusal("noise", f"{name}: {text}"))
    return out


def refusal_reasons(result: CaseResult) -> list[str]:
    return [r.text for r in refusals(result)]


def baseline_entries(
    result: CaseResult, environment: dict[str, Any], kernel_hash: str | None
) -> dict[str, BaselineEntry]:
    """backend -> entry for every timed backend of the case (call only when `refusal_reasons` is empty)."""
    assert result.timing is not None
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = {}
    for name, m in result.timing.measurements.items():
        parity = {
            f"{p.candidate} vs {p.against}": {
                "max_row_ulp": round(p.figures.max_row_ulp, 4),
                "mean_row_ulp": round(p.figures.mean_row_ulp, 5),
                "rel_l2": float(f"{p.figures.rel_l2:.4g}"),
            }
            for p in result.pairs
            if p.figures is not None and p.candidate == name
        }
        out[name] = BaselineEntry(
            # As stored (rounded), so the entry in memory equals the one read back from the file.
            latency=LatencyStats.from_json(m.stats.to_json()),
            case_hash=workload_hash(result.case),
            kernel_hash=kernel_hash if name in KERNEL_BACKENDS else None,
            mode=m.mode,
            clock=m.clock,
            stop_reason=m.stop_reason,
            sm_clock_mhz=ClockRange(min(m.sm_clock_mhz), max(m.sm_clock_mhz)) if m.sm_clock_mhz else None,
            parity=parity,
            environment=environment,
            date=date,
        )
    return out
