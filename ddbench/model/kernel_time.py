"""Counters -> a modeled time per kernel and per launch, and what limits it (pure).

Each CTA runs its phases (the stretches between barriers) one after another; a phase takes as long as its
binding resource: the tensor pipe (mma count / rate), shared memory (wavefronts, one per cycle per SM),
issue (warp instructions, four per cycle per SM) or exposed memory latency (round trips: the phase's global
bytes over the bytes the CTA keeps in flight, each a latency that L2 hits shorten); a cp.async pipeline hides
its round trips behind the compute of the other phases; a thread-block cluster's merge (reads of other CTAs'
shared memory, cluster barriers) is paid after the rest, never hidden, as is a CTA's final merge (from its
first global atomic on: each phase waits for its own loads). Co-resident CTAs share an
SM's pipes. CTAs are dispatched in order onto the free CTA slots of the GPU, which gives waves and tails. The
kernel is then no faster than its unique bytes over DRAM bandwidth nor its total traffic over L2 bandwidth.
The launch adds a fixed overhead per kernel. Every figure is *modeled*.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddbench.counters import CtaShape, KernelCounters, LaunchCounters, PhaseCounters
from ddbench.gpus import GpuSpec
from ddbench.kernel.sass_map import KernelSass
from ddbench.model.calibration import UNCALIBRATED, Calibration
from ddbench.model.occupancy import Occupancy, occupancy, tail_ctas, waves
from ddbench.model.warp_instructions import IssueCount, with_issue_count

LIMITERS = ("dram", "l2", "tensor", "smem", "issue", "dsmem", "latency", "waves", "launch")
LAUNCH_MODES = ("stream", "graph")
WAVES_SLACK = 1.25  # a schedule this much longer than perfectly balanced work is limited by its waves
# Without cp.async, a thread keeps about this many bytes of plain loads in flight (16 x 16 B; estimate).
SYNC_BYTES_IN_FLIGHT_PER_THREAD = 256


# Where a CTA's time goes, in the order it spends it: the phases before its first mma, from its first mma to
# its last (a kernel without mma: every phase), the phases after, what its pipeline waits beyond its compute
# (the fill, or the round trips compute did not cover), its cluster's merge, its final merge.
STAGES = ("prologue", "main loop", "epilogue", "memory waits", "cluster merge", "final merge")


@dataclass(frozen=True)
class CtaTime:
    count: int
    cycles: float
    by_resource: Mapping[str, float]  # cycles each resource was the binding one
    by_stage: Mapping[str, float] = field(default_factory=dict)  # cycles per STAGES entry; they sum to cycles


@dataclass(frozen=True)
class KernelModel:
    name: str
    ctas: int
    threads_per_cta: int
    dynamic_smem_bytes: int
    registers: int | None
    occupancy: Occupancy
    waves: int
    tail_ctas: int
    unique_bytes: int
    l2_bytes: int
    wavefronts_per_shared_instruction: float | None
    bank_conflicts: int
    slowest_cta_us: float
    schedule_us: float
    dram_us: float
    l2_us: float
    limiter: str
    slowest_cta_stages_us: Mapping[str, float] = field(default_factory=dict)  # the slowest CTA's, by STAGES
    issue: IssueCount | None = None  # the warp instructions the issue term counted, and how

    @property
    def modeled_us(self) -> float:
        return max(self.schedule_us, self.dram_us, self.l2_us)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ctas": self.ctas,
            "threads_per_cta": self.threads_per_cta,
            "dynamic_smem_bytes": self.dynamic_smem_bytes,
            "registers_per_thread": self.registers,
            "occupancy": self.occupancy.to_json(),
            "waves": self.waves,
            "tail_ctas": self.tail_ctas,
            "unique_dram_bytes": self.unique_bytes,
            "l2_bytes": self.l2_bytes,
            "wavefronts_per_shared_instruction": self.wavefronts_per_shared_instruction,
            "bank_conflicts": self.bank_conflicts,
            "modeled_slowest_cta_us": self.slowest_cta_us,
            "modeled_slowest_cta_stages_us": dict(self.slowest_cta_stages_us),
            "modeled_warp_instructions": self.issue.to_json() if self.issue else None,
            "modeled_schedule_us": self.schedule_us,
            "modeled_dram_us": self.dram_us,
            "modeled_l2_us": self.l2_us,
            "modeled_us": self.modeled_us,
            "limiter": self.limiter,
        }


@dataclass(frozen=True)
class LaunchModel:
    gpu: str
    kernels: tuple[KernelModel, ...]
    launch_mode: str
    overhead_us: float
    calibration: str
    notes: tuple[str, ...] = field(default=())

    @property
    def kernels_us(self) -> float:
        return sum(k.modeled_us for k in self.kernels)

    @property
    def modeled_us(self) -> float:
        return self.kernels_us + self.overhead_us

    @property
    def limiter(self) -> str:
        if not self.kernels or self.overhead_us >= self.kernels_us:
            return "launch"
        return max(self.kernels, key=lambda k: k.modeled_us).limiter

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "calibration": self.calibration,
            "launch_mode": self.launch_mode,
            "kernels": [k.to_json() for k in self.kernels],
            "modeled_overhead_us": self.overhead_us,
            "modeled_us": self.modeled_us,
            "limiter": self.limiter,
            "notes": list(self.notes),
        }


def _cluster_cycles(
    phase: PhaseCounters, gpu: GpuSpec, sync_in_flight: float, hidden: float
) -> tuple[str, float]:
    """What a phase of a cluster's merge adds, never overlapped: its reads of other CTAs' shared memory (over
    the SM's network share, or their round trips: the bytes over what the CTA keeps in flight, plus the round
    of the LSEs that come first) and the cluster barrier that ends it, less the `hidden` cycles the CTA worked
    since it arrived there (a cluster_wait)."""
    if not phase.cluster_bytes and not phase.cluster_barrier:
        return "dsmem", 0.0
    barrier = max(0.0, gpu.cluster_barrier_cycles - hidden) if phase.cluster_barrier else 0.0
    if not phase.cluster_bytes:
        return "latency", barrier
    rounds = math.ceil(phase.cluster_bytes / sync_in_flight) + 1
    network = phase.cluster_bytes / gpu.dsmem_bytes_per_clk
    latency = rounds * gpu.dsmem_latency_cycles
    return ("dsmem", network + barrier) if network >= latency else ("latency", latency + barrier)


def _stage_of(phase_index: int, first_mma: int, last_mma: int) -> str:
    if phase_index < first_mma:
        return "prologue"
    return "main loop" if phase_index <= last_mma else "epilogue"


def _cta_time(
    shape: CtaShape,
    gpu: GpuSpec,
    sharing: int,
    latency_cycles: float,
    in_flight: float,
    pipelined: bool,
    sync_in_flight: float,
) -> CtaTime:
    """A pipelined CTA (cp.async waits that left bytes in flight) overlaps its memory round trips with its
    compute and pays one round trip to fill the pipe; any other CTA waits for each phase's own loads. A
    cluster's merge (reads of other CTAs' shared memory, cluster barriers) is paid apart, after the rest, and
    so is everything from the CTA's first global atomic on (the final merge: its arrival at a counter, then,
    where it arrives last, the row tile's parts read back), each phase waiting for its own loads."""
    by_resource: dict[str, float] = {}
    compute_total = latency_total = cluster_total = tail_total = 0.0
    tail_by: dict[str, float] = {}
    compute_stages = dict.fromkeys(STAGES, 0.0)  # each phase's compute, as the pipelined CTA pays it
    serial_stages = dict.fromkeys(STAGES, 0.0)  # each phase's compute or its own round trips, if longer
    tensor_phases = [i for i, ph in enumerate(shape.phases) if ph.mma]
    first_mma, last_mma = (tensor_phases[0], tensor_phases[-1]) if tensor_phases else (0, len(shape.phases))
    in_tail = False
    since_arrive: float | None = None  # the cycles worked since a cluster_arrive whose wait is to come
    for i, phase in enumerate(shape.phases):
        costs = {
            "tensor": phase.mma / gpu.mma_per_clk * sharing,
            "smem": phase.shared_wavefronts / gpu.smem_wavefronts_per_clk * sharing,
            "issue": phase.warp_instructions / gpu.issue_per_clk * sharing,
        }
        binding = max(costs, key=lambda k: costs[k])
        in_tail = in_tail or phase.atomics > 0
        if in_tail:
            rounds = math.ceil(phase.global_bytes / sync_in_flight) if phase.global_bytes else 0
            if rounds * latency_cycles > costs[binding]:
                binding, costs[binding] = "latency", rounds * latency_cycles
        if since_arrive is not None:
            since_arrive += costs[binding]
        merge_binding, merge = _cluster_cycles(phase, gpu, sync_in_flight, since_arrive or 0.0)
        if phase.cluster_barrier:
            since_arrive = None
        if phase.cluster_arrive:
            since_arrive = 0.0
        if merge:
            cluster_total += merge
            by_resource[merge_binding] = by_resource.get(merge_binding, 0.0) + merge
        if in_tail:
            tail_total += costs[binding]
            tail_by[binding] = tail_by.get(binding, 0.0) + costs[binding]
            continue
        stage = "cluster merge" if merge else _stage_of(i, first_mma, last_mma)
        latency = math.ceil(phase.global_bytes / in_flight) * latency_cycles if phase.global_bytes else 0.0
        compute_total += costs[binding]
        compute_stages[stage] += costs[binding]
        latency_total += latency
        if not pipelined and latency > costs[binding]:
            binding, costs[binding] = "latency", latency
        serial_stages[stage] += costs[binding]
        by_resource[binding] = by_resource.get(binding, 0.0) + costs[binding]

    def with_tail(by: dict[str, float]) -> dict[str, float]:
        for k, v in tail_by.items():
            by[k] = by.get(k, 0.0) + v
        return by

    def staged(stages: dict[str, float], waits: float) -> dict[str, float]:
        stages["memory waits"] += waits
        stages["cluster merge"] += cluster_total
        stages["final merge"] += tail_total
        return stages

    if not pipelined:
        cycles = sum(serial_stages.values()) + cluster_total + tail_total
        return CtaTime(shape.count, cycles, with_tail(by_resource), staged(serial_stages, 0.0))
    fill = latency_cycles if latency_total else 0.0
    if latency_total > compute_total:
        merged = {k: v for k, v in by_resource.items() if k == "dsmem"}
        merged["latency"] = latency_total + fill + cluster_total - merged.get("dsmem", 0.0)
        waits = latency_total + fill - compute_total
        cycles = latency_total + fill + cluster_total + tail_total
        return CtaTime(shape.count, cycles, with_tail(merged), staged(compute_stages, waits))
    by_resource["latency"] = by_resource.get("latency", 0.0) + fill
    cycles = compute_total + fill + cluster_total + tail_total
    return CtaTime(shape.count, cycles, with_tail(by_resource), staged(compute_stages, fill))


