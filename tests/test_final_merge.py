"""The final merge: split row tiles merged in the verify kernel by the last CTA to arrive at each lane of the
row tile's counters (kernels/verify/verify_attn.cuh, arrive_at_row_tile), instead of the combine kernel.

Whichever CTA arrives last, the rows are merged from every part in CTA order with the combine's arithmetic:
the output is the combine's bit for bit, on one emulation worker or several (real OS threads, real atomics),
and the counters are left zero for the next launch.
"""

from __future__ import annotations

import pytest
import torch

from ddbench.backends.cuda_emu import CudaEmuBackend, KernelEmulationError
from ddbench.inputs import generate_inputs
from ddbench.kernel.plan import PlanOptions, plan_launch
from ddbench.kernel.work_split import (
    MERGE_NONE,
    cta_arrivals,
    cta_merges,
    last_arrivals,
    parts_of_row_tile,
    request_extents,
)
from ddbench.suite import parse_suite


def case_of(**fields):
    entry = {"label": "m", "seed": 5, "model": "kimi-k2.6", "layout": {"tp": 8}, "batch_size": 1}
    entry.update(fields)
    return parse_suite({"name": "t", "cases": [entry]}, "t").cases[0]


RAGGED = {"batch_size": 3, "prefix": [700, 0, 2100], "tree": {"kind": "ddtree", "budget": 8}}
SHAPES = [
    (RAGGED, {"ctas": 24, "cluster": 8}),  # every cluster straddles row tiles
    (RAGGED, {"ctas": 16, "cluster": 2}),
    (RAGGED, {"ctas": 12, "cluster": 1}),  # no clusters: one CTA merges each row tile whole
    ({"prefix": 37, "tree": {"kind": "chain", "length": 1}}, {"ctas": 12, "cluster": 1}),  # empty ranges
    (
        {"model": "deepseek-v3", "prefix": 300, "tree": {"kind": "chain", "length": 40}},
        {"ctas": 6, "cluster": 2},
    ),
    ({"prefix": 2000, "tree": {"kind": "ddtree", "budget": 8}}, {"ctas": 30, "cluster": 5, "row_groups": 3}),
]


@pytest.mark.parametrize(("fields", "plan"), SHAPES)
def test_the_final_merge_is_the_combine_bit_for_bit(fields, plan):
    x = generate_inputs(case_of(**fields))
    lses, outs = {}, {}
    for final in (False, True):
        backend = CudaEmuBackend(final_merge=final, **plan)
        launch = backend.marshaled_launch(x)
        assert launch.plan.combines == (not final) and launch.plan.final_merge == final
        assert launch.plan.combine_halves == 1  # (two halves would add the parts in another order)
        lses[final] = torch.full((x.q_extend.shape[0], x.q_extend.shape[1]), float("nan"))
        run = backend.run_traced(x, lses[final], counters=True, sanitize=True)
        assert run.sanitizer.clean, run.sanitizer.summary()
        assert [k.name for k in run.counters.kernels] == (["verify"] if final else ["verify", "combine"])
        outs[final] = run.out.clone()
        x.fresh_output()
    assert torch.equal(outs[True].view(torch.int16), outs[False].view(torch.int16))
    assert torch.equal(lses[True], lses[False])


@pytest.mark.parametrize("workers", [2, 4])
def test_any_cta_may_arrive_last(workers):
    """On several OS threads the last arrival at a lane is whichever CTA finishes last: the same bits."""
    x = generate_inputs(case_of(**RAGGED))
    one = CudaEmuBackend(ctas=24, cluster=4, workers=1).run(x).clone()
    for _ in range(3):
        x.fresh_output()
        assert torch.equal(CudaEmuBackend(ctas=24, cluster=4, workers=workers).run(x), one)


def test_the_counters_are_left_zero_for_the_next_launch():
    x = generate_inputs(case_of(**RAGGED))
    backend = CudaEmuBackend(ctas=24, cluster=8)
    launch = backend.prepare(x)
    first = launch().clone()
    counters = launch.prepared.arrivals
    assert counters is not None and counters.numel() == 24 * 8 and not bool(counters.any())
    x.o_extend.fill_(float("nan"))  # the same prepared launch again, on the same counters
    assert torch.equal(launch(), first)


def test_an_arrival_past_the_parts_stops_the_launch():
    """Counters another launch left behind (never zero again after a killed launch): the kernel traps
    rather than merging before every part is in."""
    x = generate_inputs(case_of(**RAGGED))
    backend = CudaEmuBackend(ctas=24, cluster=8)
    launch = backend.prepare(x)
    launch.prepared.arrivals.fill_(50)
    with pytest.raises(KernelEmulationError, match="more arrivals at a row tile than it has parts"):
        launch()


def test_each_lane_is_merged_by_its_last_arrival():
    """bs1 q9 p32k on an RTX PRO 6000: 2 row tiles of 80 CTAs in clusters of 8, 10 parts each; rank j of a
    row tile's last cluster arrives last at lane j and merges rows j, j + 8, ... of it."""
    plan = plan_launch(1, 8, 9, 32777, PlanOptions(dram_pace=20.21))
    assert (plan.ctas, plan.cluster, plan.final_merge) == (160, 8, True)
    requests = request_extents(8, [0, 32777], [0, 9], plan.block_m)
    arrivals = cta_arrivals(plan, requests)
    assert all(len(a) == 1 and a[0].lane == cta % 8 for cta, a in enumerate(arrivals))
    assert {a[0].expected for a in arrivals} == {len(parts_of_row_tile(plan, requests, 0, 0))} == {10}
    assert sorted(set(last_arrivals(arrivals).values())) == [*range(72, 80), *range(152, 160)]
    assert plan_launch(1, 8, 9, 32777, PlanOptions(dram_pace=20.21, final_merge=False)).combines


def test_a_straddling_clusters_ranks_share_the_merge():
    """Clusters that straddle row tiles (a ragged batch: the plan sees shapes, not lengths) write their parts
    whole; rank j of each arrives for all of them at lane j, so the ranks of a row tile's last cluster merge
    it between them, rows j, j + 8, ... each, where before its last CTA merged every row alone. The CTAs
    that read parts back in the emulation are those the host's mirror names, one per lane."""
    x = generate_inputs(case_of(**RAGGED))
    backend = CudaEmuBackend(ctas=24, cluster=8, workers=1)
    launch = backend.marshaled_launch(x)
    k = launch.kernel
    requests = request_extents(k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist(), launch.plan.block_m)
    assert set(cta_merges(launch.plan, requests)) == {MERGE_NONE}  # every cluster of 8 straddles here
    arrivals = cta_arrivals(launch.plan, requests)
    last = last_arrivals(arrivals)
    by_row_tile: dict[int, set[int]] = {}
    for counter, cta in last.items():
        by_row_tile.setdefault(counter - counter % 8, set()).add(cta)
    assert by_row_tile and all(len(ctas) == 8 for ctas in by_row_tile.values())  # 8 ranks a row tile
    assert any(a.parts > 1 for mine in arrivals for a in mine)
    run = backend.run_traced(x, counters=True, sanitize=True)
    assert run.sanitizer.clean, run.sanitizer.summary()
    read_back = set()
    for cta, shape in enumerate(run.counters.kernel("verify").cta_shapes):
        atomics = [i for i, ph in enumerate(shape.phases) if ph.instructions.get("atom_global", 0)]
        # after its first arrival, more than another arrival's 4-byte atomic: parts read back
        if atomics and any(ph.global_bytes > 64 for ph in shape.phases[atomics[0] + 1 :]):
            read_back.add(cta)
    assert read_back == set(last.values())
