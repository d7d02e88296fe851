"""The verify kernel's CTAs grouped by work shape, from the launch plan alone: what a sampled traced launch
emulates (one CTA per shape, counted as many times as the shape has CTAs).

Two CTAs have the same shape when the kernel does the same work in them, instruction for instruction: the
same segments in order, each as many requests after the one before it, with the same number of valid rows
in its row tile, the same output (the row tile whole to the output, or a part to the fp16 workspace) and,
tile by tile, the same number of valid keys, the same first draft key inside the tile (the keys at or
after the prefix read the tree mask) and the same number of mask words read per row; under the final merge,
the same arrivals and, where it arrives last (CTAs in index order, as one emulation worker runs them), the
same merge (parts, CTAs listed, rows).
Everything the counters count then agrees (instructions, bytes requested, shared-memory wavefronts, barriers,
phases, cp.async waits) except what depends on *which* global addresses are read: sectors per instruction
may differ and the launch's unique sectors can only be bounded by the sampled CTAs. docs/emulation.md.
Walks the work as kernels/verify/verify_attn.cuh does (ddbench.kernel.work_split; the tests compare the
shapes with a full emulation).
"""

from __future__ import annotations

from dataclasses import dataclass

from ddbench.kernel.plan import BLOCK_N, LaunchPlan
from ddbench.kernel.work_split import (
    MERGE_NONE,
    cta_arrivals,
    cta_merges,
    cta_segments,
    last_arrivals,
    request_extents,
)


@dataclass(frozen=True)
class WorkShapes:
    representatives: tuple[int, ...]  # CTA index of each shape's first CTA
    weights: tuple[int, ...]  # how many CTAs each stands for; they add up to the grid


def _tile_shape(tile: int, keys: int, prefix: int) -> tuple[int, int, int]:
    """Valid keys, the first draft key inside the tile, and the mask words per row it reads (as the
    kernel's fetch_mask_word: one or two, from draft column (start - prefix) / 32)."""
    start = tile * BLOCK_N
    valid = max(0, min(BLOCK_N, keys - start))
    first_draft = min(BLOCK_N, max(0, prefix - start))
    last = min(start + BLOCK_N, keys) - 1
    first_word = (start - prefix) // 32 if start > prefix else 0
    words = 0 if last < prefix else min(2, (last - prefix) // 32 - first_word + 1)
    return valid, first_draft, words


def verify_work_shapes(
    plan: LaunchPlan, heads: int, kv_offsets: list[int], q_offsets: list[int]
) -> WorkShapes:
    """Shapes of every CTA of the verify grid, in order of first CTA. With clusters the unit is a whole
    cluster (its CTAs run together): the shape of its CTAs in rank order, each of them a representative."""
    requests = request_extents(heads, kv_offsets, q_offsets, plan.block_m)
    merges = cta_merges(plan, requests)
    arrivals = cta_arrivals(plan, requests)
    last = last_arrivals(arrivals)
    first_of: dict[tuple[object, ...], int] = {}
    count: dict[tuple[object, ...], int] = {}
    members: list[tuple[object, ...]] = []
    for cta, segments in enumerate(cta_segments(plan, requests)):
        shape: list[object] = []
        previous = segments[0].request if segments else 0
        for s in segments:
            g = requests[s.request]
            valid_rows = min(plan.block_m, g.rows - s.row_tile * plan.block_m)
            tiles = tuple(_tile_shape(t, g.keys, g.prefix) for t in range(s.tile_begin, s.tile_end))
            # requests crossed since the previous segment: each reads that request's offsets
            shape.append((s.request - previous, valid_rows, s.slot < 0, tiles))
            previous = s.request
        if merges[cta] != MERGE_NONE:  # stages the part, then merges the rows of its rank
            shape.append((merges[cta], cta % plan.cluster))
        for a in arrivals[cta]:  # the final merge: its arrivals, and the lanes whose rows it merges
            won = last[a.counter + a.lane] == cta
            shape.append((a.lane, a.parts, won, a.expected if won else 0, a.listed if won else 0, a.rows))
        members.append(tuple(shape))
        if len(members) < plan.cluster:
            continue
        key, first = tuple(members), cta + 1 - len(members)
        members = []
        if key not in first_of:
            first_of[key] = first
            count[key] = 0
        count[key] += 1
    order = sorted(first_of, key=first_of.__getitem__)
    size = plan.cluster
    return WorkShapes(
        tuple(first_of[s] + r for s in order for r in range(size)),
        tuple(count[s] for s in order for _ in range(size)),
    )
