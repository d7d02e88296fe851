"""Baselines of modeled profiles, and the regressions a new profile shows against one (pure).

Counters are exact and the model is deterministic, so there is no noise to allow for: a baseline is the
counters' summary and the modeled times of each case, and any increase in DRAM bytes, L2 bytes, bank
conflicts or waves is a regression, as is a modeled time more than a tolerance above the stored one or a
modeled cuda/triton ratio above a ceiling. Modeled times are compared only under the same calibration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddbench.errors import InputError
from ddbench.finite import number_problem
from ddbench.model.profile import CaseProfile
from ddbench.suite.model import Case
from ddbench.suite.model_budget import ModelBudget

BASELINE_KIND = "model-baseline"
FORMAT_VERSION = 1
EXACT_FIELDS = ("unique_dram_bytes", "l2_bytes", "bank_conflicts", "waves")


@dataclass(frozen=True)
class Tolerances:
    modeled_us_rel: float = 0.01  # the model is deterministic; this allows for float summation order only
    cuda_over_triton_max: float | None = None
    extra_dram_bytes: int = 0  # counts are exact: any slack is a choice, stated in the suite's budget
    new_bank_conflicts: int = 0

    @classmethod
    def of_budget(cls, budget: ModelBudget) -> Tolerances:
        return cls(
            modeled_us_rel=budget.max_modeled_regression,
            cuda_over_triton_max=budget.max_modeled_cuda_over_triton,
            extra_dram_bytes=budget.max_extra_dram_bytes,
            new_bank_conflicts=budget.max_new_bank_conflicts,
        )

    def slack(self, field: str) -> int:
        """How far an exact count may rise above the baseline's."""
        return {"unique_dram_bytes": self.extra_dram_bytes, "bank_conflicts": self.new_bank_conflicts}.get(
            field, 0
        )


def baseline_entry(profile: CaseProfile) -> dict[str, Any]:
    ks = profile.launch.kernels
    return {
        "unique_dram_bytes": sum(k.unique_bytes for k in ks),
        "l2_bytes": sum(k.l2_bytes for k in ks),
        "bank_conflicts": sum(k.bank_conflicts for k in ks),
        "waves": sum(k.waves for k in ks),
        "modeled_us": profile.launch.modeled_us,
        "modeled_cuda_over_triton": profile.cuda_over_triton,
    }


def model_label(profiles: Sequence[CaseProfile], calibration: str) -> str:
    """The calibration and how the issue term was counted (from the SASS, or by ratio without nvcc): modeled
    times are compared only where both are the same."""
    methods = sorted({k.issue.method for p in profiles for k in p.launch.kernels if k.issue})
    return f"{calibration}; issue: {' and '.join(methods)}" if methods else calibration


def baseline_document(profiles: Sequence[CaseProfile], gpu_key: str, calibration: str) -> dict[str, Any]:
    return {
        "kind": BASELINE_KIND,
        "format_version": FORMAT_VERSION,
        "note": "modeled, not measured: exact counters and the model's times from them",
        "gpu": gpu_key,
        "calibration": model_label(profiles, calibration),
        "cases": {p.case_id: baseline_entry(p) for p in profiles},
    }


def check_baseline(doc: Any, source: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping) or doc.get("kind") != BASELINE_KIND:
        raise InputError(f'not a model baseline ("kind": "{BASELINE_KIND}" expected)', file=source)
    version = doc.get("format_version")
    if isinstance(version, bool) or version != FORMAT_VERSION:  # true == 1 in Python, not in the format
        raise InputError(
            f"format_version {FORMAT_VERSION} expected (got {version!r:.40})",
            file=source,
            path="format_version",
        )
    if not isinstance(doc.get("calibration", ""), str):
        raise InputError("must be a string", file=source, path="calibration")
    cases = doc.get("cases")
    if not isinstance(cases, Mapping):
        raise InputError("must be an object of case ID -> entry", file=source, path="cases")
    for case_id, entry in cases.items():
        for field in (*EXACT_FIELDS, "modeled_us", "modeled_cuda_over_triton"):
            value = entry.get(field) if isinstance(entry, Mapping) else None
            # NaN compares false with every limit: a NaN figure would make every regression check pass.
            if problem := number_problem(value, minimum=0):
                raise InputError(problem, file=source, path=f"cases.{case_id}.{field}")
    return doc


def entry_regressions(
    case_id: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    tolerances: Tolerances,
    compare_times: bool,
) -> list[str]:
    """One line per figure of one case that got worse: a count above the baseline's by more than its
    slack, a modeled time beyond the tolerance (only under the same calibration), a ratio over the ceiling."""
    found = []
    for field in EXACT_FIELDS:
        slack = tolerances.slack(field)
        if new[field] > old[field] + slack:
            allowed = f" (slack {slack})" if slack else ""
            found.append(f"{case_id}: {field} {old[field]} -> {new[field]}{allowed}")
    limit = old["modeled_us"] * (1 + tolerances.modeled_us_rel)
    if compare_times and new["modeled_us"] > limit:
        growth = new["modeled_us"] / old["modeled_us"] - 1 if old["modeled_us"] else float("inf")
        found.append(
            f"{case_id}: modeled_us {old['modeled_us']:.2f} -> {new['modeled_us']:.2f} "
            f"(+{growth:.1%}, tolerance {tolerances.modeled_us_rel:.1%})"
        )
    ceiling = tolerances.cuda_over_triton_max
    if ceiling is not None and new["modeled_cuda_over_triton"] > ceiling:
        found.append(f"{case_id}: modeled cuda/triton {new['modeled_cuda_over_triton']:.2f} > {ceiling}")
    return found


def regressions(
    profiles: Sequence[CaseProfile],
    baseline: Any,
    gpu_key: str,
    calibration: str,
    tolerances: Tolerances,
    source: str = "baseline",
    case_tolerances: Mapping[str, Tolerances] | None = None,
) -> tuple[list[str], list[str]]:
    """(regressions, notes): one line per figure that got worse; notes for cases the baseline lacks and for
    modeled times not compared (another GPU, calibration or count of the issue term). `case_tolerances`
    (case ID -> limits, from the suite's budgets) replace `tolerances` for their cases."""
    doc = check_baseline(baseline, source)
    if doc.get("gpu") != gpu_key:
        raise InputError(f"a baseline for {doc.get('gpu')!r}, not {gpu_key!r}", file=source, path="gpu")
    same_calibration = doc.get("calibration") == model_label(profiles, calibration)
    found, notes = [], []
    if not same_calibration:
        notes.append(f"modeled times not compared: the baseline's calibration is {doc.get('calibration')!r}")
    for p in profiles:
        old = doc["cases"].get(p.case_id)
        if old is None:
            notes.append(f"{p.case_id}: not in the baseline")
            continue
        limits = (case_tolerances or {}).get(p.case_id, tolerances)
        found += entry_regressions(p.case_id, old, baseline_entry(p), limits, same_calibration)
    return found, notes


def case_tolerances(cases: Sequence[Case], gpu_key: str) -> dict[str, Tolerances]:
    """Case ID -> the limits its suite budget's `model` entry for this GPU states (cases without one are
    absent: the command line's tolerances hold for them)."""
    out = {}
    for case in cases:
        limits = case.budget.model_limits(gpu_key) if case.budget else None
        if limits is not None:
            out[case.id] = Tolerances.of_budget(limits)
    return out
