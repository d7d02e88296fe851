"""Counters of the custom kernel derived by hand from its tiling (kernels/verify/verify_attn.cuh), for
fixtures and as a cross-check of the emulation's counts (pure).

This is arithmetic on the source, not a count: it assumes what the source says (32- or 48-row x 32-key
tiles, two cp.async stages, balanced ranges of work units per CTA as `ddbench.kernel.work_split` walks
them, a swizzled partial-S buffer: 64-bit accesses at 2 wavefronts) and estimates the instructions.
`ddbench profile` never uses it in place of emulated counters.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from ddbench.counters import SECTOR_BYTES, LaunchCounters, PhaseCounters
from ddbench.kernel.plan import (
    BLOCK_N,
    DEFAULT_DRAM_PACE,
    DEFAULT_SM_COUNT,
    KV_TILE_BYTES,
    PART_ROW_BYTES,
    LaunchPlan,
    PlanOptions,
    combine_smem_bytes,
    plan_launch,
)
from ddbench.kernel.work_split import cta_segments, request_extents
from ddbench.mla import KV_ROW_BYTES
from ddbench.model.derived_counters import cta_shape, derived_kernel, phase
from ddbench.model.floor import OUT_ROW_BYTES, Q_ROW_BYTES, CaseShape

TILE_BYTES = KV_TILE_BYTES  # 36,864: one tile of keys
TILE_WAVEFRONTS = TILE_BYTES // 128  # 288: its cp.async writes, 16 bytes a lane, conflict-free
CHUNKS_PER_ROW = KV_ROW_BYTES // 16  # 72
# Per warp, per tile:
MMA_S = 9 * 4  # 9 k-steps x 4 n8 tiles
MMA_PV = 2 * 16  # 2 k-steps x 16 n8 tiles
LDMATRIX_S = 9 * 2  # ldmatrix.x4
LDMATRIX_PV = 2 * 8  # ldmatrix.x4.trans
PARTIAL_STORES = 4  # st128: 2 pairs of n8 tiles x 2 row halves
REDUCE_LOADS = 16  # ld128: 2 pairs of n8 tiles x 2 row halves x 4 quarters
LDMATRIX_Q = 9  # per warp and segment: its 16 rows x 144 dims of Q
REDUCE_128 = 4  # wavefronts per 128-bit partial-S access: conflict-free in the swizzled layout


def cp_async_per_tile(threads: int) -> int:
    """Warp-wide cp.async.16 of one tile as load_tile issues them: thread t < 72n (n = threads / 72) copies
    chunk t % 72 of keys t / 72, + n, ...; a warp issues as many as its busiest lane (75 at 256 threads, 77
    at 384, against 72 for the bytes)."""
    at_once = threads // CHUNKS_PER_ROW
    active = at_once * CHUNKS_PER_ROW
    return sum(
        max(len(range(t // CHUNKS_PER_ROW, BLOCK_N, at_once)) for t in range(w, min(w + 32, active)))
        for w in range(0, active, 32)
    )


def _segment_phases(plan: LaunchPlan, tiles: int, rows: int, whole: bool) -> list[PhaseCounters]:
    warps = plan.threads // 32
    q_wavefronts = plan.block_m * Q_ROW_BYTES // 128
    out_bytes = rows * (OUT_ROW_BYTES if whole else PART_ROW_BYTES)
    phases = [
        phase(
            wavefronts=q_wavefronts + TILE_WAVEFRONTS,
            global_bytes=rows * Q_ROW_BYTES + TILE_BYTES,
            instructions=warps * 60,
        ),
        phase(wavefronts=4 * warps * LDMATRIX_Q, instructions=warps * 40),
    ]
    copies = cp_async_per_tile(plan.threads)
    for tile in range(tiles):
        # the next tile's copies (their writes, and a broadcast read of a staged slot index each) go with
        # this tile's scores: two barriers a tile
        prefetch = tile + 1 < tiles
        phases += [
            phase(
                mma=warps * MMA_S,
                wavefronts=warps * (4 * LDMATRIX_S + REDUCE_128 * PARTIAL_STORES)
                + (TILE_WAVEFRONTS + copies if prefetch else 0),
                global_bytes=TILE_BYTES if prefetch else 0,
                instructions=warps * 150,
            ),
            phase(
                mma=warps * MMA_PV,
                wavefronts=warps * (REDUCE_128 * REDUCE_LOADS + 4 * LDMATRIX_PV),
                shuffles=warps * 4,
                instructions=warps * 400,
            ),
        ]
    phases[-1] = dataclasses.replace(phases[-1], global_bytes=phases[-1].global_bytes + out_bytes)
    return phases


def _shared_totals(
    plan: LaunchPlan, segments: list[tuple[int, int]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Instruction and wavefront totals over (count, tiles) pairs of segments."""
    warps = plan.threads // 32
    tiles = sum(n * t for n, t in segments)
    count = sum(n for n, _ in segments)
    instructions = {
        # every tile and Q through cp.async
        "cp_async_16": cp_async_per_tile(plan.threads) * tiles
        + plan.block_m * Q_ROW_BYTES // 16 // 32 * count,
        "ldmatrix_x4": warps * (LDMATRIX_Q * count + LDMATRIX_S * tiles),
        "ldmatrix_x4_trans": warps * LDMATRIX_PV * tiles,
        "st128": warps * PARTIAL_STORES * tiles,
        "ld128": warps * REDUCE_LOADS * tiles,
    }
    wavefronts = {
        "cp_async_16": TILE_WAVEFRONTS * tiles + plan.block_m * Q_ROW_BYTES // 128 * count,
        "ldmatrix_x4": 4 * instructions["ldmatrix_x4"],
        "ldmatrix_x4_trans": 4 * instructions["ldmatrix_x4_trans"],
        "st128": REDUCE_128 * instructions["st128"],
        "ld128": REDUCE_128 * instructions["ld128"],
    }
    return instructions, wavefronts


