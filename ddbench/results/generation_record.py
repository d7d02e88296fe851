"""What an end-to-end generation case produced: every decode run, summarised for the results document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddbench.generation.decode import DecodeRun


def run_json(run: DecodeRun) -> dict[str, Any]:
    lengths = run.accept_lengths
    out: dict[str, Any] = {
        "seconds": round(run.seconds, 6),
        "tokens": [len(t) for t in run.tokens],
        "verify_steps": run.steps,
        "mean_accept_length": round(run.mean_accept_length, 4),
        "accept_lengths": lengths,
    }
    if run.teacher:
        out["teacher_forced"] = {
            "max_logit_abs": max(e.max_abs for e in run.teacher),
            "mean_logit_abs": sum(e.mean_abs for e in run.teacher) / len(run.teacher),
            "confident_flips": sum(e.confident_flips for e in run.teacher),
        }
    if run.error:
        out["error"] = run.error
    return out


@dataclass
class GenerationRecord:
    acceptance: str  # which greedy acceptance ran (SGLang's op, or ours and why)
    checkpoint: dict[str, Any] | None = None  # a checkpoint's model: its path, size, head groups, sm_scale
    tree_building: str | None = None  # what built EAGLE trees (SGLang's op, or ours and why)
    greedy: dict[str, DecodeRun] = field(default_factory=dict)  # plain greedy decoding, by attention backend
    runs: dict[str, DecodeRun] = field(default_factory=dict)  # speculative decoding, by backend

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"acceptance": self.acceptance}
        if self.tree_building is not None:
            out["tree_building"] = self.tree_building
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out | {
            "greedy": {name: run_json(run) for name, run in self.greedy.items()},
            "runs": {name: run_json(run) for name, run in self.runs.items()},
        }
