"""A model of SGLang's Triton extend-attention kernel, a kernel the project does not emulate (pure).

Its counters are *derived* from its grid and traffic, not counted: `extend_attention_fwd` launches
(bs, heads, ceil(max q_len / BLOCK_M)) programs with no split-KV. Each program reads its request's offsets,
then runs two loops, BLOCK_N keys at a time: over the prefix (the tile's pool slots from `kv_indices`, then
the K tile at those slots, 576 dims, 1152 B per key, then the V tile, 512 dims, 1024 B per key), and over
the draft keys (the tile's custom-mask bytes, which decide whether the tile is skipped, then K, then V).
With num_stages = 1 nothing is prefetched, so every load waits for the one its address or its branch
depends on: five phases per tile (load slots or mask, load K, S = QK^T, load V, O += PV). BLOCK_M rows are
padded: a q_len of 9 fills 9 of 32. The derived counters are the emulation's records
(ddbench/model/derived_counters.py) and go through the same `model_kernel`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import astuple, dataclass

from ddbench.counters import SECTOR_BYTES, KernelCounters, PhaseCounters
from ddbench.gpus import FLOP_PER_MMA_M16N8K16, GpuSpec
from ddbench.mla import HEAD_DIM_QK, HEAD_DIM_V
from ddbench.model.derived_counters import cta_shape, derived_kernel, phase
from ddbench.model.floor import OUT_ROW_BYTES, Q_ROW_BYTES, CaseShape
from ddbench.model.kernel_time import KernelModel, model_kernel

TRITON_KERNEL = "sglang_extend_attention_fwd"
NUM_WARPS = 8  # SGLang: 8 warps when the head dimension exceeds 64
K_TILE_BYTES_PER_KEY = HEAD_DIM_QK * 2
V_TILE_BYTES_PER_KEY = HEAD_DIM_V * 2
SLOT_BYTES = 8  # kv_indices are int64
MASK_BYTES = 1  # one bool per (draft token, key)
# A program first loads its qo_indptr and kv_indptr pairs (int32), and returns there if its row block is past
# its request's q_len; a working one then loads its mask_indptr (int64), in the same round trip here.
IDLE_OFFSETS_BYTES = 2 * 4 + 2 * 4
OFFSETS_BYTES = IDLE_OFFSETS_BYTES + 8
SMEM_READS_PER_TILE_BYTE = 2  # each operand byte is read by two warps of the 2 x 4 warp grid (estimate)
WAVEFRONT_BYTES = 128
INSTRUCTIONS_PER_MMA = 3  # an mma, its operand moves and the softmax around it (estimate)


@dataclass(frozen=True)
class TritonBlocks:
    block_m: int
    block_n: int

    @property
    def smem_bytes(self) -> int:
        """One K and one V tile live at once (num_stages = 1); Q stays in registers (estimate)."""
        return self.block_n * (K_TILE_BYTES_PER_KEY + V_TILE_BYTES_PER_KEY)


def triton_blocks(arch: str) -> TritonBlocks:
    """SGLang's BLOCK_M x BLOCK_N for a 576-wide head: sm_120 (99 KB of smem) 32 x 32, sm_90 32 x 64."""
    return TritonBlocks(32, 32) if arch == "sm_120" else TritonBlocks(32, 64)


