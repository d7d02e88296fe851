"""Marshaling SGLang's extend layout into the custom kernel's inputs (ddbench/kernel/marshal.py), on its own.

A real port's worst bug lived here, so the expected kernel inputs are rebuilt by an independent, loop-based
decoder written from SGLang's extend layout (docs/capture-format.md; per request: the prefix slots from
kv_indices, then the draft slots from out_cache_loc; mask row i of request r at
custom_mask[mask_indptr[r] + i * (prefix + q_len) + prefix], q_len values) and compared element by element
with `marshal()`. The decoded bit words are also checked against each request's tree, and the two classic
mistakes (row stride `prefix`, draft slots left out) are shown to give different kernel inputs. Also: no
host synchronisation inside `marshal`, and the launch plan.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.layout import VerifyInputs
from ddbench.kernel.launch import prepare_launch
from ddbench.kernel.marshal import MASK_WORD_BITS, KernelInputs, marshal
from ddbench.kernel.plan import (
    ALIGN_FROM_TILES,
    ALIGNED_SHARE,
    BLOCK_N,
    COMBINE_ROW_TILES,
    DEFAULT_DRAM_PACE,
    EMULATED_PLAN,
    MIN_TILES_PER_CTA,
    PACE_FIXED_TILES,
    PACE_MARGIN,
    WHOLE_FIXED_TILES,
    WHOLE_WAVES,
    PlanOptions,
    dram_pace_of,
    max_clusters_of,
    plan_launch,
)
from ddbench.poison import poison_
from ddbench.suite import Case, parse_suite

# Generated batches: prefix 0 next to non-zero prefixes, q_len 1, q_len 33 and 65 (two and three 32-bit mask
# words; row 31 sees itself, so bit 31 of its first word is set and the int32 holds a negative value),
# paged pools (page_size 16) and many heads.
CASES = {
    "ragged-eagle": {
        "batch_size": 4,
        "prefix": [0, 21, 130, 5],
        "tree": {"kind": "eagle", "steps": 3, "topk": 2, "num_draft_tokens": 6},
    },
    "q1": {"batch_size": 3, "prefix": [0, 17, 40], "tree": {"kind": "chain", "length": 1}},
    "ddtree32-paged": {
        "batch_size": 3,
        "prefix": [0, 70, 3],
        "page_size": 16,
        "tree": {"kind": "ddtree", "budget": 32},
    },
    "ddtree64-paged": {
        "batch_size": 2,
        "prefix": [129, 0],
        "page_size": 16,
        "tree": {"kind": "ddtree", "budget": 64},
    },
    "star65": {"batch_size": 2, "prefix": [45, 0], "tree": {"kind": "star", "size": 65}},
    "chain65": {"batch_size": 1, "prefix": [3], "tree": {"kind": "chain", "length": 65}},
    "dpattn": {"layout": {"tp": 8, "dp_attention": 8}, "prefix": 9, "tree": {"kind": "chain", "length": 4}},
}
# Cases with prefix > 0 in some request: where both classic mistakes show.
WITH_PREFIX = ["ragged-eagle", "ddtree32-paged", "ddtree64-paged", "star65", "chain65"]


def make_case(label: str, **fields) -> Case:
    entry = {"label": label, "model": "kimi-k2.6", "layout": {"tp": 8}, "seed": 7, **fields}
    return parse_suite({"name": "marshal", "cases": [entry]}, "tests/test_marshal.py").cases[0]


def case_inputs(label: str) -> VerifyInputs:
    return generate_inputs(make_case(label, **CASES[label]))


def merge(parts: list[VerifyInputs]) -> VerifyInputs:
    """One batch from several generated ones: ragged q_len too (which a suite cannot express).

    The pools are stacked; every slot of part k is shifted by the rows of the pools before it.
    """
    base, pool_offset = parts[0], 0
    qo, kv, mk = [0], [0], [0]
    kv_indices, out_cache_loc, pools = [], [], []
    for x in parts:
        kv_indices.append(x.kv_indices + pool_offset)
        out_cache_loc.append(x.out_cache_loc + pool_offset)
        pools.append(x.k_buffer)
        pool_offset += x.k_buffer.shape[0]
        for r in range(x.batch_size):
            qo.append(qo[-1] + x.q_lens[r])
            kv.append(kv[-1] + x.prefix_lens[r])
            mk.append(mk[-1] + x.q_lens[r] * (x.prefix_lens[r] + x.q_lens[r]))
    k_buffer = torch.cat(pools)
    k_extend = torch.cat([x.k_extend for x in parts])
    merged = VerifyInputs(
        q_extend=torch.cat([x.q_extend for x in parts]),
        k_extend=k_extend,
        v_extend=k_extend[..., :512].contiguous(),
        o_extend=poison_(torch.empty(k_extend.shape[0], base.num_heads, 512, dtype=torch.bfloat16)),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :512],
        qo_indptr=torch.tensor(qo, dtype=torch.int32),
        kv_indptr=torch.tensor(kv, dtype=torch.int32),
        kv_indices=torch.cat(kv_indices),
        out_cache_loc=torch.cat(out_cache_loc),
        custom_mask=torch.cat([x.custom_mask for x in parts]),
        mask_indptr=torch.tensor(mk, dtype=torch.int64),
        sm_scale=base.sm_scale,
        max_len_extend=max(x.max_len_extend for x in parts),
        page_size=base.page_size,
        prefix_lens=sum((x.prefix_lens for x in parts), ()),
        q_lens=sum((x.q_lens for x in parts), ()),
        trees=sum((x.trees for x in parts), ()),
    )
    check_inputs(merged)
    return merged


def ragged_q_len_inputs() -> VerifyInputs:
    """q_len 1, 33, 65 and 9 in one batch (so three mask words per row, even for the q_len-1 request)."""
    parts = [
        ("q1", 0, {"kind": "chain", "length": 1}),
        ("d32", 70, {"kind": "ddtree", "budget": 32}),
        ("s65", 31, {"kind": "star", "size": 65}),
        ("d8", 5, {"kind": "ddtree", "budget": 8}),
    ]
    return merge([generate_inputs(make_case(lbl, prefix=p, tree=t)) for lbl, p, t in parts])


# ---------------------------------------------------------------- the independent decoder


def expected_kernel_inputs(
    x: VerifyInputs, *, row_stride=lambda prefix, q_len: prefix + q_len, with_drafts: bool = True
) -> dict[str, torch.Tensor]:
    """The prefix slots the kernel reads, the slot and key offsets and mask_words, built by plain Python loops
    over SGLang's layout.

    `row_stride` and `with_drafts` let a test build the two classic wrong versions with the same code (without
    the drafts, a request's keys are its prefix alone).
    """
    qo, kv, mk = x.qo_indptr.tolist(), x.kv_indptr.tolist(), x.mask_indptr.tolist()
    kv_indices, out_cache_loc, mask = x.kv_indices.tolist(), x.out_cache_loc.tolist(), x.custom_mask.tolist()
    words_per_row = -(-x.max_len_extend // 32)
    slots, slot_offsets, offsets, words = [], [0], [0], []
    for r in range(len(qo) - 1):
        prefix, q_len = kv[r + 1] - kv[r], qo[r + 1] - qo[r]
        request_slots = kv_indices[kv[r] : kv[r + 1]]
        slots += request_slots
        slot_offsets.append(slot_offsets[-1] + len(request_slots))
        keys = len(request_slots) + (len(out_cache_loc[qo[r] : qo[r + 1]]) if with_drafts else 0)
        offsets.append(offsets[-1] + keys)
        for i in range(q_len):
            start = mk[r] + i * row_stride(prefix, q_len) + prefix
            row = [bool(b) for b in mask[start : start + q_len]]
            row_words = []
            for w in range(words_per_row):
                value = sum(1 << b for b in range(32) if w * 32 + b < q_len and row[w * 32 + b])
                row_words.append(value - (1 << 32) if value >= 1 << 31 else value)  # uint32 bits as int32
            words.append(row_words)
    return {
        "prefix_slots": torch.tensor(slots, dtype=torch.int64),
        "slot_offsets": torch.tensor(slot_offsets, dtype=torch.int32),
        "kv_offsets": torch.tensor(offsets, dtype=torch.int32),
        "mask_words": torch.tensor(words, dtype=torch.int32).view(len(words), words_per_row),
    }


def decoded_bits(words: torch.Tensor) -> list[list[bool]]:
    """Per row, every bit of its words, bit j of word w as column 32 w + j (the kernel's reading)."""
    rows = []
    for row in words.tolist():
        rows.append([bool(((v & 0xFFFFFFFF) >> b) & 1) for v in row for b in range(32)])
    return rows


def assert_equal(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} entries differ, first at {bad[0].tolist()}"


# ---------------------------------------------------------------- marshal against the decoder


@pytest.mark.parametrize("label", [*CASES, "ragged-q_len"])
def test_marshal_matches_the_loop_decoder(label):
    x = ragged_q_len_inputs() if label == "ragged-q_len" else case_inputs(label)
    k = marshal(x)
    expected = expected_kernel_inputs(x)
    for name, want in expected.items():
        got = k.kv_slots[: want.numel()] if name == "prefix_slots" else getattr(k, name)
        assert got.is_contiguous(), name
        assert_equal(got, want, name)
    # kv_indices itself, not a copy: the kernel reads SGLang's buffer, whatever its tail holds
    assert k.kv_slots.data_ptr() == x.kv_indices.data_ptr()
    lengths = [p + q for p, q in zip(x.prefix_lens, x.q_lens, strict=True)]
    assert k.kv_offsets.tolist() == [0, *itertools.accumulate(lengths)]
    assert_equal(k.q_offsets, x.qo_indptr.to(torch.int32), "q_offsets")
    # q and the pool are passed through, not copied: the pool as a (pool, 576) view of k_buffer
    assert k.q.data_ptr() == x.q_extend.data_ptr() and k.q.shape == x.q_extend.shape
    assert k.kv.data_ptr() == x.k_buffer.data_ptr() and k.kv.shape == (x.k_buffer.shape[0], 576)
    assert k.kv.is_contiguous()
    assert k.sm_scale == x.sm_scale and k.max_q_len == x.max_len_extend == max(x.q_lens)
    assert k.heads == x.num_heads and k.batch_size == x.batch_size
    assert k.mask_words.shape == (sum(x.q_lens), -(-max(x.q_lens) // MASK_WORD_BITS))


@pytest.mark.parametrize("label", [*CASES, "ragged-q_len"])
def test_kv_slots_name_the_keys_of_each_request(label):
    """The rows the kernel reads for request r: its prefix tokens' pool rows, then k_extend's draft rows, as
    many keys as kv_offsets gives it."""
    x = ragged_q_len_inputs() if label == "ragged-q_len" else case_inputs(label)
    k = marshal(x)
    offsets, slot_offsets, qo = k.kv_offsets.tolist(), k.slot_offsets.tolist(), x.qo_indptr.tolist()
    read = []
    for r in range(x.batch_size):
        prefix = offsets[r + 1] - offsets[r] - (qo[r + 1] - qo[r])
        assert prefix == x.prefix_lens[r]
        slots = k.kv_slots[slot_offsets[r] : slot_offsets[r] + prefix]
        rows = torch.cat([k.kv[slots], k.kv_draft[qo[r] : qo[r + 1]]])
        assert bool(rows.isfinite().all()), f"request {r}: reads an unused (NaN) pool row"
        assert torch.equal(rows[prefix:], x.k_buffer[x.out_cache_loc[qo[r] : qo[r + 1]], 0]), f"request {r}"
        read.append(slots)
    # every prefix slot the call reads, once
    read_slots = torch.cat(read)
    assert read_slots.unique().numel() == read_slots.numel()


@pytest.mark.parametrize("label", [*CASES, "ragged-q_len"])
def test_mask_words_decode_to_each_requests_tree(label):
    x = ragged_q_len_inputs() if label == "ragged-q_len" else case_inputs(label)
    k = marshal(x)
    rows = decoded_bits(k.mask_words)
    width = k.mask_words.shape[1] * 32
    qo = x.qo_indptr.tolist()
    for r, tree in enumerate(x.trees):
        vis = tree.ancestor_mask().tolist()
        for i in range(tree.q_len):
            row = rows[qo[r] + i]
            assert row[: tree.q_len] == vis[i], f"request {r} row {i}: not the tree's ancestor row"
            assert not any(row[tree.q_len :]), f"request {r} row {i}: bits past q_len {tree.q_len}"
            assert len(row) == width


def test_bit_31_gives_negative_words_and_three_words_hold_q_len_65():
    x = case_inputs("chain65")
    words = marshal(x).mask_words
    assert words.shape == (65, 3)
    # a chain: row i sees columns 0..i. Row 31: word 0 is 0xFFFFFFFF = -1; row 64 reaches word 2 bit 0.
    assert words[31].tolist() == [-1, 0, 0]
    assert words[30].tolist() == [0x7FFFFFFF, 0, 0]
    assert words[64].tolist() == [-1, -1, 1]
    assert words[0].tolist() == [1, 0, 0]
    star = marshal(case_inputs("star65")).mask_words
    # a star: every row sees the root and itself
    assert star[31].tolist() == [1 - 2**31, 0, 0]  # bits 0 and 31: 0x80000001
    assert star[64].tolist() == [1, 0, 1]
    assert star[65 + 33].tolist() == [1, 2, 0]  # second request, row 33: bit 1 of word 1
    assert int((star < 0).sum()) == 4  # rows 31 (word 0) and 63 (word 1) of each request


def test_uint8_mask_and_prefix_columns_change_nothing():
    x = case_inputs("ragged-eagle")
    words = marshal(x).mask_words
    as_uint8 = dataclasses.replace(x, custom_mask=x.custom_mask.to(torch.uint8))
    assert torch.equal(marshal(as_uint8).mask_words, words)
    cleared = x.custom_mask.clone()
    for r, (prefix, q_len) in enumerate(zip(x.prefix_lens, x.q_lens, strict=True)):
        start = int(x.mask_indptr[r])
        cleared[start : start + q_len * (prefix + q_len)].view(q_len, prefix + q_len)[:, :prefix] = False
    assert torch.equal(marshal(dataclasses.replace(x, custom_mask=cleared)).mask_words, words)


def test_one_flipped_mask_bit_flips_exactly_that_word_bit():
    x = case_inputs("ddtree32-paged")
    r, i, j = 1, 20, 3  # request 1 (prefix 70), row 20, draft column 3
    prefix, q_len = x.prefix_lens[r], x.q_lens[r]
    flat = int(x.mask_indptr[r]) + i * (prefix + q_len) + prefix + j
    mask = x.custom_mask.clone()
    mask[flat] = ~mask[flat]
    before, after = marshal(x).mask_words, marshal(dataclasses.replace(x, custom_mask=mask)).mask_words
    diff = (before ^ after).nonzero().tolist()
    assert diff == [[int(x.qo_indptr[r]) + i, 0]]
    assert int(before[diff[0][0], 0] ^ after[diff[0][0], 0]) == 1 << j


# ---------------------------------------------------------------- the two classic mistakes


@pytest.mark.parametrize("label", WITH_PREFIX)
def test_row_stride_prefix_gives_different_mask_words(label):
    x = case_inputs(label)
    right = expected_kernel_inputs(x)["mask_words"]
    wrong = expected_kernel_inputs(x, row_stride=lambda prefix, q_len: prefix)["mask_words"]
    assert torch.equal(marshal(x).mask_words, right)
    assert not torch.equal(marshal(x).mask_words, wrong)
    # every request's rows differ but row 0 (which both read at its start); with prefix 0 the wrong stride
    # is 0, so every row would be read as row 0
    qo = x.qo_indptr.tolist()
    for r, prefix in enumerate(x.prefix_lens):
        assert torch.equal(right[qo[r]], wrong[qo[r]])
        assert not torch.equal(right[qo[r] : qo[r + 1]], wrong[qo[r] : qo[r + 1]]), f"request {r} ({prefix})"


@pytest.mark.parametrize("label", WITH_PREFIX)
def test_leaving_out_the_draft_slots_gives_different_kv_slots(label):
    x = case_inputs(label)
    k = marshal(x)
    wrong = expected_kernel_inputs(x, with_drafts=False)
    # the wrong offsets count no draft key at all: with them the kernel would never see k_extend
    assert not torch.equal(k.kv_offsets, wrong["kv_offsets"])
    keys = (k.kv_offsets[1:] - k.kv_offsets[:-1]).tolist()
    assert keys == [p + q for p, q in zip(x.prefix_lens, x.q_lens, strict=True)]
    assert (wrong["kv_offsets"][1:] - wrong["kv_offsets"][:-1]).tolist() == list(x.prefix_lens)


# ---------------------------------------------------------------- no host synchronisation


class HostSync(AssertionError):
    pass


@pytest.fixture
def no_host_sync(monkeypatch):
    """Inside the block, every tensor -> Python value conversion and every op whose output size depends on
    tensor values (a device sync on a GPU) raises. Only what torch itself never calls for Python-int
    arguments is patched: item/tolist/cpu/numpy, __bool__/__int__/__float__/__index__, nonzero, unique,
    masked_select, boolean-mask indexing, repeat_interleave without output_size."""

    def refuse(what):
        def raiser(*args, **kwargs):
            raise HostSync(f"host synchronisation: {what}")

        return raiser

    getitem = torch.Tensor.__getitem__

    def guarded_getitem(self, index):
        parts = index if isinstance(index, tuple) else (index,)
        if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
            raise HostSync("host synchronisation: boolean-mask indexing")
        return getitem(self, index)

    interleave = torch.repeat_interleave

    def guarded_interleave(*args, **kwargs):
        if kwargs.get("output_size") is None and any(isinstance(a, torch.Tensor) for a in args[1:2]):
            raise HostSync("host synchronisation: repeat_interleave without output_size")
        return interleave(*args, **kwargs)

    def patch_all():
        for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
            monkeypatch.setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
        for name in ("nonzero", "unique", "masked_select"):
            monkeypatch.setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
            monkeypatch.setattr(torch, name, refuse(f"torch.{name}"))
        monkeypatch.setattr(torch.Tensor, "__getitem__", guarded_getitem)
        monkeypatch.setattr(torch, "repeat_interleave", guarded_interleave)
        monkeypatch.setattr(
            torch.Tensor, "repeat_interleave", lambda self, *a, **kw: guarded_interleave(self, *a, **kw)
        )

    return patch_all


@pytest.mark.parametrize("label", [*CASES, "ragged-q_len"])
def test_marshal_does_not_synchronise(no_host_sync, monkeypatch, label):
    x = ragged_q_len_inputs() if label == "ragged-q_len" else case_inputs(label)
    expected = marshal(x)
    no_host_sync()
    k = marshal(x)
    monkeypatch.undo()
    for name in ("kv_slots", "slot_offsets", "kv_offsets", "q_offsets", "mask_words"):
        assert torch.equal(getattr(k, name), getattr(expected, name)), name


def test_the_sync_guard_catches_synchronising_code(no_host_sync, monkeypatch):
    x = case_inputs("q1")
    no_host_sync()
    with pytest.raises(HostSync, match="tolist"):
        expected_kernel_inputs(x)  # the loop decoder reads values on the host
    with pytest.raises(HostSync):
        x.custom_mask[x.custom_mask]  # data-dependent output size
    with pytest.raises(HostSync):
        int(x.qo_indptr[-1])
    with pytest.raises(HostSync):
        torch.repeat_interleave(torch.arange(3), x.qo_indptr[1:] - x.qo_indptr[:-1])
    monkeypatch.undo()
    assert int(x.qo_indptr[-1]) == 3


# ---------------------------------------------------------------- launch plan


@pytest.mark.parametrize(
    ("heads", "max_q_len", "row_groups", "row_tiles"),
    [
        *((8, 1, g, 1) for g in (2, 3)),
        (8, 4, 2, 1),
        (8, 6, 2, 2),
        (8, 6, 3, 1),
        (8, 9, 2, 3),
        (8, 9, 3, 2),
        (8, 33, 2, 9),
        (8, 65, 3, 11),
        (16, 65, 2, 33),
        (16, 65, 3, 22),
        (128, 1, 2, 4),
        (128, 1, 3, 3),
    ],
)
def test_row_tiles_cover_every_token_head_row(heads, max_q_len, row_groups, row_tiles):
    plan = plan_launch(1, heads, max_q_len, 100, PlanOptions(row_groups=row_groups))
    assert plan.row_tiles == row_tiles and plan.block_m == 16 * row_groups
    assert (row_tiles - 1) * plan.block_m < max_q_len * heads <= row_tiles * plan.block_m


def test_two_combine_halves_where_row_tiles_have_many_parts():
    assert plan_launch(1, 8, 9, 32768 + 9).combine_halves == 2  # 188 CTAs over 2 row tiles
    assert plan_launch(16, 8, 9, 16 * (4096 + 9)).combine_halves == 1  # 188 CTAs over 32 row tiles
    assert plan_launch(1, 8, 9, 30).combine_halves == 1  # whole row tiles: no combine
    assert plan_launch(1, 8, 9, 30).combine_threads == 128
    assert plan_launch(1, 8, 9, 32777).combine_threads == 256


def test_a_combine_cta_merges_as_many_rows_as_leave_one_and_a_half_ctas_an_sm():
    h200 = {"sm_count": 132, "dram_pace": dram_pace_of("NVIDIA H200"), "max_clusters": 15}
    rows_of = {
        (1, 8, 65, 4096 + 65): 2,  # 520 rows: 260 CTAs of 2 (396 and more), not 130 of 4
        (16, 8, 9, 16 * (4096 + 9)): 4,  # 1,152 rows: 288 CTAs of 4
        (4, 16, 65, 4 * (4096 + 65)): 16,  # 4,160 rows: 260 of 16, the most a plan takes
        (1, 8, 9, 32768 + 9): 1,  # two halves share a row of many parts
    }
    for shape, rows in rows_of.items():
        plan = plan_launch(*shape, PlanOptions(**h200))
        assert plan.combines and plan.combine_rows == rows, (shape, plan)
    assert plan_launch(1, 8, 65, 4096 + 65, PlanOptions(combine_rows=48, **h200)).combine_rows == 48  # forced
    for bad in (0, 65):
        with pytest.raises(ValueError, match=f"combine_rows must be 1 to 64, not {bad}"):
            plan_launch(1, 8, 65, 4096 + 65, PlanOptions(combine_rows=bad))
    with pytest.raises(ValueError, match="a split row tile's merge lists at most 18688 CTAs, not 18689"):
        plan_launch(1, 8, 9, 10_000_000, PlanOptions(ctas=18689, final_merge=False))


def test_48_rows_for_long_launches_and_whole_tiles_that_take_fewer_waves():
    assert plan_launch(1, 8, 9, 4096 + 9).row_groups == 2  # 387 units on 188 SMs: more, smaller CTAs
    assert plan_launch(1, 8, 9, 32768 + 9).row_groups == 3  # 3,075 units: each KV tile serves 48 rows
    assert plan_launch(1, 8, 65, 4096 + 65).row_groups == 3
    assert plan_launch(1, 8, 8, 32768 + 8).row_groups == 2  # 64 rows: 2 tiles either way, 96 rows at 48
    # whole row tiles take the width of fewest waves times rows: 352 of 48 in 2 waves, not 528 of 32 in 3
    assert plan_launch(16, 16, 65, 16 * 193).row_groups == 3
    assert plan_launch(16, 16, 65, 16 * 193, PlanOptions(row_groups=2)).row_groups == 2  # unless forced
    with pytest.raises(ValueError, match="row_groups must be 2 or 3"):
        plan_launch(1, 8, 9, 100, PlanOptions(row_groups=4))


def test_a_launch_past_32_bit_work_units_is_refused():
    plan_launch(64, 128, 1025, 64 * (131072 + 1025))  # the documented range: 7.2e8 units
    with pytest.raises(ValueError, match="more work units than 32 bits count"):
        plan_launch(1, 128, 1025, 30_000_000)  # 2,734 row tiles x 937,500 key tiles


@pytest.mark.parametrize(
    ("batch", "heads", "q_len", "prefix", "sm_count", "ctas", "whole"),
    [
        (1, 8, 9, 21, 188, 3, True),  # 30 keys: one tile per row tile, nothing to combine
        (1, 8, 9, 1999, 188, 48, False),  # 63 tiles x 3 row tiles = 189 units, about 4 per CTA
        (1, 8, 9, 4096, 188, 97, False),  # 387 units
        (4, 8, 33, 1024, 188, 180, False),  # 1197 units: one wave, 5 CTAs to each of the 36 row tiles
        (1, 16, 65, 4096, 188, 176, False),  # 22 row tiles of 48 rows, 8 CTAs each
        (64, 8, 9, 1000, 188, 188, False),  # 128 48-row tiles: balanced ranges use every SM
        (16, 16, 65, 128, 188, 352, True),  # whole: 352 row tiles of 48 in 2 waves, not 528 of 32 in 3
        (1, 128, 1, 100, 188, 4, True),  # 4 row tiles of 4 key tiles
        (4, 16, 64, 128, 188, 128, True),  # 128 row tiles of 6 tiles: 188 ranges would save 1.9 tiles a CTA
        (1, 8, 9, 4096, 16, 16, False),  # a small GPU
    ],
)
def test_plan_on_known_shapes(batch, heads, q_len, prefix, sm_count, ctas, whole):
    plan = plan_launch(batch, heads, q_len, batch * (prefix + q_len), PlanOptions(sm_count=sm_count))
    assert (plan.ctas, plan.whole_row_tiles > 0) == (ctas, whole)
    assert plan.grid == (ctas, 1, 1)
    assert plan.combines == (not whole)
    assert plan.workspace_parts == (0 if whole else 2 * ctas)


def test_plan_bounds():
    sm_count = 188
    for batch, heads, q_len, prefix in itertools.product(
        (1, 2, 3, 4, 7, 16, 64, 256), (8, 16, 64, 128), (1, 9, 33, 65), (0, 1, 31, 33, 700, 4096, 131072)
    ):
        keys = batch * (prefix + q_len)
        plan = plan_launch(batch, heads, q_len, keys, PlanOptions(sm_count=sm_count))
        split = plan_launch(batch, heads, q_len, keys, PlanOptions(sm_count=sm_count, whole_row_tiles=False))
        row_tiles = batch * split.row_tiles  # the width the choice is made at
        units = split.row_tiles * -(-keys // BLOCK_N)
        shape = (batch, heads, q_len, prefix)
        # the key tiles per CTA that balanced ranges would save over whole row tiles in their waves, against
        # the combine's fixed cost and its rows over the SMs (no DRAM pace given: the parts are not counted,
        # and no clusters merge in the verify kernel)
        saved = -(-row_tiles // sm_count) * units / row_tiles - units / split.ctas if units else 0
        combine = WHOLE_FIXED_TILES + COMBINE_ROW_TILES * batch * q_len * heads / sm_count
        whole_wins = (
            units <= MIN_TILES_PER_CTA * row_tiles or saved <= combine or row_tiles >= WHOLE_WAVES * sm_count
        )
        assert bool(plan.whole_row_tiles) == whole_wins, shape
        if plan.whole_row_tiles:  # in the width that takes the fewest waves times rows, 48 on a tie
            assert plan.ctas == batch * plan.row_tiles, shape
            other = 5 - plan.row_groups
            waves = {g: -(-batch * -(-q_len * heads // (16 * g)) // sm_count) * g for g in (2, 3)}
            assert waves[plan.row_groups] < waves[other] or (waves[2] == waves[3] and plan.row_groups == 3)
        else:
            assert plan == split, shape
            assert min(sm_count, row_tiles) <= plan.ctas <= sm_count, shape  # one wave, no fewer than needed
            sized = min(sm_count, max(row_tiles, -(-units // MIN_TILES_PER_CTA)))  # before the rounding
            if plan.ctas != sized:  # rounded to a multiple of the row tiles: one part per CTA
                assert plan.ctas % row_tiles == 0 and ALIGNED_SHARE * sized <= plan.ctas, shape
                assert plan.ctas < sized + row_tiles, shape  # to the nearest multiple up or down
                assert units >= ALIGN_FROM_TILES * max(sized, plan.ctas), shape
            elif row_tiles < plan.ctas < sm_count:  # sized by the work: about MIN_TILES_PER_CTA units each
                assert MIN_TILES_PER_CTA - 1 < units / plan.ctas <= MIN_TILES_PER_CTA, shape
            elif plan.ctas == sm_count:  # capped by the GPU: at least as much work as that each
                assert units / plan.ctas > MIN_TILES_PER_CTA - 1, shape


def test_the_dram_pace_of_each_gpu_follows_from_its_datasheet():
    """KV tiles DRAM delivers while one SM multiplies a 16-row group with one tile: S, then PV, each phase as
    long as the busier of the tensor pipe and shared memory (the counts the tiling model mirrors)."""
    from ddbench.gpus import GPUS
    from ddbench.model import tiling_counters as tc

    warps = 4  # a row group
    phases = (
        (warps * tc.MMA_S, warps * (4 * tc.LDMATRIX_S + tc.REDUCE_128 * tc.PARTIAL_STORES)),
        (warps * tc.MMA_PV, warps * (tc.REDUCE_128 * tc.REDUCE_LOADS + 4 * tc.LDMATRIX_PV)),
    )
    assert phases == ((144, 352), (128, 512))
    for gpu in GPUS.values():
        cycles = sum(
            max(mma / gpu.mma_per_clk, wavefronts / gpu.smem_wavefronts_per_clk) for mma, wavefronts in phases
        )
        group_tile_s = cycles / (gpu.clock_ghz * 1e9)
        tile_s = tc.TILE_BYTES / (gpu.dram_gbs * 1e9)
        assert dram_pace_of(gpu.name) == pytest.approx(group_tile_s / tile_s, abs=0.01), gpu.key
    assert dram_pace_of("NVIDIA RTX PRO 6000 Blackwell Workstation Edition") == DEFAULT_DRAM_PACE
    assert dram_pace_of("NVIDIA H200") == dram_pace_of(GPUS["h200"].name)
    assert dram_pace_of("NVIDIA A100-SXM4-80GB") is None  # not listed: planned on every SM


@pytest.mark.parametrize(
    ("batch", "prefix", "sm_count", "pace", "ctas"),
    [
        (16, 4096, 188, None, 188),  # 32 row tiles of 48 rows on every SM
        # 2,064 KV tiles / (3 x 20.21 x 1.15) - 2 fixed = 27.6 tiles a CTA: 150 CTAs, up to 5 a row tile
        (16, 4096, 188, 20.21, 160),
        (1, 32768, 188, None, 188),
        (1, 32768, 188, 20.21, 160),  # 1,025 / 69.7 - 2 = 12.7 tiles a CTA: 162, clusters of 8 keep 160
        (16, 4096, 132, None, 128),  # the H200: 4 CTAs to each of the 32 row tiles (the aligned rounding)
        (16, 4096, 132, 61.47, 128),  # the same with its pace: it needs all its SMs to keep up with DRAM
        (1, 4096, 188, 20.21, 168),  # a short split: 7 clusters of 8 a row tile, 2.3 tiles a CTA
    ],
)
def test_no_more_ctas_than_keep_pace_with_dram(batch, prefix, sm_count, pace, ctas):
    plan = plan_launch(batch, 8, 9, batch * (prefix + 9), PlanOptions(sm_count=sm_count, dram_pace=pace))
    assert plan.ctas == ctas and plan.splits


@pytest.mark.parametrize(
    ("batch", "heads", "q_len", "prefix", "pace", "ctas", "whole"),
    [
        (4, 16, 64, 128, 20.21, 128, True),  # 1.9 tiles a CTA, less than 188 parts over the DRAM cost
        # whole: 256 row tiles of 32 rows would take two waves, 176 of 48 take one
        (16, 8, 64, 128, 20.21, 176, True),
        (1, 8, 17, 257, 20.21, 40, False),  # 5 row tiles of 9: split, then one cluster of 8 a row tile
        (4, 16, 65, 4096, 20.21, 176, False),  # 88 row tiles of 130: half of each saved
    ],
)
def test_whole_row_tiles_where_splitting_saves_less_than_it_costs(
    batch, heads, q_len, prefix, pace, ctas, whole
):
    plan = plan_launch(batch, heads, q_len, batch * (prefix + q_len), PlanOptions(dram_pace=pace))
    assert (plan.ctas, plan.whole_row_tiles > 0) == (ctas, whole)


@pytest.mark.parametrize(
    ("batch", "heads", "q_len", "sm_count", "row_groups"),
    [
        (16, 8, 33, 132, 3),  # 144 row tiles of 32 rows in two waves, or 96 of 48 in one
        (16, 8, 60, 132, 2),  # 240 of 32 or 160 of 48: two waves either way, the smaller CTAs
        (4, 8, 33, 132, 2),  # one wave either way
        (1, 8, 8, 188, 2),  # 64 rows: 2 row tiles of 32 or of 48
    ],
)
def test_whole_row_tiles_hold_the_rows_that_take_least_waves_times_rows(
    batch, heads, q_len, sm_count, row_groups
):
    plan = plan_launch(
        batch, heads, q_len, batch * (0 + q_len), PlanOptions(sm_count=sm_count, whole_row_tiles=True)
    )
    assert plan.whole_row_tiles and plan.row_groups == row_groups
    assert plan.ctas == batch * -(-q_len * heads // (16 * row_groups))
    forced = plan_launch(
        batch,
        heads,
        q_len,
        batch * q_len,
        PlanOptions(sm_count=sm_count, whole_row_tiles=True, row_groups=5 - row_groups),
    )
    assert forced.row_groups == 5 - row_groups  # a forced width is kept


def test_the_pace_never_takes_split_ranges_below_the_row_tiles_or_above_the_ranges_without_it():
    """Split ranges only (forced): with the pace the plan may also run row tiles whole, in more CTAs."""
    for batch, heads, q_len, prefix in itertools.product(
        (1, 4, 16, 64), (8, 16, 128), (1, 9, 65), (128, 700, 32768)
    ):
        keys = batch * (prefix + q_len)
        free = plan_launch(batch, heads, q_len, keys, PlanOptions(whole_row_tiles=False))
        # (clusters may round the paced split down again: test_clusters_where_the_parts_cost_more_than_...)
        paced = plan_launch(
            batch,
            heads,
            q_len,
            keys,
            PlanOptions(whole_row_tiles=False, dram_pace=DEFAULT_DRAM_PACE, cluster=1),
        )
        shape = (batch, heads, q_len, prefix)
        assert paced.ctas <= free.ctas and paced.row_groups == free.row_groups, shape
        if paced.ctas < free.ctas:
            # enough CTAs that DRAM sets the pace: their key tiles alone take no longer than DRAM brings them;
            # with each CTA's fixed cost too, unless that leaves fewer than ALIGN_FROM_TILES tiles a CTA
            kv_tiles = -(-keys // BLOCK_N)
            units = paced.row_tiles * kv_tiles
            at_pace = kv_tiles / (paced.row_groups * DEFAULT_DRAM_PACE * PACE_MARGIN)
            bare = units / at_pace
            fixed = units / (at_pace - PACE_FIXED_TILES) if at_pace > PACE_FIXED_TILES else units
            row_tiles = batch * paced.row_tiles
            assert paced.ctas >= min(free.ctas, ALIGNED_SHARE * bare), shape
            most = max(bare, min(fixed, units / ALIGN_FROM_TILES))
            assert row_tiles <= paced.ctas <= max(row_tiles, most + row_tiles), shape  # rounded up at most


@pytest.mark.parametrize(
    ("batch", "heads", "q_len", "prefix", "pace", "ctas", "cluster"),
    [
        (1, 8, 9, 32768, 20.21, 160, 8),  # 81 parts a row tile; 80 in clusters of 8 (3 would keep 81): 10
        (16, 8, 9, 4096, 20.21, 160, 5),  # 5 parts a row tile: one cluster merges each row tile whole
        (1, 8, 65, 4096, 20.21, 176, 8),  # 11 row tiles of 17 parts: 16 each (94 %) in two clusters of 8
        (1, 8, 9, 4096, 20.21, 168, 8),  # 2.3 tiles a CTA: a short split, in clusters of 8 (no combine)
        # a short split of 20 row tiles: too many for clusters inside row tiles, so 184 CTAs in clusters that
        # straddle them; not on the H200, whose parts cost less than clusters need
        (4, 8, 17, 1312, 20.21, 184, 8),
        (4, 8, 17, 1312, 61.47, 120, 1),
        (1, 8, 9, 32768, 61.47, 132, 1),  # the H200: its parts cost 2 tiles over its fast DRAM
        (1, 8, 9, 32768, None, 188, 1),  # no pace, no estimate of what the parts cost: no clusters
    ],
)
def test_clusters_where_the_parts_cost_more_than_the_merge(batch, heads, q_len, prefix, pace, ctas, cluster):
    sm_count = 132 if pace == 61.47 else 188
    plan = plan_launch(
        batch, heads, q_len, batch * (prefix + q_len), PlanOptions(sm_count=sm_count, dram_pace=pace)
    )
    assert (plan.ctas, plan.cluster) == (ctas, cluster)
    assert plan.ctas % plan.cluster == 0 and plan.splits
    # where clusters merge, the verify kernel merges what they leave (the final merge): no combine kernel
    assert plan.final_merge == (cluster > 1) and plan.combines == (cluster == 1)


@pytest.mark.parametrize(
    ("batch", "heads", "q_len", "prefix", "sms", "device", "free", "capped"),
    [
        # the H200 runs 15 clusters of 8 at once (ncu, run 7). 2 row tiles of a short split, 8 clusters each:
        # 7 each (the GPU backend fell back to no clusters and the combine at launch)
        (1, 8, 6, 8192, 132, "NVIDIA H200", (128, 8), (112, 8)),
        # 16 row tiles of one cluster each: 15 clusters straddling them
        (1, 8, 64, 129, 132, "NVIDIA H200", (128, 8), (120, 8)),
        (4, 8, 6, 1024, 132, "NVIDIA H200", (128, 8), (64, 8)),  # 8 row tiles: 1 cluster each, not 2
        (1, 8, 9, 4096, 132, "NVIDIA H200", (120, 8), (120, 8)),  # 3 row tiles of 5: 15, as the ncu run had
        # the RTX PRO 6000 (22 at once, an estimate): q65 p4k's 11 row tiles keep their two clusters of 8
        (1, 8, 65, 4096, 188, "NVIDIA RTX PRO 6000 Blackwell", (176, 8), (176, 8)),
        # 23 clusters of 8 straddling 20 row tiles: 22
        (4, 8, 17, 1312, 188, "NVIDIA RTX PRO 6000 Blackwell", (184, 8), (176, 8)),
    ],
)
def test_clusters_of_8_are_no_more_than_the_gpu_runs_at_once(
    batch, heads, q_len, prefix, sms, device, free, capped
):
    """A cluster's CTAs share a GPC: a plan of more clusters than the GPCs hold would run its last ones in a
    second wave (the GPU backend would fall back to no clusters at all)."""
    keys = batch * (prefix + q_len)
    pace, limit = dram_pace_of(device), max_clusters_of(device)
    unlimited = plan_launch(batch, heads, q_len, keys, PlanOptions(sm_count=sms, dram_pace=pace))
    plan = plan_launch(
        batch, heads, q_len, keys, PlanOptions(sm_count=sms, dram_pace=pace, max_clusters=limit)
    )
    assert (unlimited.ctas, unlimited.cluster) == free and (plan.ctas, plan.cluster) == capped
    assert free == capped or free[0] // 8 > limit  # the limit changes only plans of more clusters than it
    assert plan.cluster < 8 or plan.ctas // 8 <= limit
    assert plan.final_merge == (plan.cluster > 1) and plan.ctas % plan.cluster == 0


@pytest.mark.parametrize(("batch", "q_len", "prefix"), [(1, 6, 8192), (1, 64, 129), (4, 17, 1312)])
def test_a_gpu_that_runs_no_cluster_of_8_gets_none(batch, q_len, prefix):
    plan = plan_launch(
        batch, 8, q_len, batch * (prefix + q_len), PlanOptions(sm_count=132, dram_pace=20.21, max_clusters=0)
    )
    assert plan.cluster < 8 and plan.ctas > 0


def test_every_gpu_has_a_cluster_limit_and_an_unknown_one_none():
    from ddbench.gpus import GPUS

    assert all(max_clusters_of(gpu.name) for gpu in GPUS.values())
    assert max_clusters_of("NVIDIA H200") == 15
    assert max_clusters_of("NVIDIA A100-SXM4-80GB") is None


def test_a_forced_cluster_must_fit():
    assert plan_launch(1, 8, 9, 32777, PlanOptions(ctas=40, cluster=8)).cluster == 8
    assert (
        plan_launch(1, 8, 9, 32777, PlanOptions(ctas=40)).cluster == 1
    )  # forced CTAs: no clusters unless asked
    with pytest.raises(ValueError, match="do not divide into clusters of 3"):
        plan_launch(1, 8, 9, 32777, PlanOptions(ctas=40, cluster=3))
    with pytest.raises(ValueError, match="cluster must be 1 to 8"):
        plan_launch(1, 8, 9, 32777, PlanOptions(ctas=40, cluster=9))


@pytest.mark.parametrize("forced", [1, 2, 5, 13, 64])
def test_forced_cta_count_is_used_as_given(forced):
    plan = plan_launch(
        1, 8, 9, 30, PlanOptions(ctas=forced)
    )  # one tile: the plan would run 3 whole row tiles
    assert plan.ctas == forced and plan.whole_row_tiles == 0 and plan.combines == (forced > 1)


def test_plan_for_an_empty_batch():
    plan = plan_launch(0, 8, 0, total_keys=0)
    assert plan.ctas == 0
    assert plan_launch(0, 8, 9, total_keys=100).ctas == 0  # keys without requests: nothing to run


def test_prepare_launch_workspace_only_when_row_tiles_are_split():
    x = case_inputs("ddtree64-paged")
    one = prepare_launch(x, options=EMULATED_PLAN.but(whole_row_tiles=True))
    assert one.ws_o is None and one.ws_lse is None and one.ws_scale is None
    assert one.out.data_ptr() == x.o_extend.data_ptr()
    assert one.total_rows == sum(x.q_lens) * x.num_heads
    five = prepare_launch(x, options=EMULATED_PLAN.but(ctas=5))
    assert five.plan.ctas == 5 and five.plan.combines
    m = five.plan.block_m
    assert five.ws_o.shape == (10, m, 512) and five.ws_o.dtype == torch.float16
    assert five.ws_lse.shape == (10, m) and five.ws_lse.dtype == torch.float32
    assert five.ws_scale.shape == (10, m, 4) and five.ws_scale.dtype == torch.float32
    auto = prepare_launch(x)
    keys = sum(x.prefix_lens) + sum(x.q_lens)
    assert auto.plan == plan_launch(
        x.batch_size, x.num_heads, x.max_len_extend, keys, PlanOptions(dram_pace=DEFAULT_DRAM_PACE)
    )
    assert isinstance(auto.kernel, KernelInputs)


def test_a_short_split_in_whole_clusters_is_judged_as_it_runs():
    """H200: 5 row tiles of 5 key tiles; the balanced split (7 CTAs) saves less than a combine costs, but in
    clusters of 8 a row tile (40 CTAs, merged in the verify kernel) it saves more than their merge."""
    plan = plan_launch(1, 8, 17, 127 + 17, PlanOptions(sm_count=132, dram_pace=61.47, max_clusters=15))
    assert (plan.ctas, plan.cluster, plan.final_merge, plan.whole_row_tiles) == (40, 8, True, 0)
    # the same clusters without the final merge (a combine after them): judged as before, whole
    forced = plan_launch(
        1, 8, 17, 127 + 17, PlanOptions(sm_count=132, dram_pace=61.47, max_clusters=15, final_merge=False)
    )
    assert forced.whole_row_tiles == 5
    # clusters that would straddle row tiles (64 of them: 96 CTAs) keep the balanced judgement: whole
    assert (
        plan_launch(
            4, 8, 64, 4 * (127 + 64), PlanOptions(sm_count=188, dram_pace=20.21, max_clusters=22)
        ).whole_row_tiles
        == 16
    )
    # a final merge without clusters is no cluster merge: whole, as before
    alone = plan_launch(
        1, 16, 48, 200 + 48, PlanOptions(sm_count=188, dram_pace=20.21, cluster=1, final_merge=True)
    )
    assert alone.whole_row_tiles == 24


def test_the_32_bit_bound_holds_at_the_width_whole_row_tiles_take():
    """96 rows: 2 row tiles of 48 fit 32-bit units, the 3 of 32 that whole row tiles take do not."""
    plan_launch(1, 6, 16, 25_600_000_000, PlanOptions(whole_row_tiles=False, row_groups=3))
    with pytest.raises(ValueError, match="more work units than 32 bits count"):
        plan_launch(1, 6, 16, 25_600_000_000, PlanOptions(whole_row_tiles=True))
