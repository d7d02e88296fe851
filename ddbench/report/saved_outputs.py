"""What `ddbench run --save-outputs DIR` saves, one safetensors file per case ID: written and read back."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from ddbench.atomic import write_atomic
from ddbench.errors import InputError
from ddbench.report.ulp_distributions import Histogram, empty_histograms, judged_pairs, pair_label
from ddbench.results.case_result import CaseResult


def saved_outputs_path(directory: str | Path, case_id: str) -> Path:
    return Path(directory) / f"{case_id}.safetensors"


def save_outputs(directory: str | Path, result: CaseResult) -> Path | None:
    tensors = {
        name: run.output.contiguous().cpu() for name, run in result.runs.items() if run.output is not None
    }
    if not tensors:
        return None
    path = saved_outputs_path(directory, result.case.id)
    write_atomic(path, save(tensors, metadata={"case": json.dumps(result.case.to_json())}))
    return path


def load_saved_outputs(directory: str | Path, case_id: str) -> dict[str, torch.Tensor] | None:
    """backend -> output for one case, or None when the run saved nothing for it."""
    path = saved_outputs_path(directory, case_id)
    if not path.is_file():
        return None
    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises its own error types for a corrupt or truncated file
        raise InputError(f"not a readable saved-outputs file: {err}", file=str(path)) from None


def element_histograms(
    cases: Sequence[Mapping[str, Any]], directory: str | Path, bins: int = 80
) -> dict[str, Histogram]:
    """Element-wise row-scaled ULP histograms per pair over the cases whose outputs were saved."""
    histograms = empty_histograms(cases, bins)
    by_case: dict[str, list[Mapping[str, Any]]] = {}
    for case, pair in judged_pairs(cases):
        by_case.setdefault(case["id"], []).append(pair)
    for case_id, pairs in by_case.items():
        tensors = load_saved_outputs(directory, case_id)
        if tensors is None:
            continue
        for pair in pairs:
            candidate, against = tensors.get(pair["candidate"]), tensors.get(pair["against"])
            if candidate is not None and against is not None:
                histograms[pair_label(pair)].add(candidate, against)
    return {label: h for label, h in histograms.items() if h.cases}