def schedule_cycles(ctas: list[CtaTime], slots: int) -> float:
    """Makespan of dispatching the CTAs, in order, each onto the slot that frees first."""
    free = [0.0] * min(slots, sum(c.count for c in ctas))
    heapq.heapify(free)
    end = 0.0
    for cta in ctas:
        for _ in range(cta.count):
            finish = heapq.heappop(free) + cta.cycles
            end = max(end, finish)
            heapq.heappush(free, finish)
    return end


def model_kernel(kernel: KernelCounters, gpu: GpuSpec, registers: int | None) -> KernelModel:
    occ = occupancy(gpu, kernel.threads_per_cta, kernel.dynamic_smem_bytes, registers)
    n_waves = waves(kernel.ctas, gpu.sms, occ.ctas_per_sm)
    sharing = max(1, min(occ.ctas_per_sm, math.ceil(kernel.ctas / gpu.sms)))
    hit = 1.0 - kernel.unique_sectors / kernel.sectors if kernel.sectors else 0.0
    latency_us = hit * gpu.l2_latency_us + (1.0 - hit) * gpu.dram_latency_us
    flights = [b for b in kernel.bytes_in_flight_at_wait if b > 0]
    pipelined = bool(flights)
    in_flight = (
        sum(flights) / len(flights) if flights else kernel.threads_per_cta * SYNC_BYTES_IN_FLIGHT_PER_THREAD
    )
    latency_cycles = gpu.us_to_cycles(latency_us)
    sync_in = kernel.threads_per_cta * SYNC_BYTES_IN_FLIGHT_PER_THREAD
    ctas = [
        _cta_time(s, gpu, sharing, latency_cycles, s.bytes_in_flight or in_flight, pipelined, sync_in)
        for s in kernel.cta_shapes
    ]
    slowest = max(ctas, key=lambda c: c.cycles, default=None)
    stages = slowest.by_stage if slowest else {}
    slots = gpu.sms * occ.ctas_per_sm
    makespan = schedule_cycles(ctas, slots)
    schedule_us = gpu.cycles_to_us(makespan)
    dram_us = kernel.unique_bytes / (gpu.dram_gbs * 1e3)
    l2_us = kernel.l2_bytes / (gpu.l2_gbs * 1e3)
    limiter = "dram" if dram_us >= l2_us else "l2"
    if schedule_us >= max(dram_us, l2_us):
        work = sum(c.count * c.cycles for c in ctas)
        balanced = work / min(slots, max(kernel.ctas, 1))
        if n_waves >= 2 and makespan > WAVES_SLACK * balanced:
            limiter = "waves"
        else:
            weight: dict[str, float] = {}
            for c in ctas:
                for name, cycles in c.by_resource.items():
                    weight[name] = weight.get(name, 0.0) + c.count * cycles
            limiter = max(weight, key=lambda k: weight[k]) if weight else "latency"
    return KernelModel(
        name=kernel.name,
        ctas=kernel.ctas,
        threads_per_cta=kernel.threads_per_cta,
        dynamic_smem_bytes=kernel.dynamic_smem_bytes,
        registers=registers,
        occupancy=occ,
        waves=n_waves,
        tail_ctas=tail_ctas(kernel.ctas, gpu.sms, occ.ctas_per_sm),
        unique_bytes=kernel.unique_bytes,
        l2_bytes=kernel.l2_bytes,
        wavefronts_per_shared_instruction=kernel.wavefronts_per_shared_instruction,
        bank_conflicts=kernel.bank_conflicts,
        slowest_cta_us=gpu.cycles_to_us(slowest.cycles if slowest else 0.0),
        schedule_us=schedule_us,
        dram_us=dram_us,
        l2_us=l2_us,
        limiter=limiter,
        slowest_cta_stages_us={k: gpu.cycles_to_us(v) for k, v in stages.items()},
    )


