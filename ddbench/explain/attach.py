"""The hook of `ddbench run`: a failing pair gets its diagnosis, computed from the in-memory outputs."""

from __future__ import annotations

from typing import Any

from ddbench.explain.diagnose import Explainer
from ddbench.explain.threads import single_thread
from ddbench.inputs.layout import VerifyInputs
from ddbench.metrics import FAIL
from ddbench.results.case_result import CaseResult


def diagnose_failures(result: CaseResult, inputs: VerifyInputs) -> None:
    """Set `diagnosis` on every failed pair with an output, judged by the bound it failed; never raises.

    A diagnosis is advice: if explaining fails, the pair says why and the run goes on with its verdicts.
    """
    failing = [p for p in result.pairs if p.verdict.status == FAIL and p.figures is not None]
    if not failing:
        return
    explainer: Explainer | None = None
    done: dict[tuple[str, tuple[tuple[str, float], ...]], dict[str, Any]] = {}
    for pair in failing:
        run = result.runs.get(pair.candidate)
        if run is None or run.output is None:
            continue
        key = (pair.candidate, pair.bound.limits)
        if key not in done:
            try:
                with single_thread():
                    explainer = explainer or Explainer(inputs)
                    diagnosis = explainer.diagnose(run.output, failed_bound=dict(pair.bound.limits))
                    done[key] = diagnosis.to_json()
            except Exception as err:  # explain must never turn a verdict into a crash
                done[key] = {"error": f"explain failed: {type(err).__name__}: {err}"}
        pair.diagnosis = done[key]
