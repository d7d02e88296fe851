"""Which constants the model uses: the datasheet tables, or a calibration measured on a GPU (pure).

The calibration document (`ddbench/model/calibration.json`, docs/model.md) holds per GPU the constants
a device run fitted (any GpuSpec field) and the model's error per case it was checked on. With none for a
GPU the model runs on datasheet values and says "uncalibrated", with the error band argued in docs/model.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddbench.errors import InputError
from ddbench.finite import number_problem
from ddbench.gpus import GpuSpec

FORMAT_VERSION = 1
UNCALIBRATED_LABEL = "uncalibrated: datasheet values"
# Without a measurement the model's error is argued, not known: see docs/model.md ("Error").
UNCALIBRATED_ERROR_BAND = "about -50 % / +100 % (uncalibrated; not yet measured)"
_TUNABLE = {f.name for f in dataclasses.fields(GpuSpec)} - {"key", "name", "arch"}
INTEGER_CONSTANTS = (
    "sms",
    "smem_per_sm_bytes",
    "smem_per_cta_bytes",
    "registers_per_sm",
    "max_warps_per_sm",
    "max_ctas_per_sm",
    "mma_flop_per_clk_per_sm",
    "l2_bytes",
)


@dataclass(frozen=True)
class CaseError:
    case: str
    measured_us: float
    modeled_us: float

    @property
    def relative_error(self) -> float:
        return self.modeled_us / self.measured_us - 1.0


@dataclass(frozen=True)
class Calibration:
    label: str
    constants: Mapping[str, float] = field(default_factory=dict)
    errors: tuple[CaseError, ...] = ()

    @property
    def calibrated(self) -> bool:
        return bool(self.constants) or bool(self.errors)

    @property
    def error_band(self) -> str:
        if not self.errors:
            return UNCALIBRATED_ERROR_BAND if not self.calibrated else "not measured"
        errs = [e.relative_error for e in self.errors]
        return f"{min(errs):+.0%} .. {max(errs):+.0%} over {len(errs)} measured cases"

    def apply(self, gpu: GpuSpec) -> GpuSpec:
        return dataclasses.replace(gpu, **self.constants) if self.constants else gpu


UNCALIBRATED = Calibration(UNCALIBRATED_LABEL)


def _number(value: Any, path: str, source: str | None) -> float:
    """A positive finite number (Infinity passes `> 0`, and would model every case at 0 µs or forever)."""
    if problem := number_problem(value, above=0):
        raise InputError(problem, file=source, path=path)
    return value


def _constant(name: str, value: Any, path: str, source: str | None) -> float:
    """A table constant: a positive finite number, and a whole one for the counts (0.5 SMs would become 0
    and divide the model by zero)."""
    number = _number(value, path, source)
    if name in INTEGER_CONSTANTS and number != int(number):
        raise InputError(
            f"is {number:g}; {name} counts, so it must be a whole number", file=source, path=path
        )
    return number


def _typed(constants: dict[str, float]) -> dict[str, float]:
    """The table's counts as integers (SMs, bytes, registers, warps, CTAs, FLOP per clock)."""
    return {k: int(v) if k in INTEGER_CONSTANTS else v for k, v in constants.items()}


def with_what_if(calibration: Calibration, assignments: Sequence[str]) -> Calibration:
    """The calibration with table constants set by hand (`NAME=VALUE`, e.g. another GPU's fitted issue
    rate): a question put to the model, never a fit. Its label says so, and it keeps no measured errors, so
    its error band reads "not measured"."""
    changed: dict[str, float] = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or name not in _TUNABLE:
            raise InputError(f"{assignment!r}: NAME=VALUE, NAME one of {sorted(_TUNABLE)}", path="--what-if")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not 0 < number < math.inf:
            raise InputError(f"{assignment!r}: {value!r} is not a positive number", path="--what-if")
        try:
            changed[name] = _constant(name, number, "--what-if", None)
        except InputError as err:
            raise InputError(f"{assignment!r}: {err.reason}", path="--what-if") from None
    if not changed:
        return calibration
    said = ", ".join(f"{k}={v:g}" for k, v in changed.items())
    label = f"{calibration.label}; what-if {said} (not measured)"
    return Calibration(label, {**calibration.constants, **_typed(changed)})


