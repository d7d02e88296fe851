"""The launch plan against the model: each case modeled at the plan's choice and beside it (the variants of
ddbench/kernel/plan_variants.py, the same a GPU's sweep times), so that a plan that loses to a neighbour in
the model shows without a GPU. Every figure is modeled; each variant costs one emulated launch."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ddbench.gpus import GpuSpec
from ddbench.inputs import generate_inputs
from ddbench.kernel.plan import LaunchPlan
from ddbench.kernel.plan_variants import plan_variants
from ddbench.model.calibration import Calibration
from ddbench.model.floor import CaseShape
from ddbench.model.profile import profile_case
from ddbench.runner.emulated_counters import emulated_counters, emulation_for
from ddbench.runner.model_profiles import registers_of, sass_of
from ddbench.suite.model import Case


@dataclass(frozen=True)
class PlanSweep:
    case: str
    plan: str  # the plan's launch, in words
    modeled_us: dict[str, float] = field(default_factory=dict)  # variant -> modeled µs
    refused: dict[str, str] = field(default_factory=dict)  # variant -> why the plan refused it

    @property
    def fastest(self) -> str:
        """The variant of least modeled time ("plan" on a tie; "" where none was modeled)."""
        return min(self.modeled_us, key=lambda name: self.modeled_us[name], default="")

    @property
    def gain(self) -> float:
        """The share of the plan's modeled time its fastest neighbour saves (0 where the plan is fastest)."""
        plan = self.modeled_us.get("plan", 0.0)
        return 1.0 - self.modeled_us[self.fastest] / plan if plan > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "plan": self.plan,
            "modeled_us": self.modeled_us,
            "refused": self.refused,
            "fastest": self.fastest,
            "modeled_gain": self.gain,
        }


def describe(plan: LaunchPlan) -> str:
    if plan.whole_row_tiles:
        return f"{plan.ctas} CTAs of {plan.block_m} rows, whole row tiles"
    merge = "final merge" if plan.final_merge else "combine"
    clusters = f", clusters of {plan.cluster}" if plan.cluster > 1 else ""
    return f"{plan.ctas} CTAs of {plan.block_m} rows{clusters}, {merge}"


def sweep_plan(
    case: Case, gpu: GpuSpec, calibration: Calibration, launch_mode: str, registers: Mapping[str, int] | None
) -> PlanSweep:
    """The case modeled at every variant the plan accepts (a variant it refuses, e.g. CTAs that do not
    divide into clusters, is named with the reason)."""
    planner = emulation_for(gpu)
    # planned as emulated_counters plans it
    plan = planner.marshaled_launch(generate_inputs(case, torch.device("cpu")), case.graph_replayed).plan
    sass = sass_of(gpu.arch)
    result = PlanSweep(case.id, describe(plan))
    row_tiles = plan.row_tiles * case.batch_size
    combine_rows = plan.combine_rows if plan.combines else None
    for name, options in plan_variants(
        row_tiles,
        gpu.sms,
        row_groups=plan.row_groups,
        max_clusters=planner.plan.max_clusters,
        combine_rows=combine_rows,
    ):
        try:
            counters = emulated_counters(case, gpu, sanitize=False, forced=options).counters
        except ValueError as err:  # the plan refuses the forced shape
            result.refused[name] = str(err)
            continue
        profile = profile_case(
            case.id, CaseShape.of(case), counters, gpu, registers, calibration, launch_mode, sass
        )
        us = profile.launch.modeled_us
        if math.isfinite(us):
            result.modeled_us[name] = us
        else:
            result.refused[name] = f"the model gave {us} µs"
    return result


def sweep_plans(
    cases: list[Case],
    gpu: GpuSpec,
    calibration: Calibration,
    launch_mode: str,
    registers_path: str | None = None,
) -> list[PlanSweep]:
    """Every case's sweep, with the registers the profile models with (`registers_path`: a kernel-check
    report, as `--registers` gives)."""
    registers = registers_of(gpu.arch, registers_path)
    return [sweep_plan(case, gpu, calibration, launch_mode, registers) for case in cases]
