"""Backend outputs saved per case (safetensors), for a later look or `ddbench explain`."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save

from ddbench.atomic import write_atomic
from ddbench.runner.results import CaseResult


def save_outputs(directory: str | Path, result: CaseResult) -> Path | None:
    tensors = {
        name: run.output.contiguous().cpu() for name, run in result.runs.items() if run.output is not None
    }
    if not tensors:
        return None
    path = Path(directory) / f"{result.case.id}.safetensors"
    write_atomic(path, save(tensors, metadata={"case": json.dumps(result.case.to_json())}))
    return path
