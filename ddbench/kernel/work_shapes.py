"""The verify kernel's CTAs grouped by work shape, from the launch plan alone: what a sampled traced launch
emulates (one CTA per shape, counted as many times as the shape has CTAs).

Two CTAs have the same shape when the kernel does the same work in them, instruction for instruction:
the same number of valid rows in their row tile, the same split mode (one split: bf16 output; more:
the fp32 workspace) and, tile by tile in order, the same number of valid keys and the same first draft
key inside the tile (the keys at or after the prefix read the tree mask). Everything the counters count
then agrees (instructions, bytes requested, shared-memory wavefronts, barriers, phases, cp.async waits)
except what depends on *which* global addresses are read: sectors per instruction may differ and the
launch's unique sectors can only be bounded from below by the sampled CTAs. docs/emulation.md.
Mirrors the tiling of kernels/verify/verify_attn.cuh (the tests compare it with a full emulation).
"""

from __future__ import annotations

from dataclasses import dataclass

from ddbench.kernel.plan import BLOCK_M, BLOCK_N, LaunchPlan


@dataclass(frozen=True)
class WorkShapes:
    representatives: tuple[int, ...]  # linear CTA index (x + gx * (y + gy * z)) of each shape's first CTA
    weights: tuple[int, ...]  # how many CTAs each stands for; they add up to the grid


def _tile_shape(tile: int, keys: int, prefix: int) -> tuple[int, int]:
    start = tile * BLOCK_N
    valid = max(0, min(BLOCK_N, keys - start))
    first_draft = min(BLOCK_N, max(0, prefix - start))
    return valid, first_draft


def verify_work_shapes(
    plan: LaunchPlan, heads: int, kv_offsets: list[int], q_offsets: list[int]
) -> WorkShapes:
    """Shapes of every CTA of the verify grid (split, row tile, request), in linear order of first CTA."""
    splits, row_tiles, batch = plan.grid
    first_of: dict[tuple[object, ...], int] = {}
    count: dict[tuple[object, ...], int] = {}
    for request in range(batch):
        keys = kv_offsets[request + 1] - kv_offsets[request]
        q_len = q_offsets[request + 1] - q_offsets[request]
        prefix, rows = keys - q_len, q_len * heads
        tiles = -(-keys // BLOCK_N)
        per_split = -(-tiles // plan.num_splits)
        for row_tile in range(row_tiles):
            valid_rows = max(0, min(BLOCK_M, rows - row_tile * BLOCK_M))
            for split in range(splits):
                begin, end = split * per_split, min(tiles, (split + 1) * per_split)
                work = tuple(_tile_shape(t, keys, prefix) for t in range(begin, end)) if valid_rows else ()
                shape = (valid_rows, plan.num_splits == 1, work)
                linear = split + splits * (row_tile + row_tiles * request)
                if shape not in first_of:
                    first_of[shape] = linear
                    count[shape] = 0
                count[shape] += 1
    order = sorted(first_of, key=first_of.__getitem__)
    return WorkShapes(tuple(first_of[s] for s in order), tuple(count[s] for s in order))
