"""Counters of the custom kernel derived by hand from its tiling (kernels/verify/verify_attn.cuh), for
fixtures and as a cross-check of the emulation's counts (pure).

This is arithmetic on the source, not a count: it assumes what the source says (32 x 32 tiles, two cp.async
stages, a 128-byte row stride in the partial-S buffer) and what ptxas is assumed to do (the two adjacent
fp32 partial-S stores and reduce loads become 64-bit accesses: 4-way conflicts per half-warp, 8 wavefronts
where 2 would do). `ddbench profile` never uses it in place of emulated counters.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ddbench.kernel.plan import BLOCK_M, BLOCK_N, COMBINE_THREADS, SMEM_BYTES, THREADS, plan_launch
from ddbench.mla import HEAD_DIM_V, KV_ROW_BYTES
from ddbench.model.counters_input import SECTOR_BYTES
from ddbench.model.floor import OUT_ROW_BYTES, Q_ROW_BYTES, CaseShape

WARPS = THREADS // 32
TILE_BYTES = BLOCK_N * KV_ROW_BYTES  # 36,864: one stage
CP_ASYNC_PER_TILE = TILE_BYTES // 16 // 32  # 72 warp-wide cp.async.16 per tile (4 wavefronts each)
MMA_S = WARPS * 9 * 4  # 288: 9 k-steps x 4 n8 tiles per warp
MMA_PV = WARPS * 2 * 16  # 256: 2 k-steps x 16 n8 tiles per warp
LDMATRIX_S = WARPS * 9 * 2  # 144 ldmatrix.x4
LDMATRIX_PV = WARPS * 2 * 8  # 128 ldmatrix.x4.trans
PARTIAL_STORES = WARPS * 8  # st64: 4 n8 tiles x 2 row halves per warp
REDUCE_LOADS = WARPS * 32  # ld64: 4 n8 tiles x 2 row halves x 4 quarters per warp
CONFLICTED_64 = 8  # wavefronts per conflicted 64-bit access (2 when conflict-free)
WS_ROW_BYTES = HEAD_DIM_V * 4  # fp32 partial output row


def _phase(
    mma: int = 0, wavefronts: int = 0, global_bytes: int = 0, shuffles: int = 0, instructions: int = 0
):
    return {
        "mma": mma,
        "shared_wavefronts": wavefronts,
        "global_bytes": global_bytes,
        "shuffles": shuffles,
        "warp_instructions": instructions,
    }


def _verify_phases(tiles: int, rows: int, splits: int) -> list[dict[str, int]]:
    out_bytes = rows * (WS_ROW_BYTES + 4 if splits > 1 else OUT_ROW_BYTES)
    if tiles == 0:
        return [_phase(global_bytes=out_bytes, instructions=WARPS * 40)]
    phases = [
        _phase(wavefronts=4 * CP_ASYNC_PER_TILE, global_bytes=BLOCK_M * Q_ROW_BYTES, instructions=WARPS * 40),
        _phase(wavefronts=4 * 72 + 4 * CP_ASYNC_PER_TILE, global_bytes=TILE_BYTES, instructions=WARPS * 60),
    ]
    for tile in range(tiles):
        prefetch = TILE_BYTES if tile + 1 < tiles else 0
        phases += [
            _phase(
                wavefronts=4 * CP_ASYNC_PER_TILE if prefetch else 0,
                global_bytes=prefetch,
                instructions=WARPS * 30,
            ),
            _phase(
                mma=MMA_S,
                wavefronts=4 * LDMATRIX_S + CONFLICTED_64 * PARTIAL_STORES,
                instructions=WARPS * 120,
            ),
            _phase(
                mma=MMA_PV,
                wavefronts=CONFLICTED_64 * REDUCE_LOADS + 4 * LDMATRIX_PV,
                shuffles=WARPS * 4,
                instructions=WARPS * 400,
            ),
        ]
    phases.append(_phase(global_bytes=out_bytes, shuffles=WARPS * 4, instructions=WARPS * 80))
    return phases


def _shared_totals(ctas: list[tuple[int, int]]) -> dict[str, Any]:
    """Instruction and wavefront totals over (count, tiles) pairs of CTAs."""
    busy = [(n, t) for n, t in ctas if t > 0]
    tiles = sum(n * t for n, t in busy)
    loads = sum(n * (t + 1) for n, t in busy)  # Q and every tile through cp.async
    instructions = {
        "cp_async_16": CP_ASYNC_PER_TILE * loads,
        "ldmatrix_x4": sum(n * 72 for n, _ in busy) + LDMATRIX_S * tiles,
        "ldmatrix_x4_trans": LDMATRIX_PV * tiles,
        "st64": PARTIAL_STORES * tiles,
        "ld64": REDUCE_LOADS * tiles,
    }
    wavefronts = {
        "cp_async_16": 4 * instructions["cp_async_16"],
        "ldmatrix_x4": 4 * instructions["ldmatrix_x4"],
        "ldmatrix_x4_trans": 4 * instructions["ldmatrix_x4_trans"],
        "st64": CONFLICTED_64 * instructions["st64"],
        "ld64": CONFLICTED_64 * instructions["ld64"],
    }
    conflicts = (CONFLICTED_64 - 2) * (instructions["st64"] + instructions["ld64"])
    return {"instructions": instructions, "wavefronts": wavefronts, "bank_conflicts": conflicts}


def tiling_counters(shape: CaseShape, sm_count: int = 188) -> dict[str, Any]:
    """The counters document of one call (verify kernel, then the combine when split), derived by hand."""
    keys = [p + shape.q_len for p in shape.prefix_lens]
    plan = plan_launch(shape.batch_size, shape.heads, shape.q_len, sum(keys), sm_count=sm_count)
    rows = shape.q_len * shape.heads
    per_cta = Counter()
    for k in keys:
        tiles = -(-k // BLOCK_N)
        per_split = -(-tiles // plan.num_splits)
        for s in range(plan.num_splits):
            mine = max(0, min(per_split, tiles - s * per_split))
            for rt in range(plan.row_tiles):
                per_cta[(mine, min(BLOCK_M, rows - rt * BLOCK_M))] += 1
    shapes, sectors, pairs = [], 0, []
    for (tiles, cta_rows), count in sorted(per_cta.items(), reverse=True):
        phases = _verify_phases(tiles, cta_rows, plan.num_splits)
        moved = sum(p["global_bytes"] for p in phases)
        shapes.append({"count": count, "example_cta": [0, 0, 0], "phases": phases, "global_bytes": moved})
        sectors += count * moved // SECTOR_BYTES
        pairs.append((count, tiles))
    ws = shape.batch_size * rows * (WS_ROW_BYTES + 4) * plan.num_splits if plan.num_splits > 1 else 0
    q_reads = plan.num_splits * shape.batch_size * rows * Q_ROW_BYTES  # every split re-reads its Q rows
    unique = shape.kv_bytes + shape.q_and_out_bytes + ws if plan.num_splits > 1 else shape.compulsory_bytes
    if plan.num_splits > 1:
        unique -= shape.batch_size * rows * OUT_ROW_BYTES  # the combine writes the output
    verify = {
        "name": "verify_attention_kernel",
        "grid": list(plan.grid),
        "threads_per_cta": THREADS,
        "ctas": plan.ctas,
        "dynamic_smem_bytes": SMEM_BYTES,
        "derived": "by hand from the kernel's tiling (not emulated)",
        "totals": {
            "barriers": sum(n * (3 * t + 2 if t else 0) for n, t in pairs),
            "mma": sum(n * t * (MMA_S + MMA_PV) for n, t in pairs),
            "global": {
                "sectors": max(sectors, q_reads // SECTOR_BYTES),
                "unique_sectors": unique // SECTOR_BYTES,
            },
            "shared": _shared_totals(pairs),
            "cp_async": {"waits": 0, "bytes_in_flight_at_wait": [TILE_BYTES], "late_waits": 0},
        },
        "cta_shapes": shapes,
    }
    kernels = [verify]
    if plan.num_splits > 1:
        total_rows = shape.batch_size * rows
        read = plan.num_splits * (WS_ROW_BYTES + 4)
        kernels.append(
            {
                "name": "combine_parts_kernel",
                "grid": [total_rows, 1, 1],
                "threads_per_cta": COMBINE_THREADS,
                "ctas": total_rows,
                "dynamic_smem_bytes": 0,
                "derived": "by hand from the kernel's tiling (not emulated)",
                "totals": {
                    "global": {
                        "sectors": total_rows * (read + OUT_ROW_BYTES) // SECTOR_BYTES,
                        "unique_sectors": total_rows * (read + OUT_ROW_BYTES) // SECTOR_BYTES,
                    },
                    "shared": {"instructions": {}, "wavefronts": {}, "bank_conflicts": 0},
                },
                "cta_shapes": [
                    {
                        "count": total_rows,
                        "example_cta": [0, 0, 0],
                        "global_bytes": read + OUT_ROW_BYTES,
                        "phases": [
                            _phase(global_bytes=read + OUT_ROW_BYTES, instructions=4 * plan.num_splits * 12)
                        ],
                    }
                ],
            }
        )
    return {"kernels": kernels}
