"""The verify kernel's work split (mirrored by ddbench.kernel.work_split): balanced ranges, every unit once,
and the combine finds exactly the parts the CTAs wrote. Ragged batches: a long request is no tail. The
mirror is held to the kernel's own split code, run by the emulation (kernels/verify/split_probe_emu.cpp),
over many random batches and plans."""

from __future__ import annotations

import ctypes
import itertools
import random

import numpy as np
import pytest

from ddbench.kernel.build import build_emulation_library, find_kernels_dir
from ddbench.kernel.plan import MAX_LISTED_CTAS, LaunchPlan, PlanOptions, plan_launch
from ddbench.kernel.work_split import (
    MERGE_NONE,
    MERGE_WHOLE,
    RequestExtent,
    cta_merges,
    cta_of_unit,
    cta_segments,
    parts_of_row_tile,
    unit_starts,
)


def _batch(rng: random.Random, heads: int, block_m: int) -> list[RequestExtent]:
    requests = []
    for _ in range(rng.randint(1, 9)):
        q_len = rng.choice([1, 5, 9, 17, 33, 65])
        requests.append(RequestExtent(rng.choice([0, 21, 700, 4096, 20000]) + q_len, q_len, heads, block_m))
    return requests


@pytest.mark.parametrize("seed", range(40))
def test_ranges_are_balanced_and_cover_every_unit_once(seed):
    rng = random.Random(seed)
    heads, row_groups = rng.choice([8, 16, 64]), rng.choice([2, 3])
    requests = _batch(rng, heads, 16 * row_groups)
    units = sum(g.units for g in requests)
    ctas = rng.choice([1, 2, 7, 64, 188, min(units + 5, MAX_LISTED_CTAS)])  # the launch lists no more
    q_len = max(g.q_len for g in requests)
    plan = plan_launch(len(requests), heads, q_len, 1, PlanOptions(ctas=ctas, row_groups=row_groups))
    seen: dict[tuple[int, int], list[tuple[int, int]]] = {}
    written: dict[tuple[int, int], list[int]] = {}
    slots = set()
    for cta, segments in enumerate(cta_segments(plan, requests)):
        mine = sum(s.tile_end - s.tile_begin for s in segments)
        assert mine in (units // ctas, -(-units // ctas))  # no CTA holds more than its share
        assert all(s.tile_end > s.tile_begin for s in segments)
        partial = [s for s in segments if s.slot >= 0]
        assert len(partial) == len({s.slot for s in partial}) <= 2  # distinct slots, at most two
        assert all(s.slot == 2 * cta + (i > 0) for i, s in enumerate(segments) if s.slot >= 0)  # 2c: first
        slots.update(s.slot for s in partial)
        for s in segments:
            seen.setdefault((s.request, s.row_tile), []).append((s.tile_begin, s.tile_end))
            if s.slot >= 0:
                written.setdefault((s.request, s.row_tile), []).append(s.slot)
    for r, g in enumerate(requests):
        for rt in range(g.row_tiles):
            pieces = sorted(seen[(r, rt)])
            assert pieces[0][0] == 0 and pieces[-1][1] == g.tiles  # every key tile of it, once, in order
            assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
            assert parts_of_row_tile(plan, requests, r, rt) == written.get((r, rt), [])


@pytest.mark.parametrize("seed", range(40))
def test_clusters_merge_only_inside_one_row_tile_and_the_combine_finds_what_is_left(seed):
    """A cluster whose units lie in one row tile merges (every CTA of it alike, one segment each); the
    combine then finds the merged part in the slot of the cluster's first CTA, no part of the others, and
    nothing of a cluster that covered the row tile whole."""
    rng = random.Random(seed)
    heads, row_groups, cluster = rng.choice([8, 16]), rng.choice([2, 3]), rng.randint(2, 8)
    requests = _batch(rng, heads, 16 * row_groups)
    q_len = max(g.q_len for g in requests)
    ctas = cluster * rng.choice([1, 2, 5, 23])
    plan = plan_launch(
        len(requests), heads, q_len, 1, PlanOptions(ctas=ctas, row_groups=row_groups, cluster=cluster)
    )
    merges = cta_merges(plan, requests)
    written: dict[tuple[int, int], list[int]] = {}
    for cta, segments in enumerate(cta_segments(plan, requests)):
        first = cta - cta % cluster
        assert merges[cta] == merges[first]  # the cluster decides alike
        if merges[cta] != MERGE_NONE:
            assert len(segments) == 1 and segments[0].slot == 2 * cta
        for s in segments:
            if s.slot < 0 or merges[cta] == MERGE_WHOLE or (merges[cta] != MERGE_NONE and cta != first):
                continue
            written.setdefault((s.request, s.row_tile), []).append(s.slot)
    for r, g in enumerate(requests):
        for rt in range(g.row_tiles):
            assert parts_of_row_tile(plan, requests, r, rt) == written.get((r, rt), [])


def test_whole_row_tiles_are_one_segment_each():
    requests = [RequestExtent(30, 9, 8, 32), RequestExtent(60, 1, 8, 32)]
    plan = plan_launch(2, 8, 9, 90, PlanOptions(whole_row_tiles=True))
    per_cta = list(cta_segments(plan, requests))
    assert len(per_cta) == plan.ctas == 6
    assert [len(s) for s in per_cta] == [1, 1, 1, 1, 0, 0]  # the 1-token request has one row tile
    assert all(
        s.slot == -1 and (s.tile_begin, s.tile_end) == (0, requests[s.request].tiles)
        for c in per_cta
        for s in c
    )
    assert parts_of_row_tile(plan, requests, 0, 0) == []


def test_a_long_request_of_a_ragged_batch_gets_its_share_of_ctas():
    """32k + 3 x 1k keys: the long request's work spreads over most CTAs instead of a fixed 1/bs of them."""
    plan = plan_launch(4, 8, 9, sum(p + 9 for p in (32768, 1024, 1024, 1024)))
    requests = [RequestExtent(p + 9, 9, 8, plan.block_m) for p in (32768, 1024, 1024, 1024)]
    # 48-row tiles; the CTAs rounded down to a multiple of the 8 row tiles (which aligns ranges with row
    # tiles only in a batch of equal requests: here it only gives up 4 of the 188)
    assert plan.ctas == 184
    loads = [sum(s.tile_end - s.tile_begin for s in c) for c in cta_segments(plan, requests)]
    assert max(loads) - min(loads) <= 1
    holding_long = sum(1 for c in cta_segments(plan, requests) if any(s.request == 0 for s in c))
    assert holding_long >= 0.9 * plan.ctas * requests[0].units / sum(g.units for g in requests)


# ------------------------------------------------------------------- the mirror against the kernel's code

PROBE = find_kernels_dir() / "verify" / "split_probe_emu.cpp"
WALK_HEADER, WALK_FIELDS, PLACE_HEADER = 2, 5, 3  # the probe's output layout (see its source)
_i32 = ctypes.POINTER(ctypes.c_int32)
_i64 = ctypes.POINTER(ctypes.c_int64)


@pytest.fixture(scope="module")
def split_probe() -> ctypes.CDLL:
    library = ctypes.CDLL(str(build_emulation_library([PROBE], "split_probe")))
    library.ddk_split_probe.argtypes = [_i32, _i32, _i32] + [ctypes.c_int] * 6
    library.ddk_split_probe.argtypes += [_i32, ctypes.c_int, _i64, ctypes.c_int, _i32, ctypes.c_int]
    library.ddk_split_probe.argtypes += [ctypes.c_char_p, ctypes.c_int]
    library.ddk_split_probe.restype = ctypes.c_int
    return library


def _kernel_split(library: ctypes.CDLL, plan: LaunchPlan, requests: list[RequestExtent]):
    """Every CTA's (merge, segments) and every row tile's (first CTA, last CTA, part slots), as the kernel's
    functions compute them from the batch's offsets."""
    heads = requests[0].heads
    q_offsets = np.cumsum([0] + [g.q_len for g in requests], dtype=np.int32)
    kv_offsets = np.cumsum([0] + [g.keys for g in requests], dtype=np.int32)
    slot_offsets = np.zeros(len(requests) + 1, dtype=np.int32)
    units = unit_starts(requests)[-1]
    row_tiles = [(r, t) for r, g in enumerate(requests) for t in range(g.row_tiles)]
    tile_rows = np.array([q_offsets[r] * heads + t * plan.block_m for r, t in row_tiles], dtype=np.int64)
    walk_capacity = min(len(row_tiles), -(-units // plan.ctas)) + 1
    walk = np.full(plan.ctas * (WALK_HEADER + WALK_FIELDS * walk_capacity), -7, dtype=np.int32)
    placed_capacity = min(plan.ctas, max(g.tiles for g in requests)) + 1  # a part holds a key tile or more
    placed = np.full(len(row_tiles) * (PLACE_HEADER + placed_capacity), -7, dtype=np.int32)
    error = ctypes.create_string_buffer(1024)
    code = library.ddk_split_probe(
        *(a.ctypes.data_as(_i32) for a in (q_offsets, kv_offsets, slot_offsets)),
        len(requests),
        heads,
        plan.ctas,
        plan.whole_row_tiles,
        plan.row_groups,
        plan.cluster,
        walk.ctypes.data_as(_i32),
        walk_capacity,
        tile_rows.ctypes.data_as(_i64),
        len(row_tiles),
        placed.ctypes.data_as(_i32),
        placed_capacity,
        error,
        len(error),
    )
    assert code == 0, error.value.decode()
    segments, merges = [], []
    for row in walk.reshape(plan.ctas, -1):
        merges.append(int(row[0]))
        assert row[1] <= walk_capacity
        fields = row[WALK_HEADER:].reshape(walk_capacity, WALK_FIELDS)[: row[1]]
        segments.append([tuple(int(v) for v in f) for f in fields])
    places = {}
    if not plan.whole_row_tiles:
        for (r, t), row in zip(row_tiles, placed.reshape(len(row_tiles), -1), strict=True):
            assert row[2] <= placed_capacity
            places[r, t] = (
                int(row[0]),
                int(row[1]),
                [int(v) for v in row[PLACE_HEADER : PLACE_HEADER + row[2]]],
            )
    return segments, merges, places


def _random_launch(rng: random.Random) -> tuple[LaunchPlan, list[RequestExtent]]:
    heads, row_groups = rng.choice([8, 16, 64]), rng.choice([2, 3])
    requests = _batch(rng, heads, 16 * row_groups)
    units = sum(g.units for g in requests)
    q_len = max(g.q_len for g in requests)
    kind = rng.choice(["split", "split", "cluster", "whole"])
    if kind == "whole":
        options = PlanOptions(whole_row_tiles=True, row_groups=row_groups)
    elif kind == "cluster":
        cluster = rng.randint(2, 8)
        options = PlanOptions(
            ctas=cluster * rng.choice([1, 2, 5, 23, 60]), row_groups=row_groups, cluster=cluster
        )
    else:
        ctas = rng.choice([1, 2, 7, 64, 188, min(units + 5, MAX_LISTED_CTAS)])
        options = PlanOptions(ctas=ctas, row_groups=row_groups, cluster=1)
    return plan_launch(len(requests), heads, q_len, 1, options), requests


@pytest.mark.parametrize("seed", range(8))
def test_the_mirror_splits_the_work_as_the_kernels_own_code_does(split_probe, seed):
    """25 random batches a seed (200 in all), each under a random plan (ranges of 1 CTA to more CTAs than
    units, clusters of 2-8, whole row tiles): each CTA's segments (request, row tile, key tiles, slot) and
    cluster merge from the kernel's first_range and segment_at, and each row tile's first and last CTA and
    its parts in CTA order from the combine's place_segment and list_parts (the final merge's list too),
    are the mirror's cta_segments, cta_merges, cta_of_unit and parts_of_row_tile."""
    rng = random.Random(1000 + seed)
    for _ in range(25):
        plan, requests = _random_launch(rng)
        segments, merges, places = _kernel_split(split_probe, plan, requests)
        mirrored = [
            [(s.request, s.row_tile, s.tile_begin, s.tile_end, s.slot) for s in cta]
            for cta in cta_segments(plan, requests)
        ]
        assert segments == mirrored, plan
        walked = [MERGE_NONE if not cta else m for cta, m in zip(segments, merges, strict=True)]
        assert walked == cta_merges(plan, requests), plan
        starts = unit_starts(requests)
        units = starts[-1]
        for (r, t), (first, last, slots) in places.items():
            first_unit, tiles = starts[r] + t * requests[r].tiles, requests[r].tiles
            assert (first, last) == (
                cta_of_unit(first_unit, units, plan.ctas),
                cta_of_unit(first_unit + tiles - 1, units, plan.ctas),
            ), (plan, r, t)
            assert slots == parts_of_row_tile(plan, requests, r, t), (plan, r, t)