def model_launch(
    counters: LaunchCounters,
    gpu: GpuSpec,
    registers: Mapping[str, int] | None,
    *,
    calibration: Calibration = UNCALIBRATED,
    launch_mode: str = "stream",
    sass: Mapping[str, KernelSass] | None = None,
) -> LaunchModel:
    """The modeled time of one launch (every kernel of it) from the emulation's counters.

    `registers` maps a kernel name to its registers per thread (ptxas, for `gpu.arch`); a kernel missing from
    it is modeled without a register limit, and the model's notes say so. `sass`: the kernels' SASS maps for
    `gpu.arch` (ddbench/model/warp_instructions.py); without them the issue term is counted by ratio.
    """
    if launch_mode not in LAUNCH_MODES:
        raise ValueError(f"launch_mode must be one of {LAUNCH_MODES}, not {launch_mode!r}")
    gpu = calibration.apply(gpu)
    notes = []
    models = []
    for kernel in counters.kernels:
        regs = (registers or {}).get(kernel.name)
        if regs is None:
            notes.append(f"{kernel.name}: registers per thread unknown, occupancy ignores them")
        counted, issue = with_issue_count(kernel, gpu, sass)
        if issue.method != "sass":
            why = issue.why or "no SASS map or no per-site counts"
            notes.append(f"{kernel.name}: issue counted by {issue.method} ({why})")
        models.append(dataclasses.replace(model_kernel(counted, gpu, regs), issue=issue))
    per_kernel = gpu.launch_overhead_us if launch_mode == "stream" else gpu.graph_node_us
    return LaunchModel(
        gpu=gpu.key,
        kernels=tuple(models),
        launch_mode=launch_mode,
        overhead_us=per_kernel * len(models),
        calibration=calibration.label,
        notes=tuple(notes),
    )
