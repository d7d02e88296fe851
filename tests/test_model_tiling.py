"""Counters derived by hand from the kernel's tiling: the launch the issue describes, and valid documents."""

from __future__ import annotations

from ddbench.counters import parse_counters
from ddbench.gpus import RTX_PRO_6000
from ddbench.kernel.plan import smem_bytes
from ddbench.model.floor import CaseShape
from ddbench.model.kernel_time import model_launch
from ddbench.model.tiling_counters import tiling_counters

REGS = {"verify_attention_kernel": 168, "combine_parts_kernel": 40}


def test_kimi_tp8_q9_at_4k_is_one_wave_of_97_ctas_then_a_combine():
    doc = tiling_counters(CaseShape((4096,), 9, 8))
    verify, combine = doc.kernels
    assert verify.grid == (97, 1, 1)  # 387 units (3 row tiles x 129 key tiles), 4 per CTA
    # 32-row CTAs: a short launch
    assert (verify.ctas, verify.threads_per_cta, verify.dynamic_smem_bytes) == (97, 256, smem_bytes(2))
    assert combine.ctas == 72  # one per (token, head) row
    m = model_launch(doc, RTX_PRO_6000, REGS)
    assert [k.waves for k in m.kernels] == [1, 1]


def test_short_row_tiles_run_whole_with_no_combine():
    doc = tiling_counters(CaseShape((21,), 9, 8))
    assert [k.name for k in doc.kernels] == ["verify_attention_kernel"]
    assert doc.kernels[0].grid[0] == 3  # one CTA per row tile


def test_a_long_launch_has_48_row_ctas():
    verify = tiling_counters(CaseShape((32768,), 9, 8)).kernels[0]
    # 162 CTAs keep pace with the RTX PRO 6000's DRAM (2,050 units over 1,025 / (3 x 20.21 x 1.15) - 2 = 12.7
    # tiles a CTA, its fixed cost counted); all 188 SMs on a GPU whose pace is not given
    assert (verify.ctas, verify.threads_per_cta, verify.dynamic_smem_bytes) == (162, 384, smem_bytes(3))
    assert tiling_counters(CaseShape((32768,), 9, 8), dram_pace=None).kernels[0].ctas == 188
    # 2 row tiles x 1025 key tiles x 12 warps x (S + PV)
    assert verify.totals.mma == 2 * 1025 * 12 * (36 + 32)


def test_every_cta_is_in_one_shape_and_the_kv_is_read_once():
    shape = CaseShape((4096, 100, 32768), 9, 8)
    verify = tiling_counters(shape).kernels[0]
    assert sum(s.count for s in verify.cta_shapes) == verify.ctas
    assert verify.unique_bytes >= shape.kv_bytes


def test_derived_counters_are_documents_the_reader_takes_back():
    doc = tiling_counters(CaseShape((4096, 100), 9, 8))
    assert parse_counters(doc.to_json(), "derived.json") == doc
