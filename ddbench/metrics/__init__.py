"""Numerics: bf16 ULP distances, parity figures and verdicts."""

from ddbench.metrics.figures import ParityFigures, parity_figures
from ddbench.metrics.status import Status
from ddbench.metrics.verdict import ERROR, FAIL, PASS, SKIPPED, Verdict, judge

__all__ = [
    "ERROR",
    "FAIL",
    "PASS",
    "SKIPPED",
    "ParityFigures",
    "Status",
    "Verdict",
    "judge",
    "parity_figures",
]
