"""Modeling a suite's cases on a GPU: the step `ddbench profile` and `ddbench baseline update --model` share,
so both write the same model baseline for the same suite and GPU.

Per case: the emulation's counters (or counters given), registers per thread from kernel-check, then the
model (ddbench/model/profile.py); a ModeledCase per case. Every figure it returns is modeled.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddbench.counters import LaunchCounters
from ddbench.errors import InputError
from ddbench.finite import number_problem
from ddbench.gpus import GpuSpec
from ddbench.kernel.cuda_build import kernel_sources_hash
from ddbench.kernel.kernel_check import ArchReport, kernel_check
from ddbench.kernel.sass_map import KernelSass
from ddbench.model.calibration import Calibration, calibration_for
from ddbench.model.floor import CaseShape
from ddbench.model.profile import profile_case
from ddbench.results.modeled_case import ModeledCase
from ddbench.runner.emulated_counters import CountedLaunch, emulated_counters
from ddbench.suite.load import read_json
from ddbench.suite.model import Case

CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "model" / "calibration.json"


@dataclass
class ModeledCases:
    cases: list[ModeledCase] = field(default_factory=list)
    registers: Mapping[str, int] | None = None  # by kernel name, where known
    sass: Mapping[str, KernelSass] | None = None


def calibration_of(gpu: GpuSpec) -> Calibration:
    """The committed calibration for this GPU (datasheet values, labelled uncalibrated, when none)."""
    document = read_json(CALIBRATION_FILE, what="calibration file")
    return calibration_for(document, gpu.key, str(CALIBRATION_FILE))


def model_cases(
    cases: Sequence[Case],
    gpu: GpuSpec,
    calibration: Calibration,
    launch_mode: str = "stream",
    given: Mapping[str, LaunchCounters] | None = None,
    registers_path: str | None = None,
    sanitize: bool = False,
    keep_counters: bool = False,
    each: Callable[[Case, ModeledCase], ModeledCase] | None = None,
) -> ModeledCases:
    """Each case's modeled profile, in the order given; `given`: counters by case ID instead of emulating;
    `keep_counters`: each record keeps its counted launch (to be modeled again; memory grows with the
    cases); `each` sees every case as it is modeled and returns the record to keep."""
    out = ModeledCases()
    for case in cases:
        start = time.perf_counter()
        launch = (
            emulated_counters(case, gpu, sanitize)
            if given is None
            else CountedLaunch(given[case.id], "given (--counters)")
        )
        counted = time.perf_counter() - start
        if not out.cases:  # after the first counters: a run that cannot count never waits for nvcc
            out.registers = registers_of(gpu.arch, registers_path)
            out.sass = sass_of(gpu.arch)
        start = time.perf_counter()
        profile = profile_case(
            case.id,
            CaseShape.of(case),
            launch.counters,
            gpu,
            out.registers,
            calibration,
            launch_mode,
            out.sass,
        )
        seconds = counted + time.perf_counter() - start
        modeled = ModeledCase(
            dataclasses.replace(profile, modeling_seconds=seconds),
            launch.source,
            sanitizer=launch.sanitizer,
            sampled=launch.sampled,
            counters=launch.counters if keep_counters else None,
        )
        out.cases.append(modeled if each is None else each(case, modeled))
    return out


def registers_of(arch: str, path: str | None = None) -> dict[str, int] | None:
    """Registers per thread by kernel name: from a `kernel-check --json` report, else nvcc's ptxas when it
    is installed, else None (the model then ignores the register limit and says so)."""
    if path is not None:
        reports = read_json(Path(path), what="kernel-check report")
        if not isinstance(reports, list):
            raise InputError("must be the list `ddbench kernel-check --json` writes", file=path)
        found = {}
        for i, report in enumerate(reports):
            if isinstance(report, Mapping) and report.get("arch") == arch:
                kernels = report.get("kernels", [])
                if not isinstance(kernels, list):  # `"kernels": 5` made enumerate() raise a TypeError
                    raise InputError("must be a list of kernels", file=path, path=f"[{i}].kernels")
                for j, k in enumerate(kernels):
                    if not isinstance(k, Mapping) or "registers" not in k:
                        raise InputError(
                            "a kernel needs 'name' and 'registers'", file=path, path=f"[{i}].kernels[{j}]"
                        )
                    # ptxas allots 1 to 255 registers per thread; 0 divides the occupancy model by zero
                    if problem := number_problem(k["registers"], integer=True, minimum=1, maximum=255):
                        raise InputError(problem, file=path, path=f"[{i}].kernels[{j}].registers")
                    found[_short(str(k.get("name", "")))] = k["registers"]
        if not found:
            raise InputError(f"no kernel built for {arch}", file=path)
        return _by_both_names(found)
    reports = _built(arch, kernel_sources_hash())
    found = {_short(k.name): k.registers for r in reports for k in r.kernels}
    return _by_both_names(found) if found else None


def sass_of(arch: str) -> dict[str, KernelSass] | None:
    """The kernels' SASS maps for `arch` (nvcc and nvdisasm), or None where either is missing, or scipy (its
    solver; a GPU machine's image may lack it): the model then counts the issue term by ratio and says so."""
    if importlib.util.find_spec("scipy") is None:
        return None
    return next((r.sass_map for r in _built(arch, kernel_sources_hash()) if r.sass_map), None)


@functools.lru_cache(maxsize=4)
def _built(arch: str, sources: str) -> tuple[ArchReport, ...]:
    """One nvcc build per arch and kernel source (`sources`, their hash, keys the cache); () without nvcc."""
    try:
        return tuple(kernel_check((arch,)))
    except RuntimeError:
        return ()


# The emulation's counters name a launch by its role; ptxas by the kernel's (mangled) name.
_COUNTED_AS = {"verify_attention_kernel": "verify", "combine_parts_kernel": "combine"}


def _short(mangled: str) -> str:
    return next((name for name in _COUNTED_AS if name in mangled), mangled)


def _by_both_names(registers: dict[str, int]) -> dict[str, int]:
    """Registers under the kernel's name and under the name its counted launch carries."""
    return {**registers, **{_COUNTED_AS[k]: v for k, v in registers.items() if k in _COUNTED_AS}}