def calibration_for(doc: Any, gpu_key: str, source: str) -> Calibration:
    """The calibration of `gpu_key` in a calibration document; UNCALIBRATED when it holds none."""
    version = doc.get("format_version") if isinstance(doc, Mapping) else None
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise InputError(
            f"not a calibration document (format_version {FORMAT_VERSION} expected)", file=source
        )
    gpus = doc.get("gpus", {})
    if not isinstance(gpus, Mapping):
        raise InputError("must be an object keyed by GPU", file=source, path="gpus")
    entry = gpus.get(gpu_key)
    if entry is None:
        return UNCALIBRATED
    path = f"gpus.{gpu_key}"
    if not isinstance(entry, Mapping) or not isinstance(entry.get("label"), str):
        raise InputError("must be an object with a 'label' string", file=source, path=path)
    constants = entry.get("constants", {})
    if not isinstance(constants, Mapping):
        raise InputError("must be an object", file=source, path=f"{path}.constants")
    unknown = sorted(set(constants) - _TUNABLE)
    if unknown:
        raise InputError(
            f"unknown constants {unknown} (known: {sorted(_TUNABLE)})", file=source, path=f"{path}.constants"
        )
    fitted = _typed({k: _constant(k, v, f"{path}.constants.{k}", source) for k, v in constants.items()})
    listed = entry.get("errors", [])
    if not isinstance(listed, list):
        raise InputError("must be a list of measured cases", file=source, path=f"{path}.errors")
    errors = []
    for i, e in enumerate(listed):
        epath = f"{path}.errors[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("case"), str):
            raise InputError("must be an object with a 'case' ID", file=source, path=epath)
        errors.append(
            CaseError(
                e["case"],
                _number(e.get("measured_us"), f"{epath}.measured_us", source),
                _number(e.get("modeled_us"), f"{epath}.modeled_us", source),
            )
        )
    return Calibration(entry["label"], fitted, tuple(errors))


# The table values that are estimates, not datasheet figures (ddbench/gpus.py): what a device run fits.
FITTED = ("dram_latency_us", "l2_latency_us", "l2_gbs", "graph_node_us", "issue_per_clk")
FIT_SCALES = (0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5, 1.75, 2.0)
# The issue rate may go lower: ncu had the H200's verify kernel issue-active 41-45 % of its cycles on long
# launches (run 7), 1.6-1.8 instructions a cycle an SM, below the 2.0 (0.5 x 4) of FIT_SCALES.
LOWER_SCALES = {"issue_per_clk": (0.375, 0.4375)}


def _misfit(modeled: list[float], measured: list[float]) -> float:
    """Mean |log(modeled / measured)|: a 2x error either way weighs the same."""
    return sum(abs(math.log(m / t)) for m, t in zip(modeled, measured, strict=True)) / len(measured)


def fit_constants(
    gpu: GpuSpec, measured: list[float], model: Callable[[GpuSpec], list[float]], rounds: int = 2
) -> dict[str, float]:
    """Coordinate search over the estimated constants: each in turn scaled by FIT_SCALES, kept where the
    misfit to the measured times drops. `model(spec)` gives the modeled µs of the same cases on `spec`.
    Few cases fit few constants: the result is an adjustment, reported with its remaining error."""
    fitted: dict[str, float] = {}
    best = _misfit(model(gpu), measured)
    for _ in range(rounds):
        for name in FITTED:
            base = getattr(gpu, name)
            for scale in LOWER_SCALES.get(name, ()) + FIT_SCALES:
                trial = {**fitted, name: base * scale}
                misfit = _misfit(model(dataclasses.replace(gpu, **trial)), measured)
                if misfit < best - 1e-9:
                    best, fitted = misfit, trial
    return fitted


def measured_entry(
    label: str, errors: list[CaseError], constants: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """A calibration entry from measured cases: the fitted constants, and the model's error on each case
    with them (the error a calibrated model states)."""
    if not errors:
        raise ValueError("a calibration needs at least one measured case")
    return {
        "label": label,
        "constants": {k: round(v, 6) for k, v in (constants or {}).items()},
        "errors": [
            {"case": e.case, "measured_us": round(e.measured_us, 3), "modeled_us": round(e.modeled_us, 3)}
            for e in errors
        ],
    }


def with_entry(document: Mapping[str, Any], gpu_key: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The calibration document with `gpu_key`'s entry replaced (the other GPUs' kept)."""
    gpus = dict(document.get("gpus", {}))
    gpus[gpu_key] = dict(entry)
    return {**document, "format_version": FORMAT_VERSION, "gpus": gpus}
