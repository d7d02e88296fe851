"""The verify kernel's work split (mirrored by ddbench.kernel.work_split): balanced ranges, every unit once,
and the combine finds exactly the parts the CTAs wrote. Ragged batches: a long request is no tail."""

from __future__ import annotations

import itertools
import random

import pytest

from ddbench.kernel.plan import MAX_LISTED_CTAS, PlanOptions, plan_launch
from ddbench.kernel.work_split import (
    MERGE_NONE,
    MERGE_WHOLE,
    RequestExtent,
    cta_merges,
    cta_segments,
    parts_of_row_tile,
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
