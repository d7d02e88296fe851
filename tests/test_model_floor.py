"""The floor: compulsory bytes over DRAM bandwidth, FLOPs over the tensor peak, on the design's figures."""

from __future__ import annotations

import pytest
from conftest import one_case

from ddbench.gpus import H200, RTX_PRO_6000
from ddbench.model.floor import CaseShape, floor

KIMI_TP8_HEADS = 64 // 8


def _kimi_q9(prefix: int) -> CaseShape:
    case = one_case(prefix=prefix)
    assert (case.q_len, case.heads_per_rank) == (9, KIMI_TP8_HEADS)
    return CaseShape.of(case)


def test_compulsory_bytes_and_flops_follow_the_formula():
    shape = CaseShape((4096, 100), 9, 8)
    kv = (4096 + 9 + 100 + 9) * 1152
    q_and_out = 2 * 9 * 8 * (1152 + 1024)
    assert shape.compulsory_bytes == kv + q_and_out
    assert shape.flops == 2176 * 72 * (4096 + 9) + 2176 * 72 * (100 + 9)


def test_prefix_4k_is_4_7_mb_of_kv_and_2_6_us_at_1_79_tb_s():
    shape = _kimi_q9(4096)
    assert round(shape.kv_bytes / 1e6, 1) == 4.7
    assert round(shape.kv_bytes / (RTX_PRO_6000.dram_gbs * 1e3), 1) == 2.6
    # The floor also counts Q and the output (72 rows x 2176 B): 4.9 MB, 2.7 us.
    assert floor(shape, RTX_PRO_6000).us == pytest.approx((shape.kv_bytes + 72 * 2176) / 1.792e6)
    assert round(floor(shape, RTX_PRO_6000).us, 1) == 2.7


def test_prefix_128k_is_84_us_on_the_rtx_pro_6000_and_31_on_the_h200():
    shape = _kimi_q9(131072)
    assert round(floor(shape, RTX_PRO_6000).us) == 84
    assert int(floor(shape, H200).us) == 31
    assert floor(shape, H200).bound == "dram"


def test_a_compute_heavy_shape_is_bound_by_the_tensor_peak():
    shape = CaseShape((4096,), 256, 128)  # 32k rows over 4k keys
    f = floor(shape, RTX_PRO_6000)
    assert f.bound == "tensor" and f.us == pytest.approx(shape.flops / 503.8e6)


def test_percent_of_floor():
    f = floor(_kimi_q9(4096), RTX_PRO_6000)
    assert f.percent_of(2 * f.us) == pytest.approx(50.0)
    assert f.percent_of(0.0) == 0.0
