"""Timing one case: which backends, which ratios, fresh input sets, the launches to time, then the sampler
and the budget.

Each backend is prepared once per input set (`prepared`: marshaling, plan, workspace) and only the launch
is sampled; the preparation's own host time is measured beside it (`prepare_us`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Mapping, Sequence

import torch

from ddbench.backends.protocol import Backend, TwoPhaseBackend, prepared, replayable
from ddbench.baselines.entry import BaselineEntry
from ddbench.inputs import generate_inputs
from ddbench.inputs.layout import VerifyInputs
from ddbench.metrics.latency_verdict import judge_budget
from ddbench.results.case_timing import CaseTiming
from ddbench.suite.budget import Budget
from ddbench.suite.model import Case
from ddbench.timing.clocks import Clock, timed_host_call
from ddbench.timing.sampler import Measurement, TimingSubject, measure
from ddbench.timing.settings import TimingSettings
from ddbench.timing.stats import RatioStats
from ddbench.timing.threads import torch_threads

SEED_STRIDE = 7919  # input set k uses seed + k * SEED_STRIDE: same shapes, other values (and trees)
PREPARE_SAMPLES = 5  # host timings of `prepare` per backend (one per input set, more on the first sets)


def input_sets(case: Case, first: VerifyInputs, count: int, device: torch.device) -> list[VerifyInputs]:
    extra = [
        generate_inputs(dataclasses.replace(case, seed=case.seed + k * SEED_STRIDE), device)
        for k in range(1, count)
    ]
    return [first, *extra]


def timing_subject(
    backend: Backend, sets: Sequence[VerifyInputs], clock: Clock | None = None, replayed: bool = False
) -> TimingSubject:
    """The backend's launch on each input set, each set's re-poison hook, and, for a backend with its own
    `prepare`, the median host time of a preparation (None for one with `run` alone: nothing is apart).
    `replayed`: the launch a CUDA-graph group replays (`replayable`), what such a case judges."""
    make = replayable if replayed else prepared
    if not isinstance(backend, TwoPhaseBackend):
        launches = [make(backend, x) for x in sets]
        return TimingSubject(launches, [x.fresh_output for x in sets], None)
    sync = torch.cuda.synchronize if sets[0].device.type == "cuda" else None
    launches, prepare_us = [], []
    for k in range(max(len(sets), PREPARE_SAMPLES)):
        x = sets[k % len(sets)]
        launch, us = timed_host_call(lambda x=x: make(backend, x), sync, clock)
        prepare_us.append(us)
        if k < len(sets):
            launches.append(launch)
    return TimingSubject(launches, [x.fresh_output for x in sets], statistics.median(prepare_us))


def measure_backends(
    backends: Mapping[str, Backend],
    sets: Sequence[VerifyInputs],
    settings: TimingSettings,
    ratios: Sequence[tuple[str, str]] = (),
    clock: Clock | None = None,
    replayed: bool = False,
) -> tuple[dict[str, Measurement], list[RatioStats]]:
    """Prepare every backend on every set (with the CPU's timing thread count), then sample the launches."""
    device = sets[0].device
    on_cpu = device.type != "cuda"
    with torch_threads(settings.cpu_threads) if on_cpu else contextlib.nullcontext():
        subjects = {name: timing_subject(b, sets, clock, replayed) for name, b in backends.items()}
        return measure(subjects, device, settings, ratios, clock)


def time_case(
    case: Case,
    budget: Budget,
    backends: Mapping[str, Backend],
    first_inputs: VerifyInputs,
    baselines: Mapping[str, BaselineEntry],
) -> CaseTiming:
    """Times the budget's backends on fresh input sets and judges them; a baseline entry timed in another
    mode than this run's measurement (a warm graph against a cold L2) does not judge it."""
    names = [n for n in (budget.timed or backends) if n in backends]
    sets = input_sets(case, first_inputs, budget.timing.input_sets, first_inputs.device)
    ratio_pairs = [(r.candidate, r.baseline) for r in budget.ratios]
    measurements, ratios = measure_backends(
        {n: backends[n] for n in names}, sets, budget.timing, ratio_pairs, replayed=case.graph_replayed
    )
    stats = {name: m.stats for name, m in measurements.items()}
    comparable = {
        name: entry.latency
        for name, entry in baselines.items()
        if name in measurements and entry.mode in (None, measurements[name].mode)
    }
    return CaseTiming(budget, measurements, ratios, judge_budget(budget, stats, ratios, comparable))
