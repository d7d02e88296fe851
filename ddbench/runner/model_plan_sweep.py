"""The launch plan against the model: each case modeled at the plan's choice and beside it (the variants of
ddbench/kernel/plan_variants.py, the same a GPU's sweep times), so that a plan that loses to a neighbour in
the model shows without a GPU. Every figure is modeled; each variant costs one emulated launch."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from ddbench.gpus import GpuSpec
from ddbench.inputs import generate_inputs
from ddbench.kernel.plan import LaunchPlan
from ddbench.kernel.plan_variants import plan_variants
from ddbench.model.calibration import Calibration
from ddbench.model.floor import CaseShape
from ddbench.model.profile import profile_case
from ddbench.results.plan_sweep import PlanSweep
from ddbench.runner.emulated_counters import emulated_counters, emulation_for
from ddbench.runner.model_profiles import sass_of
from ddbench.suite.model import Case


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
