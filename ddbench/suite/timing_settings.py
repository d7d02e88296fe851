"""How to time, as a suite budget states it: the mode and the adaptive stopping rule (nvbench's idea: sample
until the noise is known). ddbench.timing reads it; it lives here because suites carry it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

MODES = ("graph", "plain", "cold-l2", "graph-cold-l2")
COLD_MODES = ("cold-l2", "graph-cold-l2")  # the L2 flushed before each sample
GRAPH_MODES = ("graph", "graph-cold-l2")  # CUDA graphs replayed


@dataclass(frozen=True)
class TimingSettings:
    mode: str = "graph"  # serving replays CUDA graphs; on the CPU every mode is a host-clocked plain call
    warmup: int = 3
    min_samples: int = 10
    max_samples: int = 2000
    target_rel_noise: float = 0.02  # stop once IQR / median is below this…
    max_seconds: float = 3.0  # …or once this much wall time went into one case's samples
    input_sets: int = 3  # fresh input sets rotated between samples so repeats do not time a warm cache
    max_rel_noise: float = 0.10  # above this a measurement may not become a baseline
    cpu_threads: int = 1  # torch/OpenMP threads while timing on the CPU (more wait on each other's cores)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> TimingSettings:
        return cls(**(data or {}))
