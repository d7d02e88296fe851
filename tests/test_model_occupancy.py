"""Occupancy and waves on the GPU tables: the CUDA occupancy calculator's rules on known shapes."""

from __future__ import annotations

import pytest

from ddbench.errors import InputError
from ddbench.gpus import GPUS, H200, RTX_5090, RTX_PRO_6000, gpu_spec
from ddbench.model.occupancy import occupancy, registers_per_warp, tail_ctas, waves


@pytest.mark.parametrize(("threads", "smem"), [(256, 91_488), (384, 99_808)])  # 32 and 48 rows
def test_the_verify_kernel_holds_one_cta_per_sm_on_sm_120(threads, smem):
    occ = occupancy(RTX_PRO_6000, threads, smem, 168)
    assert occ.ctas_per_sm == 1
    assert occ.by_smem == 1  # + 1 KB reserved, of 100 KB
    assert occ.by_registers == 1  # 168 x 32 x 8 or 12 warps: 43,008 or 64,512 of 65,536
    assert occ.by_warps == 48 // (threads // 32) and occ.by_blocks == 32
    with pytest.raises(InputError, match="176 registers x 384 threads > 65536"):  # 8 more a thread
        occupancy(RTX_PRO_6000, 384, smem, 176)


def test_registers_are_allocated_per_warp_in_units_of_256():
    assert registers_per_warp(167) == 168 * 32
    assert registers_per_warp(168) == 168 * 32
    assert registers_per_warp(1) == 256


def test_the_h200_has_room_for_two_by_smem_but_registers_hold_it_to_one():
    occ = occupancy(H200, 256, 91_488, 168)
    assert (occ.by_smem, occ.by_registers, occ.ctas_per_sm, occ.limited_by) == (2, 1, 1, "registers")


def test_unknown_registers_do_not_limit():
    occ = occupancy(RTX_PRO_6000, 32, 0, None)
    assert occ.by_registers is None
    assert occ.ctas_per_sm == 32 and occ.limited_by == "blocks"


@pytest.mark.parametrize(("ctas", "expected"), [(192, 2), (189, 2), (188, 1), (1, 1), (0, 0), (377, 3)])
def test_waves_on_188_sms(ctas, expected):
    assert waves(ctas, 188, 1) == expected


def test_tail_ctas():
    assert tail_ctas(192, 188, 1) == 4
    assert tail_ctas(376, 188, 2) == 0


def test_a_cta_that_fits_no_sm_is_refused_with_the_reason():
    with pytest.raises(InputError, match="shared memory"):
        occupancy(RTX_PRO_6000, 256, 110_000, 100)
    with pytest.raises(InputError, match="threads"):
        occupancy(RTX_PRO_6000, 2048, 0, 32)
    with pytest.raises(InputError, match="registers"):
        occupancy(RTX_PRO_6000, 1024, 0, 255)


def test_the_tables_agree_with_what_the_kernels_rely_on():
    assert RTX_PRO_6000.sms == 188 and RTX_5090.sms == 170 and H200.sms == 132
    assert RTX_PRO_6000.smem_per_cta_bytes == 101_376 == RTX_5090.smem_per_cta_bytes
    # ~504 TFLOPS dense bf16 -> fp32 on the RTX PRO 6000: 1,024 FLOP per clock per SM
    assert (
        RTX_PRO_6000.mma_flop_per_clk_per_sm * RTX_PRO_6000.sms * RTX_PRO_6000.clock_ghz / 1e3
        == pytest.approx(RTX_PRO_6000.dense_tensor_tflops, rel=0.01)
    )
    assert RTX_PRO_6000.mma_per_clk == 0.25  # one m16n8k16 per 16 cycles per sub-partition


def test_an_unknown_gpu_names_the_option():
    with pytest.raises(InputError, match=r"--gpu.*unknown GPU 'a100'"):
        gpu_spec("a100")
    assert set(GPUS) == {"rtx-pro-6000", "rtx-5090", "h200"}
