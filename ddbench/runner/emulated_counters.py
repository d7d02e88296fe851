"""The counters `ddbench profile` models: one counted launch of the kernel's own source under the emulation.

The launch is planned for the named GPU (its SM count, DRAM pace and the clusters it runs at once decide the
splits). Small cases run every CTA, so every count is exact. Big ones (more than SAMPLE_ABOVE key-tiles x
row-tiles) run one CTA per work shape, each counted for all of its shape (docs/emulation.md): mma, barriers,
bytes, sectors, wavefronts and waits stay exact, but the launch-wide unique sectors of a sampled run are not
counted. For those the verify kernel's unique sectors are derived from the launch's addresses
(`ddbench.kernel.footprint`, equal sector for sector to a full count in the tests), and the launch says so
(`CountedLaunch.sampled`); the combine kernel runs whole and is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.counters import LaunchCounters
from ddbench.errors import BackendUnavailable
from ddbench.gpus import GpuSpec
from ddbench.inputs import generate_inputs
from ddbench.kernel.footprint import verify_unique_sectors
from ddbench.kernel.plan import PlanOptions
from ddbench.results.modeled_case import SanitizerVerdict
from ddbench.suite.model import Case

SAMPLE_ABOVE = 100_000  # keys x 32-row tiles: a full counted run of about 10 s on 2 cores
WORK_ROWS = 32  # the row tile the threshold was set in (the kernel may hold 32 or 48 rows)


@dataclass(frozen=True)
class CountedLaunch:
    """One counted launch of a case, and how it was counted."""

    counters: LaunchCounters
    source: str  # "emulated, every CTA" or "emulated, one CTA per work shape"
    sampled: bool = False  # one CTA per work shape: the verify kernel's unique sectors derived from addresses
    sanitizer: SanitizerVerdict | None = None  # racecheck and memcheck's verdict, where they ran


def emulation_work(case: Case) -> int:
    rows = case.q_len * case.heads_per_rank
    row_tiles = -(-rows // WORK_ROWS)
    return sum(prefix + case.q_len for prefix in case.prefix_lens) * row_tiles


def would_be_sampled(case: Case) -> bool:
    """Whether `emulated_counters` counts the case on one CTA per work shape rather than every CTA."""
    return emulation_work(case) > SAMPLE_ABOVE


def emulation_for(gpu: GpuSpec, forced: PlanOptions | None = None) -> CudaEmuBackend:
    """The emulation, its launches planned as on `gpu` (its SMs, DRAM pace and clusters at once), with what
    `forced` forces of the plan (its GPU fields are not read)."""
    on_gpu = PlanOptions.for_gpu(gpu)
    return CudaEmuBackend(plan=on_gpu if forced is None else on_gpu.forcing(forced))


def emulated_counters(
    case: Case, gpu: GpuSpec, sanitize: bool = True, forced: PlanOptions | None = None
) -> CountedLaunch:
    """One counted launch (`forced`: see emulation_for); with `sanitize`, the same launch under racecheck
    and memcheck, and their verdict (of the CTAs that ran, in a sampled run)."""
    backend = emulation_for(gpu, forced)
    status = backend.availability()
    if not status.ok:
        raise BackendUnavailable(f"profile: unavailable: {status.detail}")
    sampled = would_be_sampled(case)
    inputs = generate_inputs(case, torch.device("cpu"))
    # a CUDA-graph case is modeled as it is replayed: planned once for its buffers' capacity
    for_capacity = case.graph_replayed
    run = backend.run_traced(
        inputs,
        counters=True,
        sanitize=sanitize,
        group_shapes=True,
        one_cta_per_shape=sampled,
        for_capacity=for_capacity,
    )
    assert run.counters is not None
    counters = run.counters
    sanitizer = None
    if run.sanitizer is not None:
        report = run.sanitizer
        sanitizer = SanitizerVerdict(report.clean, report.findings_total, report.summary())
    if sampled:
        verify = counters.kernel("verify")
        assert verify is not None
        unique = verify_unique_sectors(backend.marshaled_launch(inputs, for_capacity))
        counters = counters.replacing("verify", verify.with_unique_sectors(unique))
    source = "emulated" + (", one CTA per work shape" if sampled else ", every CTA")
    return CountedLaunch(counters, source, sampled, sanitizer)
