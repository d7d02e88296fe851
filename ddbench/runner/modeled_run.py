"""The modeled run: the Session's other kind of run, beside the parity-and-timing one.

Per selected case: one counted launch of the kernel under the CPU emulation, planned for the named GPU (or
counters given in a file), the model's figures from it (ddbench/model/), and, on request, the plan beside
its neighbours. Each case becomes a ModeledCase handed to the sinks as it is done; the outcome is judged
against a model baseline here, stored by ddbench/baselines/model_store.py, printed by ddbench/report/.
`profile`, `baseline update --model` and the device check's calibration all run through it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ddbench.counters import LaunchCounters, parse_counters
from ddbench.errors import InputError
from ddbench.gpus import GpuSpec, gpu_spec
from ddbench.kernel.sass_map import KernelSass
from ddbench.model.calibration import UNCALIBRATED, Calibration, with_what_if
from ddbench.model.floor import CaseShape
from ddbench.model.model_baseline import Tolerances, case_tolerances, regressions
from ddbench.model.profile import CaseProfile, profile_case
from ddbench.results.modeled_case import ModeledCase
from ddbench.runner.emulated_counters import would_be_sampled
from ddbench.runner.model_plan_sweep import sweep_plan
from ddbench.runner.model_profiles import calibration_of, model_cases, registers_of
from ddbench.suite.load import read_json
from ddbench.suite.model import Case


@dataclass(frozen=True)
class ModelRequest:
    """What a modeled run is asked: the GPU and launch it models, and where its counters come from."""

    gpu: str  # a key of ddbench.gpus.GPUS
    launch_mode: str = "stream"
    what_if: tuple[str, ...] = ()  # NAME=VALUE table constants set by hand (labelled what-if)
    counters_file: str | None = None  # counters made elsewhere (case ID -> counters document)
    registers_file: str | None = None  # a `kernel-check --json` report
    sanitize: bool = False  # the counted launch under racecheck and memcheck
    full_only: bool = False  # leave out the cases that would be counted on one CTA per work shape
    plan_sweep: bool = False  # each case beside the plan's neighbours (one emulated launch a variant)
    keep_counters: bool = False  # keep each counted launch, to model it again (`ModeledOutcome.remodel`)

    @property
    def counts(self) -> bool:
        """Whether the run counts launches under the emulation (not when the counters are given)."""
        return self.counters_file is None or self.plan_sweep


class ModelSink(Protocol):
    """Told of each modeled case as it is done, and of the outcome at the end."""

    def add(self, modeled: ModeledCase) -> None: ...

    def finish(self, outcome: ModeledOutcome) -> None: ...


@dataclass(frozen=True)
class ModelVerdict:
    """A modeled run against a model baseline: one line per figure that got worse, and notes."""

    regressions: list[str]
    notes: list[str]


@dataclass
class ModeledOutcome:
    cases: list[ModeledCase]
    gpu: GpuSpec
    calibration: Calibration
    left_out: int = 0  # cases --full-only left out
    registers: Mapping[str, int] | None = None  # by kernel name, where known (ptxas or --registers)
    sass: Mapping[str, KernelSass] | None = None  # the kernels' SASS maps, where nvcc and nvdisasm run
    selected: list[Case] = field(default_factory=list)
    launch_mode: str = "stream"

    @property
    def registers_known(self) -> bool:
        return self.registers is not None

    def remodel(self, gpu: GpuSpec, calibration: Calibration = UNCALIBRATED) -> list[CaseProfile]:
        """The same counted launches modeled again on other figures (a calibration's fit tries many)."""
        by_id = {c.id: c for c in self.selected}
        out = []
        for modeled in self.cases:
            if modeled.counters is None:
                raise ValueError(f"{modeled.case_id}: no counters kept (ModelRequest.keep_counters)")
            shape = CaseShape.of(by_id[modeled.case_id])
            out.append(
                profile_case(
                    modeled.case_id,
                    shape,
                    modeled.counters,
                    gpu,
                    self.registers,
                    calibration,
                    self.launch_mode,
                    self.sass,
                )
            )
        return out

    @property
    def profiles(self) -> list[CaseProfile]:
        return [c.profile for c in self.cases]

    @property
    def dirty(self) -> list[ModeledCase]:
        """Cases whose counted launch the sanitizer found a race or an out-of-range access in."""
        return [c for c in self.cases if c.sanitizer is not None and not c.sanitizer.clean]

    def judge(self, baseline: Mapping[str, Any], baseline_file: str, tolerances: Tolerances) -> ModelVerdict:
        """Regressions against a stored model baseline (read before the run: `read_model_baseline`); a case's
        suite budget (its `model` limits for this GPU) replaces `tolerances` for that case."""
        from_budgets = case_tolerances(self.selected, self.gpu.key)
        found, notes = regressions(
            self.profiles,
            baseline,
            self.gpu.key,
            self.calibration.label,
            tolerances,
            baseline_file,
            from_budgets,
        )
        if from_budgets:
            notes.insert(
                0, f"{len(from_budgets)} case(s) judged by their budgets' model limits ({self.gpu.key})"
            )
        return ModelVerdict(found, notes)


class ModeledRun:
    """A modeled run, prepared: everything that can be refused (the GPU, --what-if, the counters file,
    --full-only leaving nothing) is refused here, before any case is counted."""

    def __init__(self, cases: Sequence[Case], request: ModelRequest) -> None:
        self.request = request
        self.gpu = gpu_spec(request.gpu)
        self.calibration = with_what_if(calibration_of(self.gpu), request.what_if)
        kept = list(cases)
        if request.full_only and request.counters_file is None:
            kept = [c for c in cases if not would_be_sampled(c)]
            if not kept:
                raise InputError("--full-only: every selected case would be sampled", path="--full-only")
        self.left_out = len(cases) - len(kept)
        self.cases = kept
        self.given = (
            None if request.counters_file is None else _counters_from_file(request.counters_file, kept)
        )

    def run(self, sinks: Sequence[ModelSink] = ()) -> ModeledOutcome:
        """Every case in order, each handed to the sinks as it is done."""
        r = self.request
        registers: list[Mapping[str, int] | None] = []  # the plan sweep's, looked up at its first case

        def each(case: Case, modeled: ModeledCase) -> ModeledCase:
            if r.plan_sweep:
                if not registers:
                    registers.append(registers_of(self.gpu.arch, r.registers_file))
                sweep = sweep_plan(case, self.gpu, self.calibration, r.launch_mode, registers[0])
                modeled = dataclasses.replace(modeled, plan_sweep=sweep)
            for sink in sinks:
                sink.add(modeled)
            return modeled

        modeled = model_cases(
            self.cases,
            self.gpu,
            self.calibration,
            r.launch_mode,
            self.given,
            r.registers_file,
            r.sanitize,
            r.keep_counters,
            each,
        )
        outcome = ModeledOutcome(
            modeled.cases,
            self.gpu,
            self.calibration,
            self.left_out,
            modeled.registers,
            modeled.sass,
            list(self.cases),
            r.launch_mode,
        )
        for sink in sinks:
            sink.finish(outcome)
        return outcome


def _counters_from_file(path: str, cases: Sequence[Case]) -> dict[str, LaunchCounters]:
    doc = read_json(Path(path), what="counters file")
    if not isinstance(doc, Mapping):
        raise InputError("must be an object of case ID -> counters document", file=path)
    missing = [c.id for c in cases if c.id not in doc]
    if missing:
        raise InputError(f"no counters for {len(missing)} selected case(s), first {missing[0]!r}", file=path)
    return {c.id: parse_counters(doc[c.id], path, at=f"[{c.id!r}]") for c in cases}
