"""Which budget a case is timed under in a run: its own, a default one when timing is forced, or none."""

from __future__ import annotations

import dataclasses

from ddbench.suite.budget import Budget
from ddbench.suite.model import Case


def budget_for(case: Case, timing: bool | None, mode: str | None = None) -> Budget | None:
    """`timing`: None times the cases with a budget, True every case, False none."""
    if timing is False or (timing is None and case.budget is None):
        return None
    budget = case.budget or Budget()
    if mode:
        budget = dataclasses.replace(budget, timing=dataclasses.replace(budget.timing, mode=mode))
    return budget
