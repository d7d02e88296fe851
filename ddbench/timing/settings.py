"""How to time: the mode, the adaptive stopping rule (nvbench's idea: sample until the noise is known) and
the CPU thread count; the command line may override the noise limit and the time per case."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from ddbench.errors import InputError

MODES = ("graph", "plain", "cold-l2")
# The suite schema's bounds (ddbench/suite/schema.json), applied to the command-line overrides too.
MAX_REL_NOISE_CEILING = 10.0
MAX_SECONDS_CEILING = 3600.0


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


def _checked(value: float, ceiling: float, option: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {value!r}", path=option)
    if not math.isfinite(value) or not 0 < value <= ceiling:
        raise InputError(f"must be above 0 and at most {ceiling:g}, got {value!r}", path=option)
    return float(value)


def with_overrides(
    settings: TimingSettings, *, max_rel_noise: float | None = None, max_seconds: float | None = None
) -> TimingSettings:
    """`settings` with the command line's `--max-rel-noise` / `--max-seconds` (None keeps the suite's)."""
    changes: dict[str, float] = {}
    if max_rel_noise is not None:
        changes["max_rel_noise"] = _checked(max_rel_noise, MAX_REL_NOISE_CEILING, "--max-rel-noise")
    if max_seconds is not None:
        changes["max_seconds"] = _checked(max_seconds, MAX_SECONDS_CEILING, "--max-seconds")
    return dataclasses.replace(settings, **changes)
