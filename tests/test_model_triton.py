"""SGLang's Triton kernel, modeled from its grid and traffic: grid sizes, blocks per arch, bytes."""

from __future__ import annotations

import pytest

from ddbench.model.floor import CaseShape
from ddbench.model.gpus import H200, RTX_PRO_6000
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
    assert triton_counters(shape, triton_blocks("sm_120"))["ctas"] == grid[0] * grid[1] * grid[2]


def test_sglang_picks_32_by_32_on_sm_120_and_32_by_64_on_sm_90():
    assert (triton_blocks("sm_120").block_m, triton_blocks("sm_120").block_n) == (32, 32)
    assert (triton_blocks("sm_90").block_m, triton_blocks("sm_90").block_n) == (32, 64)


def test_every_program_streams_its_whole_prefix_and_dram_sees_it_once():
    shape = CaseShape((4096,), 9, 8)
    doc = triton_counters(shape, triton_blocks("sm_120"))
    tiles = -(-(4096 + 9) // 32)
    per_program = tiles * 32 * (1152 + 1024) + 9 * (1152 + 1024)
    assert doc["totals"]["global"]["sectors"] == 8 * per_program // 32
    assert doc["totals"]["global"]["unique_sectors"] == shape.compulsory_bytes // 32
    assert len(doc["cta_shapes"][0]["phases"]) == 4 * tiles  # load K, S, load V, PV per tile


def test_one_program_per_sm_from_its_shared_memory():
    for gpu in (RTX_PRO_6000, H200):
        k = model_triton(CaseShape((4096,), 9, 8), gpu)
        assert k.occupancy.by_smem == 1 and k.occupancy.ctas_per_sm == 1


def test_the_modeled_triton_time_grows_with_the_prefix_it_streams_per_program():
    short = model_triton(CaseShape((1024,), 9, 8), RTX_PRO_6000).modeled_us
    long = model_triton(CaseShape((4096,), 9, 8), RTX_PRO_6000).modeled_us
    assert long == pytest.approx(short * (4096 + 9 + 31) // 32 / ((1024 + 9 + 31) // 32), rel=0.02)
