"""A modeled case, the record a modeled run produces beside the parity run's CaseResult, and the profile
document (`profile --json`) the cases make together. Every time in it is modeled, and the document says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddbench.counters import LaunchCounters
from ddbench.gpus import GpuSpec
from ddbench.model.calibration import Calibration
from ddbench.model.profile import CaseProfile
from ddbench.results.plan_sweep import PlanSweep

MODELED_NOTE = "modeled, not measured"


@dataclass(frozen=True)
class SanitizerVerdict:
    """Racecheck and memcheck on the counted launch (of the CTAs that ran, in a sampled one)."""

    clean: bool
    findings: int
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {"clean": self.clean, "findings": self.findings, "summary": self.summary}


@dataclass(frozen=True)
class ModeledCase:
    profile: CaseProfile
    counters_source: str  # "emulated, every CTA", "emulated, one CTA per work shape" or "given (--counters)"
    sanitizer: SanitizerVerdict | None = None  # None: the sanitizer did not run
    sampled: bool = False  # counted on one CTA per work shape: unique DRAM bytes derived from addresses
    plan_sweep: PlanSweep | None = None
    # what was counted, kept so the same launch can be modeled again on other figures (a calibration's fit)
    counters: LaunchCounters | None = field(default=None, compare=False, repr=False)

    @property
    def case_id(self) -> str:
        return self.profile.case_id

    def to_json(self) -> dict[str, Any]:
        return {
            **self.profile.to_json(),
            "counters_source": self.counters_source,
            "sanitizer": None if self.sanitizer is None else self.sanitizer.to_json(),
        }


def profile_document(
    cases: Sequence[ModeledCase], gpu: GpuSpec, calibration: Calibration, complete: bool = True
) -> dict[str, Any]:
    """The modeled run as JSON (`kind: model`); a plan sweep, where one ran, under `plan_sweep`."""
    document: dict[str, Any] = {
        "kind": "model",
        "note": f"every time in this file is {MODELED_NOTE}",
        "gpu": {"key": gpu.key, "name": gpu.name, "arch": gpu.arch},
        "calibration": calibration.label,
        "model_error": calibration.error_band,
        "cases": [c.to_json() for c in cases],
    }
    sweeps = [c.plan_sweep.to_json() for c in cases if c.plan_sweep is not None]
    if sweeps:
        document["plan_sweep"] = sweeps
    if not complete:
        document["complete"] = False
    return document
