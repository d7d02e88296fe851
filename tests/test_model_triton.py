"""SGLang's Triton kernel, modeled from its grid and traffic: grid sizes, blocks per arch, bytes."""

from __future__ import annotations

import pytest

from ddbench.gpus import H200, RTX_PRO_6000
from ddbench.model.floor import CaseShape
from ddbench.model.triton_model import model_triton, triton_blocks, triton_counters, triton_grid


@pytest.mark.parametrize(
    ("shape", "grid"),
    [
        (CaseShape((4096,), 9, 8), (1, 8, 1)),
        (CaseShape((4096,), 65, 8), (1, 8, 3)),
        (CaseShape((4096,) * 16, 9, 8), (16, 8, 1)),
        (CaseShape((4096,) * 4, 65, 16), (4, 16, 3)),
        (CaseShape((0,), 32, 8), (1, 8, 1)),
        (CaseShape((0,), 33, 8), (1, 8, 2)),
    ],
)
def test_the_grid_is_batch_by_heads_by_query_tiles(shape, grid):
    assert triton_grid(shape, triton_blocks("sm_120")) == grid
    assert triton_counters(shape, triton_blocks("sm_120")).ctas == grid[0] * grid[1] * grid[2]


def test_sglang_picks_32_by_32_on_sm_120_and_32_by_64_on_sm_90():
    assert (triton_blocks("sm_120").block_m, triton_blocks("sm_120").block_n) == (32, 32)
    assert (triton_blocks("sm_90").block_m, triton_blocks("sm_90").block_n) == (32, 64)


def test_every_program_streams_its_prefix_then_its_draft_keys_and_dram_sees_them_once():
    shape = CaseShape((4096,), 9, 8)
    doc = triton_counters(shape, triton_blocks("sm_120"))
    prefix_tiles, draft_tiles = 4096 // 32, 1  # two loops: the prefix's tiles, then the draft keys' own
    per_program = (
        24  # the qo_indptr and kv_indptr pairs (int32), mask_indptr (int64)
        + (prefix_tiles + draft_tiles) * 32 * (1152 + 1024)
        + prefix_tiles * 32 * 8  # each prefix tile's int64 pool slots
        + draft_tiles * 9 * 32  # each draft tile's mask bytes, a row per draft token
        + 9 * (1152 + 1024)
    )
    assert doc.sectors == 8 * per_program // 32
    side = 4096 * 8 + 9 * 9  # the slots and the draft mask, read once
    assert doc.unique_sectors == (shape.compulsory_bytes + side) // 32
    phases = doc.cta_shapes[0].phases
    assert len(phases) == 1 + 5 * (prefix_tiles + draft_tiles)  # offsets; per tile slots/mask, K, S, V, PV
    loads = [p.global_bytes for p in phases if p.global_bytes]
    assert loads[:4] == [24, 32 * 8, 32 * 1152, 32 * 1024]  # each waits for the one before it
    assert loads[-3:] == [9 * 32, 32 * 1152, 32 * 1024]  # the draft tile: its mask decides the K load


def test_a_short_prefix_pays_a_round_trip_per_dependent_load():
    """Prefix 21, q_len 9: one prefix tile and one draft tile, seven round trips in a row (no prefetch)."""
    doc = triton_counters(CaseShape((21,), 9, 8), triton_blocks("sm_120"))
    phases = doc.cta_shapes[0].phases
    assert sum(1 for p in phases if p.global_bytes) == 7
    assert sum(p.mma for p in phases) == 2 * (32 * 32 * (576 + 512) * 2 // 4096)


def test_one_program_per_sm_from_its_shared_memory():
    for gpu in (RTX_PRO_6000, H200):
        k = model_triton(CaseShape((4096,), 9, 8), gpu)
        assert k.occupancy.by_smem == 1 and k.occupancy.ctas_per_sm == 1


def test_the_modeled_triton_time_grows_with_the_prefix_it_streams_per_program():
    short = model_triton(CaseShape((1024,), 9, 8), RTX_PRO_6000).modeled_us
    long = model_triton(CaseShape((4096,), 9, 8), RTX_PRO_6000).modeled_us
    assert long == pytest.approx(short * (4096 // 32 + 1) / (1024 // 32 + 1), rel=0.02)


def test_a_fitted_triton_time_scale_multiplies_the_modeled_kernel():
    import dataclasses

    shape = CaseShape((4096,), 9, 8)
    plain = model_triton(shape, H200)
    scaled = model_triton(shape, dataclasses.replace(H200, triton_time_scale=2.5))
    assert scaled.modeled_us == pytest.approx(2.5 * plain.modeled_us) and scaled.limiter == plain.limiter
