"""Counters derived by hand from the kernel's tiling: the launch the issue describes, and valid documents."""

from __future__ import annotations

from ddbench.kernel.plan import SMEM_BYTES, THREADS
from ddbench.model.counters_input import parse_counters
from ddbench.model.floor import CaseShape
from ddbench.model.gpus import RTX_PRO_6000
from ddbench.model.kernel_time import model_launch
from ddbench.model.tiling_counters import CONFLICTED_64, tiling_counters

REGS = {"verify_attention_kernel": 167, "combine_parts_kernel": 40}


def test_kimi_tp8_q9_at_4k_is_192_ctas_in_two_waves_then_a_combine():
    doc = tiling_counters(CaseShape((4096,), 9, 8))
    verify, combine = parse_counters(doc)
    assert doc["kernels"][0]["grid"] == [64, 3, 1]
    assert (verify.ctas, verify.threads_per_cta, verify.dynamic_smem_bytes) == (192, THREADS, SMEM_BYTES)
    assert combine.ctas == 72  # one per (token, head) row
    m = model_launch(doc, RTX_PRO_6000, REGS)
    assert [k.waves for k in m.kernels] == [2, 1]


def test_the_partial_s_conflicts_show_in_wavefronts_per_instruction():
    verify = parse_counters(tiling_counters(CaseShape((4096,), 9, 8)))[0]
    st64 = verify.totals["shared"]["instructions"]["st64"]
    assert verify.totals["shared"]["wavefronts"]["st64"] == CONFLICTED_64 * st64
    assert verify.bank_conflicts > 0
    assert verify.wavefronts_per_shared_instruction > 4  # ldmatrix.x4 and cp.async are 4


def test_one_split_needs_no_combine_and_writes_bf16():
    doc = tiling_counters(CaseShape((21,), 9, 8))
    assert [k["name"] for k in doc["kernels"]] == ["verify_attention_kernel"]
    assert doc["kernels"][0]["grid"][0] == 1


def test_every_cta_is_in_one_shape_and_the_kv_is_read_once():
    shape = CaseShape((4096, 100, 32768), 9, 8)
    verify = parse_counters(tiling_counters(shape))[0]
    assert sum(s.count for s in verify.shapes) == verify.ctas
    assert verify.unique_bytes >= shape.kv_bytes
