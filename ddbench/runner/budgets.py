"""Which budget a case is timed under in a run: its own, a default one when timing is forced, or none; with
the run's overrides (mode, stopping rule, extra ratios to measure) applied on top."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ddbench.suite.budget import Budget, RatioLimit
from ddbench.suite.model import Case
from ddbench.timing.settings import TimingSettings, with_overrides

UNJUDGED_RATIO = 1e6  # a ratio the run asked to measure (the device check's cuda/triton) and not to bound


def budget_for(
    case: Case,
    timing: bool | None,
    mode: str | None = None,
    settings: TimingSettings | None = None,
    ratios: Sequence[tuple[str, str]] = (),
    timed: Sequence[str] = (),
    **setting_overrides: float | None,
) -> Budget | None:
    """`timing`: None times the cases with a budget, True every case, False none. `timed`: only these
    backends are timed (empty: the budget's own choice). `setting_overrides`: `max_rel_noise` /
    `max_seconds` given on the command line (None: keep the suite's)."""
    if timing is False or (timing is None and case.budget is None):
        return None
    budget = case.budget or Budget()
    chosen = with_overrides(settings or budget.timing, **setting_overrides)
    if mode:
        chosen = dataclasses.replace(chosen, mode=mode)
    extra = tuple(
        RatioLimit(c, b, UNJUDGED_RATIO)
        for c, b in ratios
        if not any((r.candidate, r.baseline) == (c, b) for r in budget.ratios)
    )
    return dataclasses.replace(
        budget, timing=chosen, ratios=budget.ratios + extra, timed=tuple(timed) or budget.timed
    )
