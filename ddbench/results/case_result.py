"""What running one case produced: each backend's output, each judged pair, the case's status."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ddbench.metrics import ERROR, FAIL, PASS, SKIPPED, ParityFigures, Verdict
from ddbench.metrics.generation_gates import GateCheck
from ddbench.results.case_timing import CaseTiming
from ddbench.results.generation_record import GenerationRecord
from ddbench.suite.model import Case, ParityBound


@dataclass
class BackendRun:
    name: str
    output: torch.Tensor | None
    seconds: float
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seconds": round(self.seconds, 6), "ok": self.error is None}
        if self.output is not None:
            out["dtype"] = str(self.output.dtype).removeprefix("torch.")
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class PairResult:
    candidate: str
    against: str
    bound: ParityBound
    verdict: Verdict
    figures: ParityFigures | None = None
    diagnosis: dict[str, Any] | None = None  # `ddbench explain` of a failing pair (ddbench/explain)
    gates: tuple[GateCheck, ...] = ()  # a generation case's gates (the verdict is theirs)

    def to_json(self) -> dict[str, Any]:
        out = {
            "candidate": self.candidate,
            "against": self.against,
            "bound": self.bound.to_json(),
            "status": self.verdict.status,
            "reasons": list(self.verdict.reasons),
            "figures": self.figures.to_json() if self.figures else None,
        }
        if self.gates:
            out["gates"] = [g.to_json() for g in self.gates]
        return out | ({"diagnosis": self.diagnosis} if self.diagnosis is not None else {})


def case_status(error: bool, pair_statuses: Iterable[str], backend_failed: bool, latency_failed: bool) -> str:
    """A case's status from what it holds: an error anywhere, else a failing pair or latency budget, else
    pass when a pair passed, else skipped (nothing judged). The one rule, for a run and for a merge."""
    statuses = set(pair_statuses)
    if error or ERROR in statuses or backend_failed:
        return ERROR
    if FAIL in statuses or latency_failed:
        return FAIL
    return PASS if PASS in statuses else SKIPPED


def case_status_of(case: Mapping[str, Any]) -> str:
    """`case_status` of a case as a results file holds it (already checked against the schema)."""
    latency = case.get("latency")
    return case_status(
        bool(case.get("error")),
        [p["status"] for p in case.get("pairs", [])],
        any(not run.get("ok", True) for run in case.get("backends", {}).values()),
        bool(latency) and latency["verdict"]["status"] == FAIL,
    )


@dataclass
class CaseResult:
    case: Case
    runs: dict[str, BackendRun] = field(default_factory=dict)
    pairs: list[PairResult] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None  # the case could not even be set up (inputs)
    timing: CaseTiming | None = None
    generation: GenerationRecord | None = None

    @property
    def status(self) -> str:
        return case_status(
            bool(self.error),
            [p.verdict.status for p in self.pairs],
            any(run.error for run in self.runs.values()),
            self.timing is not None and self.timing.verdict.failed,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.case.id,
            "status": self.status,
            "seconds": round(self.seconds, 6),
            "error": self.error,
            "case": self.case.to_json(),
            "backends": {name: run.to_json() for name, run in self.runs.items()},
            "pairs": [p.to_json() for p in self.pairs],
            "latency": self.timing.to_json() if self.timing else None,
        } | ({"generation": self.generation.to_json()} if self.generation else {})
