"""Which keys of which row tile each verify CTA works on: the kernel's own walk over the work units, mirrored
on the host (pure) for work shapes, the workspace and the tests. kernels/verify/verify_attn.cuh is the source;
tests/test_work_split.py holds this mirror to the kernel's own functions, run by the emulation
(kernels/verify/split_probe_emu.cpp), over many random batches and plans.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ddbench.kernel.plan import BLOCK_N, MAX_CLUSTER, LaunchPlan


@dataclass(frozen=True)
class Segment:
    request: int
    row_tile: int
    tile_begin: int  # key tiles [tile_begin, tile_end) of the request
    tile_end: int
    slot: int  # workspace part it writes, or -1: the row tile whole, written to the output


@dataclass(frozen=True)
class RequestExtent:
    keys: int
    q_len: int
    heads: int
    block_m: int  # rows per row tile: the plan's

    @property
    def prefix(self) -> int:
        return self.keys - self.q_len

    @property
    def rows(self) -> int:
        return self.q_len * self.heads

    @property
    def tiles(self) -> int:
        return -(-self.keys // BLOCK_N)

    @property
    def row_tiles(self) -> int:
        return -(-self.rows // self.block_m)

    @property
    def units(self) -> int:
        return self.row_tiles * self.tiles


def request_extents(
    heads: int, kv_offsets: list[int], q_offsets: list[int], block_m: int
) -> list[RequestExtent]:
    return [
        RequestExtent(kv_offsets[r + 1] - kv_offsets[r], q_offsets[r + 1] - q_offsets[r], heads, block_m)
        for r in range(len(q_offsets) - 1)
    ]


def unit_starts(requests: list[RequestExtent]) -> list[int]:
    """The first unit of each request over the batch, then the batch's units."""
    starts = [0]
    for g in requests:
        starts.append(starts[-1] + g.units)
    return starts


def range_start(cta: int, units: int, ctas: int) -> int:
    """First unit of CTA `cta`'s range: the units cut into `ctas` ranges as equal as integers allow."""
    return cta * units // ctas


def cta_of_unit(unit: int, units: int, ctas: int) -> int:
    """The CTA whose range holds `unit` (the last CTA starting at or before it; empty ranges come first)."""
    return ((unit + 1) * ctas - 1) // units


MERGE_NONE, MERGE_PART, MERGE_WHOLE = 0, 1, 2  # the kernel's ClusterMerge


def cluster_merge(plan: LaunchPlan, units: int, cta: int, tile_base: int, tiles: int) -> int:
    """How CTA `cta`'s cluster finishes the row tile of units [tile_base, tile_base + tiles): MERGE_NONE (each
    CTA writes its own part), MERGE_PART (one merged part, in the slot of the cluster's first CTA) or
    MERGE_WHOLE (the output). Only a cluster whose units all lie in that row tile merges."""
    if plan.cluster <= 1 or plan.whole_row_tiles or units < plan.ctas:
        return MERGE_NONE
    first = cta - cta % plan.cluster
    begin, end = range_start(first, units, plan.ctas), range_start(first + plan.cluster, units, plan.ctas)
    if begin < tile_base or end > tile_base + tiles:
        return MERGE_NONE
    return MERGE_WHOLE if (begin, end) == (tile_base, tile_base + tiles) else MERGE_PART


def cta_merges(plan: LaunchPlan, requests: list[RequestExtent]) -> list[int]:
    """Every verify CTA's cluster merge (MERGE_NONE for a CTA without work), as the kernel decides it from the
    row tile its range starts in."""
    starts = unit_starts(requests)
    units = starts[-1]
    merges = []
    for cta, segments in enumerate(cta_segments(plan, requests)):
        if not segments:
            merges.append(MERGE_NONE)
            continue
        s, g = segments[0], requests[segments[0].request]
        merges.append(cluster_merge(plan, units, cta, starts[s.request] + s.row_tile * g.tiles, g.tiles))
    return merges


def parts_of_row_tile(
    plan: LaunchPlan, requests: list[RequestExtent], request: int, row_tile: int
) -> list[int]:
    """The workspace slots the combine merges for a row tile, in CTA order; [] when one CTA, or one
    cluster, had it whole."""
    if plan.whole_row_tiles:
        return []
    units = sum(g.units for g in requests)
    tiles = requests[request].tiles
    first_unit = sum(g.units for g in requests[:request]) + row_tile * tiles
    first = cta_of_unit(first_unit, units, plan.ctas)
    last = cta_of_unit(first_unit + tiles - 1, units, plan.ctas)
    if first == last or cluster_merge(plan, units, first, first_unit, tiles) == MERGE_WHOLE:
        return []
    starts_inside = range_start(first, units, plan.ctas) != first_unit
    slots = []
    for c in range(first, last + 1):
        if range_start(c + 1, units, plan.ctas) == range_start(c, units, plan.ctas):
            continue  # an empty range
        if cluster_merge(plan, units, c, first_unit, tiles) != MERGE_NONE:
            if c % plan.cluster == 0:
                slots.append(2 * c)
            continue
        slots.append(2 * c + (c == first and starts_inside))
    return slots


