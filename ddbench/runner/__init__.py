"""Executing cases: backends called on fresh inputs, pairs judged."""

from ddbench.runner.execute import backends_for, run_case
from ddbench.runner.results import BackendRun, CaseResult, PairResult

__all__ = ["BackendRun", "CaseResult", "PairResult", "backends_for", "run_case"]
