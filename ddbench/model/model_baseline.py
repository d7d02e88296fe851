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
from ddbench.model.profile import CaseProfile

BASELINE_KIND = "model-baseline"
FORMAT_VERSION = 1
EXACT_FIELDS = ("unique_dram_bytes", "l2_bytes", "bank_conflicts", "waves")


@dataclass(frozen=True)
class Tolerances:
    modeled_us_rel: float = 0.01  # the model is deterministic; this allows for float summation order only
    cuda_over_triton_max: float | None = None


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


def baseline_document(profiles: Sequence[CaseProfile], gpu_key: str, calibration: str) -> dict[str, Any]:
    return {
        "kind": BASELINE_KIND,
        "format_version": FORMAT_VERSION,
        "note": "modeled, not measured: exact counters and the model's times from them",
        "gpu": gpu_key,
        "calibration": calibration,
        "cases": {p.case_id: baseline_entry(p) for p in profiles},
    }


def _check(doc: Any, source: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping) or doc.get("kind") != BASELINE_KIND:
        raise InputError(f'not a model baseline ("kind": "{BASELINE_KIND}" expected)', file=source)
    if doc.get("format_version") != FORMAT_VERSION:
        raise InputError(f"format_version {FORMAT_VERSION} expected", file=source, path="format_version")
    cases = doc.get("cases")
    if not isinstance(cases, Mapping):
        raise InputError("must be an object of case ID -> entry", file=source, path="cases")
    for case_id, entry in cases.items():
        for field in (*EXACT_FIELDS, "modeled_us", "modeled_cuda_over_triton"):
            value = entry.get(field) if isinstance(entry, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InputError("must be a number >= 0", file=source, path=f"cases.{case_id}.{field}")
    return doc


def regressions(
    profiles: Sequence[CaseProfile],
    baseline: Any,
    gpu_key: str,
    calibration: str,
    tolerances: Tolerances,
    source: str = "baseline",
) -> tuple[list[str], list[str]]:
    """(regressions, notes): one line per figure that got worse; notes for cases the baseline lacks and for
    modeled times not compared (another GPU or calibration)."""
    doc = _check(baseline, source)
    if doc.get("gpu") != gpu_key:
        raise InputError(f"a baseline for {doc.get('gpu')!r}, not {gpu_key!r}", file=source, path="gpu")
    same_calibration = doc.get("calibration") == calibration
    found, notes = [], []
    if not same_calibration:
        notes.append(f"modeled times not compared: the baseline's calibration is {doc.get('calibration')!r}")
    for p in profiles:
        old = doc["cases"].get(p.case_id)
        new = baseline_entry(p)
        if old is None:
            notes.append(f"{p.case_id}: not in the baseline")
            continue
        for field in EXACT_FIELDS:
            if new[field] > old[field]:
                found.append(f"{p.case_id}: {field} {old[field]} -> {new[field]}")
        limit = old["modeled_us"] * (1 + tolerances.modeled_us_rel)
        if same_calibration and new["modeled_us"] > limit:
            growth = new["modeled_us"] / old["modeled_us"] - 1
            found.append(
                f"{p.case_id}: modeled_us {old['modeled_us']:.2f} -> {new['modeled_us']:.2f} "
                f"(+{growth:.1%}, tolerance {tolerances.modeled_us_rel:.1%})"
            )
        ceiling = tolerances.cuda_over_triton_max
        if ceiling is not None and new["modeled_cuda_over_triton"] > ceiling:
            found.append(
                f"{p.case_id}: modeled cuda/triton {new['modeled_cuda_over_triton']:.2f} > {ceiling}"
            )
    return found, notes
