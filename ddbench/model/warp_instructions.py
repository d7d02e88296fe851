"""How many warp instructions a kernel's CTAs issue: the model's issue term (pure).

The emulation counts only the ddk primitives a kernel calls; the GPU also issues the index arithmetic, the
softmax, conversions and loop control. Two ways to count those:
- **sass**: the kernel's SASS for the GPU's arch (nvcc, `ddbench kernel-check`) as basic blocks, each run as
  often as the emulation's per-site counts and the control flow allow (ddbench/model/sass_count.py). Checked
  against ncu on the H200 (docs/model.md, "Known limits"): 2.6-3.2 % under on the verify kernel, 5-42 %
  over on the combine.
- **ratio**: the primitives times a figure ncu measured on one kernel version
  (GpuSpec.*_instructions_per_counted); blind to any change of the arithmetic. Used where no SASS map is
  given (no nvcc, nvdisasm or scipy) or the counters predate per-site counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from ddbench.counters import KernelCounters
from ddbench.errors import InputError
from ddbench.gpus import GpuSpec
from ddbench.kernel.sass_map import KernelSass
from ddbench.model.sass_count import SassCount, count_cta


@dataclass(frozen=True)
class IssueCount:
    """A kernel's warp instructions over the launch, and how they were counted."""

    method: str  # "sass" or "ratio"
    likely: float
    least: float | None = None  # the bounds, where the SASS gave them
    most: float | None = None
    mismatch: float = 0.0  # anchor executions the SASS flow could not honour
    why: str = ""  # why a ratio counted it where a SASS map was given
    by_line: Mapping[str, float] = dataclasses.field(default_factory=dict)  # the likely figure by source line
    # the likely warp passes of each SASS block over the launch (checked against ncu's source page)
    block_runs: tuple[float, ...] = ()

    def to_json(self, lines: int = 30) -> dict[str, object]:
        """The counts, and the `lines` source lines that issue the most."""
        top = sorted(self.by_line.items(), key=lambda kv: -kv[1])[:lines]
        document = {**dataclasses.asdict(self), "by_line": dict(top)}
        del document["block_runs"]
        return document


def _scaled(kernel: KernelCounters, ratios: list[float]) -> KernelCounters:
    shapes = tuple(
        dataclasses.replace(
            shape,
            phases=tuple(
                dataclasses.replace(ph, warp_instructions=round(ph.warp_instructions * ratio))
                for ph in shape.phases
            ),
        )
        for shape, ratio in zip(kernel.cta_shapes, ratios, strict=True)
    )
    return dataclasses.replace(kernel, cta_shapes=shapes)


def _by_ratio(kernel: KernelCounters, gpu: GpuSpec, counted: list[int]) -> tuple[KernelCounters, IssueCount]:
    """Every phase's counted primitives times the kernel's measured ratio (1 for a kernel without one)."""
    ratio = {
        "verify": gpu.verify_instructions_per_counted,
        "combine": gpu.combine_instructions_per_counted,
    }.get(kernel.name, 1.0)
    total = sum(shape.count * n for shape, n in zip(kernel.cta_shapes, counted, strict=True))
    return _scaled(kernel, [ratio] * len(counted)), IssueCount("ratio", total * ratio)


# The count depends on the SASS and the CTA's sites alone, not on the GPU's figures: a calibration's fit,
# which models the same launches many times, solves each CTA shape once.
_SOLVED: dict[tuple[int, str, int], tuple[KernelSass, SassCount]] = {}
_SOLVED_MAX = 4096


def _counted(blocks: KernelSass, sites: Mapping[str, Mapping[str, int]], threads: int) -> SassCount:
    key = (id(blocks), repr(sorted((site, sorted(ops.items())) for site, ops in sites.items())), threads)
    hit = _SOLVED.get(key)
    if hit is not None and hit[0] is blocks:
        return hit[1]
    if len(_SOLVED) >= _SOLVED_MAX:
        _SOLVED.clear()
    count = count_cta(blocks, sites, threads)
    _SOLVED[key] = (blocks, count)
    return count


def with_issue_count(
    kernel: KernelCounters, gpu: GpuSpec, sass: Mapping[str, KernelSass] | None
) -> tuple[KernelCounters, IssueCount]:
    """The kernel with each phase's warp instructions scaled to what its SASS issues (each CTA shape by its
    own factor), and the launch's count."""
    counted = [sum(ph.warp_instructions for ph in shape.phases) for shape in kernel.cta_shapes]
    blocks = (sass or {}).get(kernel.name)
    if blocks is None or not all(
        shape.sites for shape, n in zip(kernel.cta_shapes, counted, strict=True) if n
    ):
        return _by_ratio(kernel, gpu, counted)
    try:
        counts = [_counted(blocks, shape.sites, kernel.threads_per_cta) for shape in kernel.cta_shapes]
    except InputError as err:  # no flow fits these counts: the ratio, with the reason, rather than no model
        scaled, issue = _by_ratio(kernel, gpu, counted)
        return scaled, dataclasses.replace(issue, why=f"the SASS flow of {kernel.name}: {err.reason}")
    ratios = [c.likely / n if n else 1.0 for c, n in zip(counts, counted, strict=True)]

    def total(value: str) -> float:
        return sum(
            shape.count * getattr(c, value) for shape, c in zip(kernel.cta_shapes, counts, strict=True)
        )

    by_line: dict[str, float] = {}
    runs = [0.0] * len(blocks.blocks)
    for shape, c in zip(kernel.cta_shapes, counts, strict=True):
        for line, n in c.by_line.items():
            by_line[line] = by_line.get(line, 0.0) + shape.count * n
        for b, n in enumerate(c.runs):
            runs[b] += shape.count * n
    issue = IssueCount(
        "sass",
        total("likely"),
        total("least"),
        total("most"),
        mismatch=total("mismatch"),
        by_line=by_line,
        block_runs=tuple(runs),
    )
    return _scaled(kernel, ratios), issue