def cta_segments(plan: LaunchPlan, requests: list[RequestExtent]) -> Iterator[list[Segment]]:
    """The segments of every verify CTA, in CTA order."""
    if plan.whole_row_tiles:
        for cta in range(plan.ctas):
            request, row_tile = divmod(cta, plan.whole_row_tiles)
            g = requests[request]
            yield [Segment(request, row_tile, 0, g.tiles, -1)] if row_tile < g.row_tiles else []
        return
    starts = unit_starts(requests)
    units = starts[-1]
    request = 0
    for cta in range(plan.ctas):
        begin, end = range_start(cta, units, plan.ctas), range_start(cta + 1, units, plan.ctas)
        segments = []
        u = begin
        while u < end:
            while starts[request + 1] <= u:
                request += 1
            g = requests[request]
            row_tile = (u - starts[request]) // g.tiles
            row_tile_base = starts[request] + row_tile * g.tiles
            tile_begin, tile_end = u - row_tile_base, min(g.tiles, end - row_tile_base)
            whole = tile_begin == 0 and tile_end == g.tiles
            segments.append(
                Segment(request, row_tile, tile_begin, tile_end, -1 if whole else 2 * cta + (u != begin))
            )
            u = row_tile_base + tile_end
        yield segments


@dataclass(frozen=True)
class Arrival:
    """One arrival at a split row tile under the final merge (the kernel's arrive_at_row_tile)."""

    counter: int  # the row tile's first counter: its first CTA x MAX_CLUSTER (lane j at counter + j)
    lane: int  # the lane it arrives at: 0 without clusters, else the CTA's rank
    expected: int  # arrivals that complete a lane: the row tile's parts
    listed: int  # CTAs from the row tile's first to its last (the merge's list)
    rows: int  # valid rows of the row tile
    parts: int = 1  # parts it arrives for: a straddling cluster's rank arrives for all its CTAs' parts there


def _parts_written(segments: list[Segment]) -> list[Segment]:
    """A CTA's segments that write a part, by slot (the order it arrives in)."""
    return sorted((s for s in segments if s.slot >= 0), key=lambda s: s.slot)


def cta_arrivals(plan: LaunchPlan, requests: list[RequestExtent]) -> list[list[Arrival]]:
    """Every verify CTA's arrivals, in the order the kernel makes them; [] for every CTA without the final
    merge. A CTA arrives for its own parts by slot, except in a straddling cluster (clusters, and a merge
    of none): there rank r arrives at lane r of each row tile its cluster's parts fall in, for all of them
    at once (the kernel's arrive_for_cluster)."""
    if not (plan.splits and plan.final_merge):
        return [[] for _ in range(plan.ctas)]
    starts = unit_starts(requests)
    units = starts[-1]
    segments = list(cta_segments(plan, requests))
    merges = cta_merges(plan, requests)

    def arrival(s: Segment, lane: int, parts: int) -> Arrival:
        g = requests[s.request]
        tile_base = starts[s.request] + s.row_tile * g.tiles
        first = cta_of_unit(tile_base, units, plan.ctas)
        last = cta_of_unit(tile_base + g.tiles - 1, units, plan.ctas)
        expected = len(parts_of_row_tile(plan, requests, s.request, s.row_tile))
        rows = min(plan.block_m, g.rows - s.row_tile * plan.block_m)
        return Arrival(first * MAX_CLUSTER, lane, expected, last - first + 1, rows, parts)

    out = []
    for cta in range(plan.ctas):
        rank = cta % plan.cluster
        if merges[cta] == MERGE_WHOLE:
            out.append([])
        elif merges[cta] == MERGE_PART or plan.cluster == 1:
            out.append([arrival(s, rank, 1) for s in _parts_written(segments[cta])])
        else:  # a straddling cluster: its CTAs' parts in CTA order, grouped by row tile
            firsts: dict[tuple[int, int], Segment] = {}  # each row tile's first part (dicts keep order)
            parts: dict[tuple[int, int], int] = {}
            for c in range(cta - rank, cta - rank + plan.cluster):
                for s in _parts_written(segments[c]):
                    firsts.setdefault((s.request, s.row_tile), s)
                    parts[s.request, s.row_tile] = parts.get((s.request, s.row_tile), 0) + 1
            out.append([arrival(s, rank, parts[key]) for key, s in firsts.items()])
    return out


def last_arrivals(arrivals: list[list[Arrival]]) -> dict[int, int]:
    """The CTA that arrives last at each counter when CTAs run one after another in index order (as the
    emulation runs them on one worker, and the model assumes): the one that merges that lane's rows."""
    last: dict[int, int] = {}
    for cta, mine in enumerate(arrivals):
        for a in mine:
            last[a.counter + a.lane] = cta
    return last
