"""Hardware tables of the GPUs ddbench knows (pure data, below both the kernel's planner and the model);
docs/model.md gives each figure's source.

Figures marked "estimate" are not published by NVIDIA (L2 bandwidth and latency, DRAM latency, mma.sync on
sm_90, launch overheads) and are the first constants a calibration replaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddbench.errors import InputError

FLOP_PER_MMA_M16N8K16 = 2 * 16 * 8 * 16  # 4,096
SYSTEM_SMEM_PER_CTA = 1024  # sm_80+ reserve 1 KB of shared memory per resident block
REGISTER_ALLOCATION_UNIT = 256  # registers are allocated per warp in blocks of 256 (8 per thread)
SUBPARTITIONS_PER_SM = 4  # one warp scheduler each, one warp instruction issued per cycle


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    arch: str
    sms: int
    clock_ghz: float  # boost clock the tensor peak is quoted at
    dram_gbs: float  # datasheet peak
    l2_gbs: float  # estimate
    l2_bytes: int
    dram_latency_us: float  # estimate
    l2_latency_us: float  # estimate
    mma_flop_per_clk_per_sm: int  # mma.sync m16n8k16 bf16 -> fp32
    dense_tensor_tflops: float  # the best dense bf16 tensor peak of the chip (any instruction): the floor's
    smem_per_sm_bytes: int
    smem_per_cta_bytes: int
    registers_per_sm: int
    max_warps_per_sm: int
    max_ctas_per_sm: int
    smem_wavefronts_per_clk: float = 1.0  # 32 banks x 4 B: one wavefront per cycle per SM
    issue_per_clk: float = SUBPARTITIONS_PER_SM
    # SASS warp instructions the GPU issues per ddk primitive the emulation counts (the index arithmetic,
    # softmax, conversions and loop control it does not see), by kernel: the issue term's fallback where the
    # SASS cannot be counted. Measured by ncu on the H200 (sm_90) against the emulation's counts of the same
    # launches (kernel b7f330e82066a009): the verify kernel 4.39-4.87 on the long launches of
    # suites/model-report.json (7.5 with a cluster's final merge), the combine 10.3-12.0. The kernel has
    # changed since, which a fixed ratio cannot see. An estimate for sm_120: the same source, the same
    # instruction classes.
    verify_instructions_per_counted: float = 4.6
    combine_instructions_per_counted: float = 11.3
    # The measured time of SGLang's Triton kernel over its model's (the model's phases of a kernel we do not
    # emulate are estimates); a device run fits it (ddbench/device/calibrate.py), 1.0 until then. The H200's
    # first run: the calibrated Triton model was 2.8-2.9x optimistic on all nine target shapes.
    triton_time_scale: float = 1.0
    launch_overhead_us: float = 2.5  # a stream launch, seen between back-to-back kernels (estimate)
    graph_node_us: float = 1.0  # a kernel node of a replayed CUDA graph (estimate)
    # Distributed shared memory (sm_90+, estimates): published Hopper microbenchmarks give the SM-to-SM
    # network about 180 cycles and a few TB/s for the whole GPU, ~14 B/clk an SM. No figure is published
    # for sm_120, which has clusters too: the same estimates, until a GPU measures them.
    dsmem_bytes_per_clk: float = 16.0  # what one SM reads from other SMs' shared memory
    dsmem_latency_cycles: float = 200.0  # one ld.shared::cluster round trip
    cluster_barrier_cycles: float = 400.0  # barrier.cluster arrive + wait, the cluster already aligned
    # What the kernel's planner needs of the GPU (ddbench/kernel/plan.py says how each is used).
    # The KV tiles DRAM delivers while one SM multiplies one 16-row group with one tile, from the datasheet
    # figures above (tests/test_marshal.py derives them): a launch needs no more CTAs than keep that pace.
    dram_pace: float | None = None
    # Clusters of 8 CTAs the GPU runs at once (a cluster's CTAs share a GPC); None: no limit known.
    max_active_clusters: int | None = None

    @property
    def mma_per_clk(self) -> float:
        return self.mma_flop_per_clk_per_sm / FLOP_PER_MMA_M16N8K16

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e3)

    def us_to_cycles(self, us: float) -> float:
        return us * self.clock_ghz * 1e3


RTX_PRO_6000 = GpuSpec(
    key="rtx-pro-6000",
    name="NVIDIA RTX PRO 6000 Blackwell (sm_120)",
    arch="sm_120",
    sms=188,
    clock_ghz=2.617,
    dram_gbs=1792.0,  # GDDR7, 512-bit, 28 Gbps
    l2_gbs=5000.0,
    l2_bytes=128 * 2**20,
    dram_latency_us=0.8,
    l2_latency_us=0.25,
    mma_flop_per_clk_per_sm=1024,  # ~504 TFLOPS dense bf16 with fp32 accumulate
    dense_tensor_tflops=503.8,
    smem_per_sm_bytes=100 * 1024,
    smem_per_cta_bytes=101_376,
    registers_per_sm=65_536,
    max_warps_per_sm=48,
    max_ctas_per_sm=32,
    dram_pace=20.21,
    max_active_clusters=22,  # estimate: GB202's GPCs of 16 SMs, two of them short on this part
)

RTX_5090 = GpuSpec(
    key="rtx-5090",
    name="NVIDIA GeForce RTX 5090 (sm_120)",
    arch="sm_120",
    sms=170,
    clock_ghz=2.407,
    dram_gbs=1792.0,  # GDDR7, 512-bit, 28 Gbps
    l2_gbs=4600.0,
    l2_bytes=96 * 2**20,
    dram_latency_us=0.8,
    l2_latency_us=0.25,
    mma_flop_per_clk_per_sm=512,  # GeForce: fp32 accumulate at half the fp16-accumulate rate
    dense_tensor_tflops=209.5,
    smem_per_sm_bytes=100 * 1024,
    smem_per_cta_bytes=101_376,
    registers_per_sm=65_536,
    max_warps_per_sm=48,
    max_ctas_per_sm=32,
    dram_pace=43.95,
    max_active_clusters=13,  # estimate: 170 SMs may leave eleven GPCs short
)

H200 = GpuSpec(
    key="h200",
    name="NVIDIA H200 SXM (sm_90)",
    arch="sm_90",
    sms=132,
    clock_ghz=1.83,
    dram_gbs=4800.0,  # HBM3e; a device-to-device copy reaches ~4.3 TB/s
    l2_gbs=9000.0,
    l2_bytes=50 * 2**20,
    dram_latency_us=0.65,
    l2_latency_us=0.2,
    mma_flop_per_clk_per_sm=2048,  # mma.sync: assumed half of wgmma's 4,096 (estimate)
    dense_tensor_tflops=989.4,  # wgmma
    smem_per_sm_bytes=228 * 1024,
    smem_per_cta_bytes=232_448,
    registers_per_sm=65_536,
    max_warps_per_sm=64,
    max_ctas_per_sm=32,
    dram_pace=61.47,
    max_active_clusters=15,  # measured: ncu's launch__cluster_max_active, clusters of 8
)

GPUS: dict[str, GpuSpec] = {g.key: g for g in (RTX_PRO_6000, RTX_5090, H200)}
EMULATED_GPU = RTX_PRO_6000  # the GPU the CPU emulation plans its launches for, unless told another


def gpu_spec(key: str) -> GpuSpec:
    try:
        return GPUS[key]
    except KeyError:
        raise InputError(f"unknown GPU {key!r} (known: {', '.join(GPUS)})", path="--gpu") from None


# How a GPU names itself (torch.cuda.get_device_name) -> its table here; the device check calibrates that one.
_DEVICE_NAMES = (("rtx pro 6000", "rtx-pro-6000"), ("rtx 5090", "rtx-5090"), ("h200", "h200"))


def gpu_key_of_device(device_name: str) -> str | None:
    """The table of the GPU a device name belongs to, or None when the model has no table for it."""
    lowered = device_name.lower()
    return next((key for needle, key in _DEVICE_NAMES if needle in lowered), None)


def gpu_of_device(device_name: str) -> GpuSpec | None:
    """The table of a GPU by the name it gives itself, or None for one ddbench has no table for."""
    key = gpu_key_of_device(device_name)
    return None if key is None else GPUS[key]
