"""The launch plan against the hardware: the kernel timed at other CTA counts, row widths and clusters.

`ddbench/kernel/plan.py` picks a launch from the model's figures. On a GPU the same cases are timed at the
plan's choice and beside it (interleaved, CUDA-graph replays on a cold L2, as serving meets a layer), so a
plan that the hardware disagrees with shows as a faster neighbour. Every variant's output is compared with
the plan's own (the same attention, another split of the work).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ddbench.backends.cuda_kernel import CudaKernelBackend
from ddbench.device.cases import suite_cases
from ddbench.inputs import generate_inputs
from ddbench.kernel.plan_variants import plan_variants
from ddbench.runner.timing import measure_backends
from ddbench.suite import Case
from ddbench.timing.settings import TimingSettings

SWEEP_SUITE = "suites/model-report.json"
SWEEP_CASES = ("q9-p4096", "q9-p32768", "q9-p131072", "q65-p4096", "bs16", "dsv3")
SETTINGS = TimingSettings(mode="graph-cold-l2", max_seconds=1.5, target_rel_noise=0.02, input_sets=1)


def variants(
    row_tiles: int, sms: int, row_groups: int | None = None, combine_rows: int | None = None
) -> Iterator[tuple[str, CudaKernelBackend]]:
    """The plan, its combine's CTAs of other row counts, then whole row tiles, balanced ranges over more CTAs,
    32- and 48-row tiles, clusters (as many as the GPU runs: the driver runs the rest later, and the timing
    shows it)."""
    for name, options in plan_variants(row_tiles, sms, row_groups=row_groups, combine_rows=combine_rows):
        yield name, CudaKernelBackend(forced=options)


def _sweep_case(case: Case) -> dict[str, Any]:
    inputs = generate_inputs(case, "cuda")
    plan_backend = CudaKernelBackend()
    reference = plan_backend.run(inputs).float().clone()
    plan = plan_backend.last_plan
    row_tiles = plan.row_tiles * case.batch_size if plan else 1
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    backends: dict[str, CudaKernelBackend] = {}
    checks: dict[str, Any] = {}
    combine_rows = plan.combine_rows if plan and plan.combines else None
    for name, backend in variants(row_tiles, sms, plan.row_groups if plan else None, combine_rows):
        try:
            out = backend.run(inputs).float()
        except Exception as err:  # a shape this plan refuses (e.g. CTAs not a multiple of the cluster)
            checks[name] = {"error": f"{type(err).__name__}: {err}"}
            continue
        error = float((out - reference).abs().max() / reference.abs().max().clamp_min(1e-30))
        checks[name] = {"plan": vars(backend.last_plan) if backend.last_plan else None, "max_rel": error}
        backends[name] = backend
    measured, _ = measure_backends(backends, [inputs], SETTINGS)
    for name, m in measured.items():
        checks[name] |= {"median_us": round(m.stats.median_us, 2), "rel_noise": round(m.stats.rel_noise, 4)}
    best = min(measured, key=lambda n: measured[n].stats.median_us)
    ok = all(c["max_rel"] < 2**-6 for c in checks.values() if "max_rel" in c)
    return {"case": case.id, "variants": checks, "fastest": best, "outputs_agree": ok}


def step_plan_sweep() -> dict[str, Any]:
    rows = []
    for label in SWEEP_CASES:
        try:
            (case,) = suite_cases(SWEEP_SUITE, label)[:1]
            rows.append(_sweep_case(case))
        except Exception as err:  # one case's failure is its row, not the step's end
            rows.append({"case": label, "error": f"{type(err).__name__}: {err}"})
    return {"ok": all(r.get("outputs_agree") for r in rows), "rows": rows}
