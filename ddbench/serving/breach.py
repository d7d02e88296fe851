"""A breach, written down: the call as a capture file with both outputs, and a suite that replays it.

The capture is the existing format (docs/capture-format.md) with the candidate's output as one more tensor
(`o_extend_candidate`; `o_extend_captured` is Triton's, the output served) and the breach in its metadata.
Beside it, `<name>.json` is a suite of that one call: `ddbench run` judges the recorded candidate output
(`captured-candidate`) against Triton's with the bounds that breached, and `ddbench explain` ranks the
classic marshaling mistakes on it — on any machine, GPU or not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddbench.atomic import write_atomic
from ddbench.capture.context import CallSite
from ddbench.capture.format import write_capture
from ddbench.capture.snapshot import CallSnapshot
from ddbench.inputs.capture_format import CANDIDATE_TENSOR, SUFFIX
from ddbench.suite.bound_sets import BOUND_SETS
from ddbench.suite.model import ParityBound

SOURCE = "ddbench-apply"


@dataclass(frozen=True)
class Breach:
    """What the plugin knows about one breached call."""

    mode: str
    backend: str  # the candidate's name
    bounds: str  # the bound set
    reasons: tuple[str, ...]
    figures: dict[str, Any] | None  # None when the candidate raised before writing anything
    call_index: int
    layer: int | None
    rank: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "backend": self.backend,
            "bounds": self.bounds,
            "reasons": list(self.reasons),
            "figures": self.figures,
            "served": "triton",
        }

    @property
    def name(self) -> str:
        rank = "x" if self.rank is None else self.rank
        layer = "x" if self.layer is None else self.layer
        return f"breach-r{rank}-l{layer}-n{self.call_index:06d}"


def write_breach(
    directory: Path,
    breach: Breach,
    call: Mapping[str, Any],
    site: CallSite,
    parallel: Mapping[str, int | None],
    triton_out: torch.Tensor,
    candidate_out: torch.Tensor | None,
    serving_bounds: tuple[ParityBound, ...],
    pid: int,
) -> tuple[Path, Path]:
    """Write the capture and its replay suite (both atomically); returns their paths."""
    stem = f"{breach.name}-p{pid}"
    capture = directory / f"{stem}{SUFFIX}"
    suite = directory / f"{stem}.json"
    page_size = int(call.get("page_size") or 1)
    snapshot = CallSnapshot.plan_call(call, site, page_size, seed=breach.call_index)
    snapshot.copy_inputs(call)
    snapshot.copy_output(triton_out)
    tensors = snapshot.file_tensors()
    if candidate_out is not None:
        tensors[CANDIDATE_TENSOR] = candidate_out[: snapshot.total_q].detach().cpu().clone()
    metadata = snapshot.metadata(call, breach.layer, parallel, breach.call_index, None, SOURCE)
    metadata["breach"] = breach.to_json()
    directory.mkdir(parents=True, exist_ok=True)
    write_capture(capture, tensors, metadata)
    document = replay_suite(stem, capture.name, breach, serving_bounds, candidate_out is not None)
    write_atomic(suite, json.dumps(document, indent=2) + "\n")
    return capture, suite


def replay_suite(
    name: str, capture_name: str, breach: Breach, serving_bounds: tuple[ParityBound, ...], recorded: bool
) -> dict[str, Any]:
    """The one-case suite that replays a breach capture."""
    backends = ["reference-fp64", "triton", "captured"]
    parity: list[Any] = [  # the recorded Triton output is sane, and Triton here gives it again
        {"candidate": "captured", "against": "reference-fp64", "max_row_ulp": 3.0, "mean_row_ulp": 0.4},
        {"candidate": "triton", "against": "captured", "max_row_ulp": 3.0, "mean_row_ulp": 0.4},
    ]
    if recorded:  # the candidate's recorded output, judged again as the server judged it
        backends.append("captured-candidate")
        parity += [
            {"candidate": "captured-candidate", "against": "captured", **dict(bound.limits)}
            for bound in serving_bounds
        ]
    if breach.backend in BOUND_SETS:  # the live candidate, where it runs: --backends …,<candidate>
        parity.append(breach.backend)
    why = "; ".join(breach.reasons)
    return {
        "name": name,
        "description": (
            f"A breach of the serving plugin ({breach.mode}, candidate {breach.backend}, bounds "
            f"{breach.bounds}): {why}. Replays the call; the candidate's recorded output is "
            "captured-candidate, Triton's (the output served) is captured."
        ),
        "defaults": {"backends": backends, "parity": parity, "tags": ["breach", "cpu"]},
        "cases": [{"capture": capture_name}],
    }
