"""Timing one case: which backends, which ratios, fresh input sets, then the sampler and the budget."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from ddbench.backends.protocol import Backend
from ddbench.inputs import generate_inputs
from ddbench.inputs.layout import VerifyInputs
from ddbench.metrics.latency_verdict import judge_budget
from ddbench.results.case_timing import CaseTiming
from ddbench.suite.budget import Budget
from ddbench.suite.model import Case
from ddbench.timing.sampler import measure
from ddbench.timing.stats import LatencyStats

SEED_STRIDE = 7919  # input set k uses seed + k * SEED_STRIDE: same shapes, other values (and trees)


def input_sets(case: Case, first: VerifyInputs, count: int, device: torch.device) -> list[VerifyInputs]:
    extra = [
        generate_inputs(dataclasses.replace(case, seed=case.seed + k * SEED_STRIDE), device)
        for k in range(1, count)
    ]
    return [first, *extra]


def time_case(
    case: Case,
    budget: Budget,
    backends: Mapping[str, Backend],
    first_inputs: VerifyInputs,
    baselines: Mapping[str, LatencyStats],
) -> CaseTiming:
    names = [n for n in (budget.timed or backends) if n in backends]
    sets = input_sets(case, first_inputs, budget.timing.input_sets, first_inputs.device)
    ratio_pairs = [(r.candidate, r.baseline) for r in budget.ratios]
    measurements, ratios = measure({n: backends[n] for n in names}, sets, budget.timing, ratio_pairs)
    stats = {name: m.stats for name, m in measurements.items()}
    return CaseTiming(budget, measurements, ratios, judge_budget(budget, stats, ratios, baselines))
