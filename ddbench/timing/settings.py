"""How to time: the settings a suite's budget states (the type lives with the suite, in the data layer) and
the command line's overrides of the noise limit and the time per case."""

from __future__ import annotations

import dataclasses
import math

from ddbench.errors import InputError
from ddbench.suite.timing_settings import COLD_MODES, GRAPH_MODES, MODES, TimingSettings

__all__ = ["COLD_MODES", "GRAPH_MODES", "MODES", "TimingSettings", "with_overrides"]

# The suite schema's bounds (ddbench/suite/schema.json), applied to the command-line overrides too.
MAX_REL_NOISE_CEILING = 10.0
MAX_SECONDS_CEILING = 3600.0


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
