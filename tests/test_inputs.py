"""Generated inputs: SGLang's extend layout tensor by tensor, pool scattering and poisoning,
determinism, realistic score spread, and check_inputs catching corrupted inputs with the tensor's name."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import ancestors, one_case, smoke_case

from ddbench.errors import InputError
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.layout import TENSOR_FIELDS, VerifyInputs
from ddbench.poison import poisoned_mask

# Labels (prefix of the case ID) of smoke cases covering: a DDTree, prefix 0, q_len 1, a ragged batch,
# a sampled prefix range, DeepSeek's 16 local heads, DP-attention's 64, and a paged pool.
LAYOUT_CASES = [
    "trees.kimi-k2.6-tp8-h8-bs1-p21-ddtree-b8",
    "trees.kimi-k2.6-tp8-h8-bs1-p21-medusa",
    "prefix0.",
    "q1.",
    "ragged.",
    "range.",
    "dsv3.",
    "dpattn.",
    "paged.",
]


def bits(t: torch.Tensor) -> torch.Tensor:
    """A view that compares bit-exactly (NaN == NaN with the same payload)."""
    if not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def logical_slots(x: VerifyInputs, r: int) -> torch.Tensor:
    kv, qo = x.kv_indptr.tolist(), x.qo_indptr.tolist()
    return torch.cat([x.kv_indices[kv[r] : kv[r + 1]], x.out_cache_loc[qo[r] : qo[r + 1]]])


# ---------------------------------------------------------------- layout


@pytest.mark.parametrize("label", LAYOUT_CASES)
def test_tensor_names_shapes_and_dtypes(smoke_cases, label):
    case = smoke_case(smoke_cases, label)
    x = generate_inputs(case)
    bs, heads, q_len = case.batch_size, case.heads_per_rank, case.q_len
    prefixes = list(case.prefix_lens)
    total = bs * q_len
    pool = x.k_buffer.shape[0]
    expected = {
        "q_extend": ((total, heads, 576), torch.bfloat16),
        "k_extend": ((total, 1, 576), torch.bfloat16),
        "v_extend": ((total, 1, 512), torch.bfloat16),
        "o_extend": ((total, heads, 512), torch.bfloat16),
        "k_buffer": ((pool, 1, 576), torch.bfloat16),
        "v_buffer": ((pool, 1, 512), torch.bfloat16),
        "qo_indptr": ((bs + 1,), torch.int32),
        "kv_indptr": ((bs + 1,), torch.int32),
        "kv_indices": ((sum(prefixes),), torch.int64),
        "out_cache_loc": ((total,), torch.int64),
        "custom_mask": ((sum(q_len * (p + q_len) for p in prefixes),), None),
        "mask_indptr": ((bs + 1,), torch.int64),
    }
    assert set(expected) == set(TENSOR_FIELDS)
    for name, (shape, dtype) in expected.items():
        t = getattr(x, name)
        assert tuple(t.shape) == shape, name
        if dtype is not None:
            assert t.dtype == dtype, name
    assert x.custom_mask.dtype in (torch.bool, torch.uint8)
    # v_buffer is the latent part of the pool, as a view (SGLang passes k_buffer[..., :512])
    assert x.v_buffer.data_ptr() == x.k_buffer.data_ptr()
    assert x.v_buffer.stride(0) == 576
    assert x.k_buffer.is_contiguous()
    assert torch.equal(bits(x.v_buffer), bits(x.k_buffer[..., :512]))
    assert torch.equal(x.v_extend, x.k_extend[..., :512])
    # offsets
    assert x.qo_indptr.tolist() == [q_len * r for r in range(bs + 1)]
    assert x.kv_indptr.tolist() == [sum(prefixes[:r]) for r in range(bs + 1)]
    assert x.mask_indptr.tolist() == [sum(q_len * (p + q_len) for p in prefixes[:r]) for r in range(bs + 1)]
    # scalars and metadata
    assert x.sm_scale == case.model.sm_scale
    assert x.max_len_extend == q_len
    assert x.page_size == case.page_size
    assert x.is_causal is True
    assert x.prefix_lens == tuple(prefixes)
    assert x.q_lens == (q_len,) * bs
    assert [t.q_len for t in x.trees] == [q_len] * bs


@pytest.mark.parametrize("label", LAYOUT_CASES)
def test_custom_mask_is_the_tree_with_row_stride_prefix_plus_q_len(smoke_cases, label):
    case = smoke_case(smoke_cases, label)
    x = generate_inputs(case)
    mask = x.custom_mask.bool()
    offsets = x.mask_indptr.tolist()
    for r, (tree, prefix) in enumerate(zip(x.trees, x.prefix_lens, strict=True)):
        q_len, stride = tree.q_len, prefix + tree.q_len
        vis = ancestors(tree.parents)
        block = mask[offsets[r] : offsets[r + 1]]
        for i in range(q_len):
            row = block[i * stride : (i + 1) * stride]
            assert bool(row[:prefix].all()), f"request {r} row {i}: prefix columns must be set"
            assert torch.equal(row[prefix:], vis[i]), f"request {r} row {i}: draft block != ancestor mask"
        # the root sees only itself among the drafts; every row sees itself
        assert int(block.view(q_len, stride)[:, prefix:].sum()) == sum(d + 1 for d in tree.depths)


def test_different_trees_per_request_in_a_ragged_batch(smoke_cases):
    x = generate_inputs(smoke_case(smoke_cases, "ragged."))
    assert x.prefix_lens == (0, 21, 130, 5)
    assert len({t.parents for t in x.trees}) > 1  # EAGLE trees are drawn per request


# ---------------------------------------------------------------- pool


@pytest.mark.parametrize("label", LAYOUT_CASES)
def test_pool_slots_distinct_used_rows_finite_unused_rows_nan(smoke_cases, label):
    x = generate_inputs(smoke_case(smoke_cases, label))
    pool = x.k_buffer.shape[0]
    used = torch.cat([x.kv_indices, x.out_cache_loc])
    assert used.unique().numel() == used.numel(), "two tokens share a pool slot"
    assert int(used.min()) >= 0 and int(used.max()) < pool
    is_used = torch.zeros(pool, dtype=torch.bool)
    is_used[used] = True
    assert bool(x.k_buffer[is_used].isfinite().all())
    assert bool(x.k_buffer[~is_used].isnan().all()), "an unused pool row is not all-NaN"
    assert int((~is_used).sum()) > 0


@pytest.mark.parametrize("label", ["trees.kimi-k2.6-tp8-h8-bs1-p21-ddtree-b8", "ragged.", "range.", "dsv3."])
def test_page_size_1_scatters_logical_neighbours(smoke_cases, label):
    x = generate_inputs(smoke_case(smoke_cases, label))
    assert x.page_size == 1
    for r in range(x.batch_size):
        slots = logical_slots(x, r)
        gaps = (slots[1:] - slots[:-1]).abs()
        assert bool((gaps != 1).all()), f"request {r}: consecutive tokens in consecutive pool rows"
        assert bool((gaps != 0).all())
    # and not simply ascending: the order in the pool is shuffled
    every = torch.cat([logical_slots(x, r) for r in range(x.batch_size)])
    if every.numel() > 8:
        assert not torch.equal(every, every.sort().values)


def test_page_size_16_keeps_tokens_in_whole_pages(smoke_cases):
    x = generate_inputs(smoke_case(smoke_cases, "paged."))
    assert x.page_size == 16
    assert x.k_buffer.shape[0] % 16 == 0
    pages_seen: list[set[int]] = []
    for r in range(x.batch_size):
        slots = logical_slots(x, r)
        token = torch.arange(slots.numel())
        assert torch.equal(slots % 16, token % 16), f"request {r}: token offset inside its page is wrong"
        page = slots // 16
        # tokens of one logical page share a pool page; the next logical page lives elsewhere, not adjacent
        for p in range(0, slots.numel(), 16):
            assert page[p : p + 16].unique().numel() == 1
        logical_pages = page[::16]
        assert logical_pages.unique().numel() == logical_pages.numel()
        assert bool(((logical_pages[1:] - logical_pages[:-1]).abs() != 1).all())
        pages_seen.append(set(logical_pages.tolist()))
    assert not (pages_seen[0] & pages_seen[1]), "two requests share a page"


@pytest.mark.parametrize("label", LAYOUT_CASES)
def test_draft_kv_is_in_the_pool_at_out_cache_loc(smoke_cases, label):
    x = generate_inputs(smoke_case(smoke_cases, label))
    assert torch.equal(x.k_buffer[x.out_cache_loc], x.k_extend)
    assert torch.equal(x.v_buffer[x.out_cache_loc], x.v_extend)
    assert bool(x.k_extend.isfinite().all()) and bool(x.q_extend.isfinite().all())
    assert float(x.k_extend.float().abs().amax()) > 0.5 and float(x.q_extend.float().abs().amax()) > 0


@pytest.mark.parametrize("label", LAYOUT_CASES)
def test_output_buffer_is_poisoned(smoke_cases, label):
    x = generate_inputs(smoke_case(smoke_cases, label))
    assert bool(poisoned_mask(x.o_extend).all())
    x.o_extend.zero_()
    assert not bool(poisoned_mask(x.o_extend).any())
    x.fresh_output()
    assert bool(poisoned_mask(x.o_extend).all())


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize("label", ["trees.kimi-k2.6-tp8-h8-bs1-p21-ddtree-b8", "ragged.", "paged."])
def test_same_case_gives_bit_identical_inputs(smoke_cases, label):
    case = smoke_case(smoke_cases, label)
    a, b = generate_inputs(case), generate_inputs(case)
    for name in TENSOR_FIELDS:
        assert torch.equal(bits(getattr(a, name)), bits(getattr(b, name))), name
    assert a.trees == b.trees


def test_different_seeds_give_different_inputs():
    a, b = generate_inputs(one_case(seed=1)), generate_inputs(one_case(seed=2))
    assert not torch.equal(a.q_extend, b.q_extend)
    assert not torch.equal(a.k_extend, b.k_extend)
    assert not torch.equal(a.out_cache_loc, b.out_cache_loc)


def test_different_workloads_with_seed_0_still_differ():
    a = generate_inputs(one_case(prefix=21))
    b = generate_inputs(one_case(prefix=22))
    assert not torch.equal(a.q_extend, b.q_extend)


# ---------------------------------------------------------------- realism


def scores(x: VerifyInputs) -> torch.Tensor:
    """sm_scale * q.k of every query and head against every prefix key: (T, H, prefix)."""
    keys = x.k_buffer[x.kv_indices, 0].double()
    return x.sm_scale * torch.einsum("thd,kd->thk", x.q_extend.double(), keys)


@pytest.mark.parametrize("spread", [1.0, 2.5, 6.0])
@pytest.mark.parametrize("seed", [0, 7])
def test_score_spread_is_what_the_case_asks(spread, seed):
    case = one_case(
        model="deepseek-v3",
        prefix=300,
        seed=seed,
        inputs={"logit_spread": spread},
        tree={"kind": "ddtree", "budget": 16},
    )
    s = scores(generate_inputs(case))[..., 1:]  # key 0 is the attention sink
    assert s.std().item() == pytest.approx(spread, rel=0.10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_prefix_token_is_an_attention_sink(seed):
    case = one_case(prefix=300, seed=seed, inputs={"logit_spread": 1.0, "sink_logit": 4.0})
    s = scores(generate_inputs(case))
    lift = (s[..., 0] - s[..., 1:].mean(-1)).mean().item()
    assert lift == pytest.approx(4.0, abs=1.5)


def draft_scores(x: VerifyInputs) -> torch.Tensor:
    """sm_scale * q.k of every query and head against every draft key: (T, H, q_len)."""
    keys = x.k_buffer[x.out_cache_loc, 0].double()
    return x.sm_scale * torch.einsum("thd,kd->thk", x.q_extend.double(), keys)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_recent_tokens_form_a_local_peak(seed):
    """The newest prefix token scores `local_logit` above the middle, half of it half a window back, nothing
    before the window; every draft token gets the full lift; the sink keeps its own."""
    peak = {"logit_spread": 1.0, "sink_logit": 4.0, "local_window": 64, "local_logit": 3.0}
    s = scores(generate_inputs(one_case(prefix=300, seed=seed, inputs=peak)))
    middle = s[..., 1:200].mean(-1)
    assert (s[..., -1] - middle).mean().item() == pytest.approx(3.0, abs=1.0)
    assert (s[..., -33] - middle).mean().item() == pytest.approx(1.5, abs=1.0)
    assert (s[..., 200:236] - middle[..., None]).mean().item() == pytest.approx(0.0, abs=0.3)
    assert (s[..., 0] - middle).mean().item() == pytest.approx(4.0, abs=1.5)
    x = generate_inputs(one_case(prefix=300, seed=seed, inputs=peak))
    assert (draft_scores(x).mean(-1) - middle).mean().item() == pytest.approx(3.0, abs=1.0)


def test_the_local_peak_is_drawn_last(monkeypatch):
    """On the same random stream, a peak changes only the window's keys, the drafts and the queries: it is
    drawn after everything else, so the inputs of cases without one are what they were before it existed."""
    monkeypatch.setattr("ddbench.inputs.generate.case_generator_seed", lambda case: 1234)
    plain = generate_inputs(one_case(prefix=80, seed=3))
    peaked = generate_inputs(one_case(prefix=80, seed=3, inputs={"local_window": 16, "local_logit": 2.0}))
    before = plain.kv_indices[: 80 - 16]
    assert torch.equal(plain.k_buffer[before], peaked.k_buffer[before])
    assert torch.equal(plain.kv_indices, peaked.kv_indices) and torch.equal(
        plain.custom_mask, peaked.custom_mask
    )
    window = plain.kv_indices[80 - 16 :]
    assert not torch.equal(plain.k_buffer[window], peaked.k_buffer[window])
    assert not torch.equal(plain.k_extend, peaked.k_extend) and not torch.equal(
        plain.q_extend, peaked.q_extend
    )


# ---------------------------------------------------------------- check_inputs


@pytest.mark.parametrize("label", LAYOUT_CASES)
def test_check_inputs_accepts_generated_inputs(smoke_cases, label):
    check_inputs(generate_inputs(smoke_case(smoke_cases, label)))


def _kv_out_of_range(x):
    x.kv_indices[3] = x.k_buffer.shape[0]


def _kv_negative(x):
    x.kv_indices[0] = -1


def _out_cache_loc_out_of_range(x):
    x.out_cache_loc[-1] = x.k_buffer.shape[0] + 5


def _nan_in_used_prefix_row(x):
    x.k_buffer[x.kv_indices[5], 0, 17] = float("nan")


def _inf_in_used_draft_row(x):
    x.k_buffer[x.out_cache_loc[2], 0, 570] = float("inf")
    x.k_extend[2, 0, 570] = float("inf")


def _mask_one_short(x):
    x.custom_mask = x.custom_mask[:-1]


def _mask_stride_prefix(x):
    """The classic marshaling bug: row stride prefix instead of prefix + q_len."""
    q_len, prefix = x.q_lens[0], x.prefix_lens[0]
    x.custom_mask = torch.ones(q_len * prefix, dtype=torch.bool)


def _mask_indptr_wrong(x):
    x.mask_indptr[-1] += 1


def _k_extend_differs(x):
    x.k_extend[4, 0, 100] += 1.0


def _k_extend_not_written(x):
    x.k_buffer[x.out_cache_loc[0]] = 0.25


def _v_extend_not_latent(x):
    x.v_extend[1, 0, 7] -= 1.0


def _v_buffer_copy(x):
    x.v_buffer = x.k_buffer[..., :512].clone()


def _qo_indptr_short(x):
    x.qo_indptr = x.qo_indptr[:-1]


def _nan_in_query(x):
    x.q_extend[0, 3, 9] = float("nan")


def _output_wrong_shape(x):
    x.o_extend = x.o_extend[:, :, :256]


def _bad_scale(x):
    x.sm_scale = float("nan")


@pytest.mark.parametrize(
    ("corrupt", "tensor"),
    [
        (_kv_out_of_range, "kv_indices"),
        (_kv_negative, "kv_indices"),
        (_out_cache_loc_out_of_range, "out_cache_loc"),
        (_nan_in_used_prefix_row, "k_buffer"),
        (_inf_in_used_draft_row, "k_buffer"),
        (_mask_one_short, "custom_mask"),
        (_mask_stride_prefix, "custom_mask"),
        (_mask_indptr_wrong, "mask_indptr"),
        (_k_extend_differs, "k_extend"),
        (_k_extend_not_written, "k_extend"),
        (_v_extend_not_latent, "v_extend"),
        (_v_buffer_copy, "v_buffer"),
        (_qo_indptr_short, "qo_indptr"),
        (_nan_in_query, "q_extend"),
        (_output_wrong_shape, "o_extend"),
        (_bad_scale, "sm_scale"),
    ],
)
def test_check_inputs_names_the_corrupted_tensor(corrupt, tensor):
    x = generate_inputs(one_case(seed=3))
    check_inputs(x)
    corrupt(x)
    with pytest.raises(InputError) as info:
        check_inputs(x, source="captured.safetensors")
    assert info.value.path == tensor
    assert info.value.file == "captured.safetensors"
    assert tensor in info.value.message and "captured.safetensors" in info.value.message


def test_check_inputs_rejects_falling_kv_indptr():
    case = one_case(batch_size=2, prefix=[30, 21])
    x = generate_inputs(case)
    check_inputs(x)
    x = dataclasses.replace(x, kv_indptr=torch.tensor([0, 52, 51], dtype=torch.int32))
    with pytest.raises(InputError) as info:
        check_inputs(x)
    assert info.value.path == "kv_indptr"