def triton_grid(shape: CaseShape, blocks: TritonBlocks) -> tuple[int, int, int]:
    return (shape.batch_size, shape.heads, -(-shape.q_len // blocks.block_m))


def _compute(blocks: TritonBlocks, width: int) -> PhaseCounters:
    mma = 2 * blocks.block_m * blocks.block_n * width // FLOP_PER_MMA_M16N8K16
    tile = blocks.block_n * width * 2
    wavefronts = tile * (1 + SMEM_READS_PER_TILE_BYTE) // WAVEFRONT_BYTES
    return phase(mma=mma, wavefronts=wavefronts, instructions=INSTRUCTIONS_PER_MMA * mma)


def _load(nbytes: int) -> PhaseCounters:
    return phase(global_bytes=nbytes, instructions=max(1, nbytes // (16 * 32)))


def _tile_phases(blocks: TritonBlocks, first_load: int) -> list[PhaseCounters]:
    """One tile: the load its K load waits for (slots or mask bytes), then K, S, V, PV."""
    return [
        _load(first_load),
        _load(blocks.block_n * K_TILE_BYTES_PER_KEY),
        _compute(blocks, HEAD_DIM_QK),
        _load(blocks.block_n * V_TILE_BYTES_PER_KEY),
        _compute(blocks, HEAD_DIM_V),
    ]


@dataclass(frozen=True)
class _Program:
    """A working program's loops: its request's prefix tiles and draft tiles, and its rows."""

    prefix_tiles: int
    draft_tiles: int
    rows: int  # of its head in its row block

    def phases(self, blocks: TritonBlocks) -> list[PhaseCounters]:
        prefix = _tile_phases(blocks, blocks.block_n * SLOT_BYTES)
        draft = _tile_phases(blocks, self.rows * blocks.block_n * MASK_BYTES)
        return [_load(OFFSETS_BYTES)] + prefix * self.prefix_tiles + draft * self.draft_tiles

    def global_bytes(self, blocks: TritonBlocks) -> int:
        per_key = K_TILE_BYTES_PER_KEY + V_TILE_BYTES_PER_KEY
        streamed = (self.prefix_tiles + self.draft_tiles) * blocks.block_n * per_key
        slots = self.prefix_tiles * blocks.block_n * SLOT_BYTES
        mask = self.draft_tiles * self.rows * blocks.block_n * MASK_BYTES
        return OFFSETS_BYTES + streamed + slots + mask + self.rows * (Q_ROW_BYTES + OUT_ROW_BYTES)


def triton_counters(shape: CaseShape, blocks: TritonBlocks) -> KernelCounters:
    """The counters derived for the Triton kernel (the emulation's records): modeled, not counted."""
    grid = triton_grid(shape, blocks)
    # Per request: programs over its own q_len do its work; the rest of the grid's row blocks (a shorter
    # request of a ragged batch) return at once.
    working: Counter[_Program] = Counter()
    idle = 0
    for prefix, q_len in zip(shape.prefix_lens, shape.q_lens, strict=True):
        blocks_m = -(-q_len // blocks.block_m)
        for m in range(blocks_m):
            rows = min(blocks.block_m, q_len - m * blocks.block_m)
            working[_Program(-(-prefix // blocks.block_n), -(-q_len // blocks.block_n), rows)] += grid[1]
        idle += grid[1] * (grid[2] - blocks_m)
    shapes, sectors = [], 0
    for program, count in sorted(working.items(), key=lambda item: astuple(item[0])):
        nbytes = program.global_bytes(blocks)
        shapes.append(cta_shape(count, program.phases(blocks), nbytes))
        sectors += count * nbytes // SECTOR_BYTES
    if idle:
        shapes.append(cta_shape(idle, [_load(IDLE_OFFSETS_BYTES)], IDLE_OFFSETS_BYTES))
        sectors += idle * IDLE_OFFSETS_BYTES // SECTOR_BYTES
    # DRAM: the KV, Q and the output once, and the slots and draft-mask bytes the loops read once.
    side = sum(shape.prefix_lens) * SLOT_BYTES + sum(q * q for q in shape.q_lens) * MASK_BYTES
    unique = (shape.kv_bytes + shape.q_and_out_bytes + side) // SECTOR_BYTES
    return derived_kernel(
        TRITON_KERNEL, grid, NUM_WARPS * 32, blocks.smem_bytes, shapes, max(sectors, unique), unique
    )


def model_triton(shape: CaseShape, gpu: GpuSpec) -> KernelModel:
    """The modeled Triton kernel body on `gpu` (registers unknown: Triton's are not in a ptxas report). A
    fitted `gpu.triton_time_scale` multiplies every time of it, its DRAM and L2 bounds too: the factor is the
    whole kernel's, measured against the whole model."""
    model = model_kernel(triton_counters(shape, triton_blocks(gpu.arch)), gpu, None)
    scale = gpu.triton_time_scale
    if scale == 1.0:
        return model
    return dataclasses.replace(
        model,
        slowest_cta_us=model.slowest_cta_us * scale,
        slowest_cta_stages_us={k: v * scale for k, v in model.slowest_cta_stages_us.items()},
        schedule_us=model.schedule_us * scale,
        dram_us=model.dram_us * scale,
        l2_us=model.l2_us * scale,
    )