def tiling_counters(
    shape: CaseShape, sm_count: int = DEFAULT_SM_COUNT, dram_pace: float | None = DEFAULT_DRAM_PACE
) -> LaunchCounters:
    """The counters of one call (verify kernel, then the combine of split row tiles), by hand, for a
    launch planned as on an RTX PRO 6000 unless told another GPU's SM count and DRAM pace; no clusters."""
    plan = plan_launch(
        shape.batch_size,
        shape.heads,
        shape.q_len,
        sum(shape.keys),
        PlanOptions(sm_count=sm_count, dram_pace=dram_pace, cluster=1),
    )
    kv_offsets, q_offsets = [0], [0]
    for k, q in zip(shape.keys, shape.q_lens, strict=True):
        kv_offsets.append(kv_offsets[-1] + k)
        q_offsets.append(q_offsets[-1] + q)
    requests = request_extents(shape.heads, kv_offsets, q_offsets, plan.block_m)
    per_cta: Counter[tuple[tuple[int, int, bool], ...]] = Counter()
    for segments in cta_segments(plan, requests):
        per_cta[
            tuple(
                (
                    s.tile_end - s.tile_begin,
                    min(plan.block_m, requests[s.request].rows - s.row_tile * plan.block_m),
                    s.slot < 0,
                )
                for s in segments
            )
        ] += 1
    shapes, sectors, pairs, parts = [], 0, [], 0
    for cta, count in sorted(per_cta.items(), reverse=True):
        # thread 0 finds the range from the offsets (two passes over the batch unless whole), then a barrier
        start = 16 if plan.whole_row_tiles else 32 * shape.batch_size + 16
        phases = [phase(global_bytes=start, instructions=10 * shape.batch_size)]
        phases += [ph for tiles, rows, whole in cta for ph in _segment_phases(plan, tiles, rows, whole)]
        moved = sum(p.global_bytes for p in phases)
        shapes.append(cta_shape(count, phases, moved))
        sectors += count * moved // SECTOR_BYTES
        pairs += [(count, tiles) for tiles, _, _ in cta]
        parts += count * sum(rows for _, rows, whole in cta if not whole)
    ws = parts * PART_ROW_BYTES
    unique = shape.kv_bytes + shape.q_and_out_bytes + ws
    merged_rows = sum(shape.q_lens) * shape.heads if plan.combines else 0
    instructions, wavefronts = _shared_totals(plan, pairs)
    verify = derived_kernel(
        "verify_attention_kernel",
        plan.grid,
        plan.threads,
        plan.smem_bytes,
        shapes,
        sectors,
        min(sectors, unique // SECTOR_BYTES),
        shared_instructions=instructions,
        shared_wavefronts=wavefronts,
        bytes_in_flight_at_wait=(TILE_BYTES,),
        barriers=plan.ctas + sum(n * (2 * t + 2) for n, t in pairs),
        mma=sum(n * t * (MMA_S + MMA_PV) for n, t in pairs) * plan.threads // 32,
    )
    if not plan.combines:
        return LaunchCounters((verify,))
    read = ws // max(1, merged_rows) + 1  # the parts of a row's tile, on average
    ctas = -(-merged_rows // plan.combine_rows)  # CTAs of combine_rows rows (the last one may have fewer)
    rows_a_cta = merged_rows // ctas  # on average
    moved = rows_a_cta * (read + OUT_ROW_BYTES)
    instructions_a_cta = 4 * rows_a_cta * (read // PART_ROW_BYTES + 1) * 12  # 4 quarters
    combine = derived_kernel(
        "combine_parts_kernel",
        (ctas, 1, 1),
        plan.combine_threads,
        combine_smem_bytes(plan.ctas),
        [cta_shape(ctas, [phase(global_bytes=moved, instructions=instructions_a_cta)], moved)],
        ctas * moved // SECTOR_BYTES,
        ctas * moved // SECTOR_BYTES,
    )
    return LaunchCounters((verify, combine))
