"""The custom kernel (kernels/verify/verify_attn.cuh) run by the CPU emulation: the `cuda-emu` backend.

The CI parity proof: every case of suites/smoke.json and suites/kernel-parity.json runs with the backends it
names and must pass every judged bound (pairs naming the hardware backend `cuda` are skipped here). Then the
kernel's own edges: forced split counts and empty splits, the LSE output, fully masked rows, the poisoned
output buffer, ragged q_len (which no suite can express), and marshaling mistakes caught end to end.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path

import pytest
import torch

import ddbench.backends.cuda_emu as cuda_emu_module
import ddbench.kernel.launch as launch_module
from ddbench.backends import get_backend, prepared
from ddbench.backends.cuda_emu import CudaEmuBackend, KernelEmulationError
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.layout import VerifyInputs
from ddbench.inputs.suite_file import load_suite_file
from ddbench.kernel.marshal import marshal
from ddbench.kernel.work_split import (
    MERGE_NONE,
    MERGE_PART,
    cta_merges,
    cta_of_unit,
    parts_of_row_tile,
    request_extents,
)
from ddbench.metrics import FAIL, PASS, SKIPPED, judge, parity_figures
from ddbench.poison import poison_, poisoned_mask
from ddbench.runner import Session, SessionOptions, run_case
from ddbench.suite import Case, parse_suite

ROOT = Path(__file__).resolve().parents[1]
SUITES = [load_suite_file(ROOT / "suites" / name) for name in ("smoke.json", "kernel-parity.json")]
SUITE_CASES = [(suite.name, case) for suite in SUITES for case in suite.cases]


@pytest.fixture(scope="module")
def plans() -> dict[str, list[str]]:
    """case ID -> the backends the Session runs it on (each case's own, those some bound judges)."""
    out: dict[str, list[str]] = {}
    for suite in SUITES:
        out |= Session(SessionOptions(suites=(suite.path,))).plan
    return out


HARDWARE = "cuda"
NOT_RUN = {HARDWARE, "candidate"}  # the GPU kernel, and the role a user kernel is judged in (--as)
MAX_ROW_ULP, MEAN_ROW_ULP = 1.5, 0.2  # the suites' bound of cuda-emu against reference-fp64
LSE_ATOL = 2e-3  # P is rounded to bf16 before it is summed: |d lse| <= ln(1 + 2^-9) = 1.95e-3


def make_case(label: str = "t", **fields) -> Case:
    entry = {"label": label, "model": "kimi-k2.6", "layout": {"tp": 8}, "seed": 11, **fields}
    return parse_suite({"name": "emu", "cases": [entry]}, "tests/test_cuda_emu.py").cases[0]


def merge(parts: list[VerifyInputs]) -> VerifyInputs:
    """One batch from several generated ones, so q_len can differ between requests (stacked pools)."""
    pool_offset, qo, kv, mk = 0, [0], [0], [0]
    kv_indices, out_cache_loc = [], []
    for x in parts:
        kv_indices.append(x.kv_indices + pool_offset)
        out_cache_loc.append(x.out_cache_loc + pool_offset)
        pool_offset += x.k_buffer.shape[0]
        for prefix, q_len in zip(x.prefix_lens, x.q_lens, strict=True):
            qo.append(qo[-1] + q_len)
            kv.append(kv[-1] + prefix)
            mk.append(mk[-1] + q_len * (prefix + q_len))
    k_buffer = torch.cat([x.k_buffer for x in parts])
    k_extend = torch.cat([x.k_extend for x in parts])
    merged = VerifyInputs(
        q_extend=torch.cat([x.q_extend for x in parts]),
        k_extend=k_extend,
        v_extend=k_extend[..., :512].contiguous(),
        o_extend=poison_(torch.empty(k_extend.shape[0], parts[0].num_heads, 512, dtype=torch.bfloat16)),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :512],
        qo_indptr=torch.tensor(qo, dtype=torch.int32),
        kv_indptr=torch.tensor(kv, dtype=torch.int32),
        kv_indices=torch.cat(kv_indices),
        out_cache_loc=torch.cat(out_cache_loc),
        custom_mask=torch.cat([x.custom_mask for x in parts]),
        mask_indptr=torch.tensor(mk, dtype=torch.int64),
        sm_scale=parts[0].sm_scale,
        max_len_extend=max(x.max_len_extend for x in parts),
        prefix_lens=sum((x.prefix_lens for x in parts), ()),
        q_lens=sum((x.q_lens for x in parts), ()),
        trees=sum((x.trees for x in parts), ()),
    )
    check_inputs(merged)
    return merged


def ragged_q_len_inputs() -> VerifyInputs:
    parts = [(0, {"kind": "chain", "length": 1}), (70, {"kind": "ddtree", "budget": 32})]
    parts += [(31, {"kind": "star", "size": 65}), (5, {"kind": "ddtree", "budget": 8})]
    return merge([generate_inputs(make_case(f"part{i}", prefix=p, tree=t)) for i, (p, t) in enumerate(parts)])


def dense(x: VerifyInputs, visible_rows=None) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 attention and natural-log LSE, per request from the pool rows and each tree's ancestor mask
    (not from custom_mask); `visible_rows(r, visible)` may edit request r's (q_len, prefix + q_len) mask."""
    heads = x.num_heads
    out = torch.zeros(x.q_extend.shape[0], heads, 512, dtype=torch.float64)
    lse = torch.zeros(x.q_extend.shape[0], heads, dtype=torch.float64)
    qo, kv = x.qo_indptr.tolist(), x.kv_indptr.tolist()
    for r, tree in enumerate(x.trees):
        prefix, q_len = kv[r + 1] - kv[r], qo[r + 1] - qo[r]
        slots = torch.cat([x.kv_indices[kv[r] : kv[r + 1]], x.out_cache_loc[qo[r] : qo[r + 1]]])
        keys = x.k_buffer[slots, 0].double()
        visible = torch.ones(q_len, prefix + q_len, dtype=torch.bool)
        visible[:, prefix:] = tree.ancestor_mask()
        if visible_rows is not None:
            visible_rows(r, visible)
        s = x.sm_scale * torch.einsum("qhd,kd->qhk", x.q_extend[qo[r] : qo[r + 1]].double(), keys)
        s = s.masked_fill(~visible[:, None, :], -math.inf)
        lse[qo[r] : qo[r + 1]] = torch.logsumexp(s, dim=-1)
        out[qo[r] : qo[r + 1]] = torch.softmax(s, dim=-1).nan_to_num(0.0) @ keys[:, :512]
    return out, lse


def lse_buffer(x: VerifyInputs) -> torch.Tensor:
    return torch.full((x.q_extend.shape[0], x.num_heads), float("nan"), dtype=torch.float32)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The project runs pytest with -n 2 on small machines: two workers with two OpenMP threads each wait on
    each other's cores (see benchmarks/bench_inputs.py). The work here is Python-bound (Triton's
    interpreter) or single-threaded (the emulation): one torch thread per worker."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def emu():
    backend = CudaEmuBackend()
    available = backend.availability()
    assert available.ok, available.detail  # g++ is all it needs: no skip
    return backend


@pytest.fixture(scope="module")
def fp64():
    return get_backend("reference-fp64")


@pytest.fixture(scope="module")
def suite_backends(emu, fp64):
    imported_early = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
    if imported_early and not torch.cuda.is_available():
        pytest.fail("Triton was imported in this process before TRITON_INTERPRET=1 was set")
    triton = get_backend("triton")
    available = triton.availability()
    if not available.ok:
        pytest.skip(f"SGLang's Triton kernel cannot run here: {available.detail}")
    return {"reference": get_backend("reference"), "reference-fp64": fp64, "triton": triton, "cuda-emu": emu}


# ---------------------------------------------------------------- the suites, case by case


def _long(suite: str, case: Case) -> bool:
    """kernel-parity's cases and smoke's long prefixes take minutes here, and smoke's matrix of tree shapes
    the served buffers and DP attention half a minute more on every backend: the slow tier runs them. The
    quick tier keeps a ragged batch, DeepSeek's heads, pages, q_len 1 and an empty prefix (served buffers
    have their own quick tests: tests/test_served_buffers.py)."""
    quick = {"ragged", "dsv3", "paged", "q1", "prefix0"}
    return suite != "smoke" or max(case.prefix_lens) > 2048 or case.id.split(".")[0] not in quick


def test_the_suites_cover_the_kernel(plans):
    assert len(SUITE_CASES) >= 43
    assert all("cuda-emu" in plans[case.id] for _, case in SUITE_CASES)
    q_lens = {case.q_len for _, case in SUITE_CASES}
    assert {1, 9, 33, 65} <= q_lens
    assert 0 in {p for _, case in SUITE_CASES for p in case.prefix_lens}
    assert {16, 64} <= {case.page_size for _, case in SUITE_CASES}


@pytest.mark.triton
@pytest.mark.parametrize(
    ("suite", "case"),
    [pytest.param(s, c, marks=[pytest.mark.slow] if _long(s, c) else []) for s, c in SUITE_CASES],
    ids=[f"{s}/{c.id}" for s, c in SUITE_CASES],
)
def test_suite_case_passes_every_judged_bound(suite_backends, plans, suite, case):
    names = plans[case.id]
    assert HARDWARE not in names
    result = run_case(case, {n: suite_backends[n] for n in names}, torch.device("cpu"))
    assert result.error is None, result.error
    for name, run in result.runs.items():
        assert run.error is None, f"{name}: {run.error}"
    judged = 0
    for pair in result.pairs:
        where = f"{pair.candidate} vs {pair.against}"
        absent = next((n for n in NOT_RUN if n in (pair.candidate, pair.against)), None)
        if absent is not None:
            assert pair.verdict.status == SKIPPED, f"{where}: {pair.verdict}"
            assert pair.verdict.reasons == (f"{absent} not run",)
            continue
        assert pair.verdict.status == PASS, f"{where}: {'; '.join(pair.verdict.reasons)}"
        assert pair.figures is not None and pair.figures.unwritten == 0 and pair.figures.nan == 0
        judged += 1
    emu_pairs = [p for p in result.pairs if p.candidate == "cuda-emu" and p.figures is not None]
    assert {p.against for p in emu_pairs} >= {"reference-fp64", "triton"}
    assert judged == len(result.pairs) - sum(bool(NOT_RUN & {p.candidate, p.against}) for p in result.pairs)


# ---------------------------------------------------------------- split-KV


@pytest.fixture(scope="module")
def long_prefix():
    """Two requests: prefix 700 (23 key tiles) and 45; DDTree budget 16 (q_len 17)."""
    return generate_inputs(make_case(batch_size=2, prefix=[700, 45], tree={"kind": "ddtree", "budget": 16}))


def emu_with(splits: int | None, **kw) -> CudaEmuBackend:
    """1: one CTA per whole row tile (no combine); N > 1: N CTAs share the work units; None: the plan's."""
    if splits == 1:
        return CudaEmuBackend(whole_row_tiles=True, **kw)
    return CudaEmuBackend(ctas=splits, **kw)


@pytest.mark.parametrize(("row_groups", "row_tiles"), [(2, 5), (3, 3)])  # 17 x 8 rows in 32- or 48-row tiles
def test_forced_split_counts_agree(long_prefix, fp64, row_groups, row_tiles):
    x = long_prefix
    truth = fp64.run(x)
    outs = {}
    for splits in (1, 2, 5, 13):
        plan = emu_with(splits, row_groups=row_groups).marshaled_launch(x).plan
        whole = (2 * row_tiles, False)
        assert (plan.ctas, plan.combines) == ((splits, True) if splits > 1 else whole), plan
        out = emu_with(splits, row_groups=row_groups).run(x).clone()
        f = parity_figures(out, truth)
        assert f.unwritten == 0 and f.nan == 0 and f.inf == 0, splits
        assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, (splits, f)
        outs[splits] = out
    for a in outs:
        for b in outs:
            assert parity_figures(outs[a], outs[b]).max_row_ulp <= 1.0, (a, b)
    # the split count really changes the arithmetic (so the comparison above compares something)
    assert not torch.equal(outs[1], outs[5])


def test_more_splits_than_tiles(fp64):
    """30 keys are one tile, 3 row tiles: 3 units for 13 CTAs, 10 of them idle. Every row tile is one CTA's
    whole segment, so the combine has nothing to merge and the result is the unsplit one bit for bit."""
    x = generate_inputs(make_case(prefix=21, tree={"kind": "ddtree", "budget": 8}))
    one = emu_with(1).run(x).clone()
    many = emu_with(13).run(x).clone()
    assert bool(many.isfinite().all()) and not bool(poisoned_mask(many).any())
    assert torch.equal(many.view(torch.int16), one.view(torch.int16))
    assert parity_figures(many, fp64.run(x)).max_row_ulp <= MAX_ROW_ULP


def test_empty_splits_in_a_ragged_batch(long_prefix, fp64):
    """64 CTAs share 125 units (5 row tiles x 23 key tiles of the 700-key request, 5 x 2 of the 62-key one):
    parts of both requests' row tiles, and CTAs whose range crosses from one request into the other."""
    x = long_prefix
    out = emu_with(64).run(x).clone()
    assert bool(out.isfinite().all()) and not bool(poisoned_mask(out).any())
    f = parity_figures(out, fp64.run(x))
    assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP


def test_more_ctas_than_units_leaves_idle_ctas_between_the_parts(fp64):
    """109 keys x 3 row tiles = 12 units for 20 CTAs: 8 idle CTAs sit inside split row tiles' CTA spans, and
    the combine must skip their never-written slots (the workspace is poisoned NaN first)."""
    x = generate_inputs(make_case(prefix=100, tree={"kind": "ddtree", "budget": 8}))
    backend = emu_with(20)
    launch = backend.marshaled_launch(x)
    assert launch.plan.ctas == 20 and launch.plan.combines
    real = backend.marshaled_launch

    def poisoned(inputs):
        prepared = real(inputs)
        prepared.ws_o.fill_(float("nan"))
        prepared.ws_lse.fill_(float("nan"))
        prepared.ws_scale.fill_(float("nan"))
        return prepared

    backend.marshaled_launch = poisoned
    out = backend.run(x).clone()
    assert bool(out.isfinite().all()) and not bool(poisoned_mask(out).any())
    f = parity_figures(out, fp64.run(x))
    assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP


def test_a_combine_over_more_requests_than_a_warp_has_lanes(fp64):
    """40 requests: the combine's warps read them 32 at a time (two passes of place_row), and 37 CTAs' ranges
    cross from request to request, so rows of the second pass are merged from parts too."""
    x = generate_inputs(
        make_case(
            batch_size=40, prefix=[37 * r % 101 for r in range(40)], tree={"kind": "ddtree", "budget": 4}
        )
    )
    launch = emu_with(37).marshaled_launch(x)
    assert launch.plan.ctas == 37 and launch.plan.combines and x.batch_size > 32
    out = emu_with(37).run(x).clone()
    assert bool(out.isfinite().all()) and not bool(poisoned_mask(out).any())
    f = parity_figures(out, fp64.run(x))
    assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f
    assert not torch.equal(out, emu_with(1).run(x))  # the parts really were merged, not written whole


def test_a_combine_lists_a_row_tile_of_more_ctas_than_threads(fp64):
    """Two requests of 501 key tiles on 600 CTAs in clusters of 8, merged by the two-half combine (256
    threads): each row tile spans 300 CTAs, listed in two passes of the threads, and the second row tile's
    pass edge (CTA 556) falls inside a merging cluster, whose later CTAs hold no part: the parts after it
    must keep their places (they were listed 3 places early, outside the list, before parts_before knew such
    a c)."""
    x = generate_inputs(make_case(batch_size=2, prefix=[16000, 16000], tree={"kind": "chain", "length": 4}))
    backend = CudaEmuBackend(ctas=600, cluster=8, final_merge=False)
    plan = backend.marshaled_launch(x).plan
    assert (plan.ctas, plan.cluster, plan.combine_halves, plan.final_merge) == (600, 8, 2, False), plan
    out = backend.run(x).clone()
    assert bool(out.isfinite().all()) and not bool(poisoned_mask(out).any())
    f = parity_figures(out, fp64.run(x))
    assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f


def test_a_one_half_combine_lists_only_the_ctas_that_hold_a_part(fp64):
    """A long request beside seven short ones on 600 CTAs (more than the 289 units) in clusters of 8: its row
    tile spans 584 CTAs, listed by one half (the row tiles' average is few parts) in five passes, half of them
    CTAs without a part (empty ranges). Only the parts are listed, in CTA order (an earlier combine listed
    every CTA and weighed one without a part at a stale LSE: the output was 111 row-ULP off)."""
    x = generate_inputs(make_case(batch_size=8, prefix=[9000] + [0] * 7, tree={"kind": "chain", "length": 4}))
    backend = CudaEmuBackend(ctas=600, cluster=8, final_merge=False)
    launch = backend.marshaled_launch(x)
    plan, k = launch.plan, launch.kernel
    assert (plan.ctas, plan.cluster, plan.combine_halves, plan.final_merge) == (600, 8, 1, False), plan
    requests = request_extents(k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist(), plan.block_m)
    units, tiles = sum(g.units for g in requests), requests[0].tiles
    span = cta_of_unit(tiles - 1, units, plan.ctas) - cta_of_unit(0, units, plan.ctas) + 1
    assert span > 4 * 128 and len(parts_of_row_tile(plan, requests, 0, 0)) <= span // 2, span
    out = backend.run(x).clone()
    assert bool(out.isfinite().all()) and not bool(poisoned_mask(out).any())
    f = parity_figures(out, fp64.run(x))
    assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f


def test_emulation_workers_give_identical_results(long_prefix):
    one = emu_with(5, workers=1).run(long_prefix).clone()
    two = emu_with(5, workers=2).run(long_prefix).clone()
    assert torch.equal(one.view(torch.int16), two.view(torch.int16))


# ---------------------------------------------------------------- LSE


@pytest.mark.parametrize("row_groups", [2, 3])
@pytest.mark.parametrize("splits", [1, 4, None])
@pytest.mark.parametrize("inputs", ["long-prefix", "ragged-q_len"])
def test_lse_is_the_natural_log_sum_exp(long_prefix, splits, inputs, row_groups):
    x = long_prefix if inputs == "long-prefix" else ragged_q_len_inputs()
    backend = emu_with(splits, row_groups=row_groups)
    lse = lse_buffer(x)
    backend.run(x, lse=lse)
    _, truth = dense(x)
    error = (lse.double() - truth).abs()
    assert bool(lse.isfinite().all())
    assert float(error.max()) <= LSE_ATOL, float(error.max())
    assert float(error.mean()) <= 5e-4
    # the reference discriminates: without the tree mask (every draft visible) it is far off
    _, unmasked = dense(x, visible_rows=lambda r, visible: visible.fill_(True))
    assert float((lse.double() - unmasked).abs().max()) > 0.05
    # and in log2 units it would be far off too
    assert float((lse.double() / math.log(2) - truth).abs().max()) > 0.05


# ---------------------------------------------------------------- fully masked rows


def hide_row(x: VerifyInputs, r: int, i: int) -> VerifyInputs:
    """Clear every draft column of row i of request r (its ancestors and itself)."""
    prefix, q_len = x.prefix_lens[r], x.q_lens[r]
    mask = x.custom_mask.clone()
    start = int(x.mask_indptr[r]) + i * (prefix + q_len) + prefix
    mask[start : start + q_len] = False
    return dataclasses.replace(x, custom_mask=mask)


@pytest.mark.parametrize("row_groups", [2, 3])
@pytest.mark.parametrize("splits", [1, 3])
def test_a_fully_masked_row_gives_zeros_not_nan(splits, row_groups):
    """Prefix 0 and the root's own bit cleared (and, in the second request, all of row 5's): nothing is
    visible to those rows. Their output is 0, their LSE -inf; every other row is untouched."""
    x = generate_inputs(make_case(batch_size=2, prefix=[0, 0], tree={"kind": "ddtree", "budget": 8}))
    q_len = x.q_lens[0]
    hidden = hide_row(hide_row(x, 0, 0), 1, 5)
    assert not bool(hidden.custom_mask.view(2, q_len, q_len)[0, 0].any())
    backend = emu_with(splits, row_groups=row_groups)
    before = backend.run(x).clone()
    lse = lse_buffer(x)
    after = backend.run(hidden, lse=lse).clone()
    assert bool(after.isfinite().all()), "NaN/Inf from a fully masked row"
    masked_rows = [0, q_len + 5]
    assert not bool(after[masked_rows].float().any())
    assert bool((lse[masked_rows] == -math.inf).all())
    keep = [t for t in range(2 * q_len) if t not in masked_rows]
    assert torch.equal(after[keep].view(torch.int16), before[keep].view(torch.int16))
    assert bool(lse[keep].isfinite().all())


@pytest.mark.parametrize("splits", [1, 3])
def test_a_row_with_no_visible_draft_attends_to_the_prefix_only(splits, fp64):
    x = generate_inputs(make_case(prefix=40, tree={"kind": "ddtree", "budget": 8}))
    hidden = hide_row(hide_row(x, 0, 0), 0, 4)

    def prefix_only(r, visible):
        visible[[0, 4], 40:] = False

    truth, _ = dense(x, visible_rows=prefix_only)
    out = emu_with(splits).run(hidden).clone()
    f = parity_figures(out, truth)
    assert f.max_row_ulp <= MAX_ROW_ULP and f.nan == 0, f
    # the truth used here is what the reference computes for the edited mask, and not the unedited result
    assert parity_figures(out, fp64.run(hidden)).max_row_ulp <= MAX_ROW_ULP
    assert parity_figures(out[[0, 4]], fp64.run(x)[[0, 4]]).max_row_ulp > 10


# ---------------------------------------------------------------- the output buffer


@pytest.mark.parametrize("row_groups", [2, 3])
@pytest.mark.parametrize("splits", [1, 6])
def test_every_element_of_the_poisoned_output_is_written(emu, splits, row_groups):
    x = generate_inputs(make_case(batch_size=3, prefix=[0, 300, 33], tree={"kind": "ddtree", "budget": 16}))
    x.fresh_output()
    assert bool(poisoned_mask(x.o_extend).all())
    out = emu_with(splits, row_groups=row_groups).run(x)
    assert out.data_ptr() == x.o_extend.data_ptr()  # written in place, like SGLang's kernels
    assert not bool(poisoned_mask(out).any())
    assert bool(out.isfinite().all())


def test_a_launch_that_misses_rows_leaves_the_poison(monkeypatch):
    """A plan one row tile short: the last tile's rows keep the poison, which the figures count."""
    x = generate_inputs(make_case(prefix=21, tree={"kind": "ddtree", "budget": 8}))  # 9 x 8 rows: 3 tiles
    real = launch_module.prepare_launch

    def short(inputs, **kw):
        launch = real(inputs, **kw)
        plan = launch.plan
        fewer = dataclasses.replace(plan, ctas=plan.ctas - 1)
        return dataclasses.replace(launch, plan=fewer)

    monkeypatch.setattr(cuda_emu_module, "prepare_launch", short)
    x.fresh_output()
    out = emu_with(1).run(x)
    unwritten = poisoned_mask(out)
    assert int(unwritten.sum()) == 8 * 512  # rows 64..71 = tokens 8 (all 8 heads)
    assert bool(unwritten[8].all()) and not bool(unwritten[:8].any())
    assert parity_figures(out, torch.zeros(out.shape, dtype=torch.float64)).unwritten == 8 * 512


# ---------------------------------------------------------------- ragged q_len, end to end


@pytest.mark.parametrize("row_groups", [2, 3])
@pytest.mark.parametrize("splits", [None, 3])
def test_ragged_q_len_batch(fp64, splits, row_groups):
    x = ragged_q_len_inputs()
    assert x.q_lens == (1, 33, 65, 9) and x.prefix_lens == (0, 70, 31, 5)
    out = emu_with(splits, row_groups=row_groups).run(x).clone()
    truth = fp64.run(x)
    f = parity_figures(out, truth)
    assert f.unwritten == 0 and f.nan == 0
    assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f
    dense_truth, _ = dense(x)
    assert parity_figures(out, dense_truth).max_row_ulp <= MAX_ROW_ULP


# ---------------------------------------------------------------- marshaling mistakes, end to end


def wrong_stride_words(x: VerifyInputs) -> torch.Tensor:
    """The mask bit words as a port that takes `prefix` for the row stride would build them."""
    qo, kv, mk = x.qo_indptr.tolist(), x.kv_indptr.tolist(), x.mask_indptr.tolist()
    mask = x.custom_mask.tolist()
    words_per_row = -(-x.max_len_extend // 32)
    words = torch.zeros(x.q_extend.shape[0], words_per_row, dtype=torch.int64)
    for r in range(x.batch_size):
        prefix, q_len = kv[r + 1] - kv[r], qo[r + 1] - qo[r]
        for i in range(q_len):
            start = mk[r] + i * prefix + prefix
            for j in range(q_len):
                if mask[start + j]:
                    words[qo[r] + i, j // 32] |= 1 << (j % 32)
    return (words - (words >= 2**31).long() * 2**32).to(torch.int32)


@pytest.mark.parametrize("mistake", ["row-stride-prefix", "drafts-left-out"])
def test_marshaling_mistakes_fail_parity(monkeypatch, fp64, mistake):
    case = make_case(batch_size=2, prefix=[40, 129], tree={"kind": "ddtree", "budget": 16})
    x = generate_inputs(case)
    truth = fp64.run(x)
    bound = next(
        b
        for _, c in SUITE_CASES
        for b in c.parity
        if (b.candidate, b.against) == ("cuda-emu", "reference-fp64")
    )
    right = CudaEmuBackend().run(x).clone()
    assert judge(bound, parity_figures(right, truth), "cuda-emu").status == PASS

    def wrong_marshal(inputs):
        k = marshal(inputs)
        if mistake == "row-stride-prefix":
            return dataclasses.replace(k, mask_words=wrong_stride_words(inputs))
        return dataclasses.replace(k, kv_offsets=inputs.kv_indptr.to(torch.int32))  # keys: the prefix alone

    monkeypatch.setattr(launch_module, "marshal", wrong_marshal)
    wrong = CudaEmuBackend().run(x).clone()
    verdict = judge(bound, parity_figures(wrong, truth), "cuda-emu")
    assert verdict.status == FAIL and any(r.startswith("max_row_ulp") for r in verdict.reasons), verdict


# ---------------------------------------------------------------- availability and errors


def test_the_hardware_backend_is_unavailable_here_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    available = get_backend("cuda").availability()
    assert not available.ok
    assert "CUDA" in available.detail


def test_the_emulation_reports_a_bad_launch_instead_of_crashing(monkeypatch):
    x = generate_inputs(make_case(prefix=21, tree={"kind": "ddtree", "budget": 8}))
    with pytest.raises(KernelEmulationError, match=r"invalid grid \(0,1,1\)"):
        emu_with(0).run(x)
    real = launch_module.prepare_launch

    def no_combine_threads(inputs, **kw):
        launch = real(inputs, **kw)
        return dataclasses.replace(launch, plan=dataclasses.replace(launch.plan, combine_halves=0))

    monkeypatch.setattr(cuda_emu_module, "prepare_launch", no_combine_threads)
    with pytest.raises(KernelEmulationError, match="combine_halves 1 or 2, not 2 and 0"):
        emu_with(5).run(x)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("combine_rows", 0, "combine_rows must be 1 to 64, not 0"),
        ("combine_rows", 65, "combine_rows must be 1 to 64, not 65"),
        ("ctas", 18689, "a split row tile's merge lists at most 18688 CTAs, not 18689"),
    ],
)
def test_the_emulated_launcher_refuses_a_combine_it_cannot_run(monkeypatch, field, value, message):
    """What the plan refuses, the launcher refuses too (a caller may build a plan by hand): rows a combine
    CTA merges outside 1-64, and more CTAs than a row tile's list of parts holds."""
    x = generate_inputs(make_case(prefix=21, tree={"kind": "ddtree", "budget": 8}))
    real = launch_module.prepare_launch

    def forced(inputs, **kw):
        launch = real(inputs, **kw)
        return dataclasses.replace(launch, plan=dataclasses.replace(launch.plan, **{field: value}))

    monkeypatch.setattr(cuda_emu_module, "prepare_launch", forced)
    with pytest.raises(KernelEmulationError, match=message):
        emu_with(5).run(x)


# ---------------------------------------------------------------- prepare, then launch


def test_the_prepared_launch_is_the_kernel_alone(monkeypatch, emu):
    """Marshaling and plan happen once, in `prepare`; calling the launch again re-runs only the kernel,
    into the same (re-poisoned) output, with the same bits as `run`."""
    x = generate_inputs(make_case(prefix=21, tree={"kind": "ddtree", "budget": 8}))
    real, marshaled = cuda_emu_module.prepare_launch, []

    def counted(inputs, **kw):
        marshaled.append(inputs)
        return real(inputs, **kw)

    monkeypatch.setattr(cuda_emu_module, "prepare_launch", counted)
    launch = prepared(emu, x)
    assert len(marshaled) == 1
    first = launch().clone()
    x.fresh_output()
    second = launch()
    assert len(marshaled) == 1  # not marshaled again
    assert second.data_ptr() == x.o_extend.data_ptr() and not bool(poisoned_mask(second).any())
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))
    assert torch.equal(emu.run(x).view(torch.int16), first.view(torch.int16)) and len(marshaled) == 2


def test_the_mutants_keep_their_mistakes_through_prepare():
    """The self-test's seam (`marshaled_launch`) and output edits act in the prepared launch as in `run`."""
    from ddbench.explain.mutants import get_mutant

    x = generate_inputs(make_case(prefix=21, tree={"kind": "ddtree", "budget": 8}))
    right = CudaEmuBackend().run(x).clone()
    transposed = prepared(get_mutant("mutant-emu:output-transposed"), x)().clone()
    heads = right.shape[1]
    assert torch.equal(transposed, right.permute(1, 0, 2).reshape(-1, heads, right.shape[2]))
    stride = get_mutant("mutant-emu:mask-stride")
    assert not torch.equal(prepared(stride, x)().clone(), right)
    assert torch.equal(stride.run(x), prepared(stride, x)())


def test_lse_goes_through_prepared_only_where_declared(emu):
    x = generate_inputs(make_case(prefix=21, tree={"kind": "ddtree", "budget": 8}))
    lse = lse_buffer(x)
    prepared(emu, x, lse=lse)()
    assert bool(lse.isfinite().all())
    with pytest.raises(ValueError, match="does not declare an LSE output"):
        prepared(get_backend("reference"), x, lse=lse_buffer(x))


def test_the_hardware_backends_launch_is_the_extension_call_alone(monkeypatch):
    """`cuda` without a GPU: a fake extension shows that device properties, marshaling and workspace are
    all in `prepare`, and that the launch makes one extension call with the prepared arguments."""
    import ddbench.backends.cuda_kernel as cuda_kernel_module

    x = generate_inputs(make_case(batch_size=2, prefix=[700, 45], tree={"kind": "ddtree", "budget": 16}))
    calls: list[tuple] = []
    counted = {"properties": 0, "marshal": 0}

    class FakeExtension:
        @staticmethod
        def verify(*arguments):
            calls.append(arguments)

    class Properties:
        multi_processor_count = 188
        name = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
        major = 12  # sm_120: thread-block clusters

    def properties(device):
        counted["properties"] += 1
        return Properties()

    real = cuda_kernel_module.prepare_launch

    def marshaled(inputs, **kw):
        counted["marshal"] += 1
        return real(inputs, **kw)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(cuda_kernel_module, "prepare_launch", marshaled)
    backend = cuda_kernel_module.CudaKernelBackend(ctas=4)
    backend._extension = FakeExtension()  # what _load returns once built
    lse = lse_buffer(x)
    launch = prepared(backend, x, lse=lse)
    assert counted == {"properties": 1, "marshal": 1} and not calls
    for _ in range(3):
        assert launch() is x.o_extend
    assert counted == {"properties": 1, "marshal": 1} and len(calls) == 3
    arguments = calls[0]
    assert arguments[2] is not None and arguments[2].data_ptr() == x.k_extend.data_ptr()  # drafts in place
    assert arguments[3].data_ptr() == x.kv_indices.data_ptr()  # SGLang's kv_indices, read in place
    assert arguments[8] is x.o_extend and arguments[9] is lse
    assert arguments[10].shape[0] == 8 and arguments[12].shape == (8, 32, 4)  # two parts per CTA, in prepare
    assert arguments[13] is None  # no clusters, so no final merge: no arrival counters, the combine runs
    assert arguments[15] == 4  # the CTAs
    assert arguments[19] == 1  # forced CTAs: no clusters
    assert all(a is b for a, b in zip(calls[0], calls[2], strict=True))  # the very same tensors each launch


@pytest.mark.parametrize(
    ("label", "inputs"),
    [
        ("huge", {"latent_scale": 1000.0, "outlier_channels": 8, "outlier_scale": 1000.0}),  # outputs ~1e6
        ("tiny", {"latent_scale": 1e-6, "latent_spread": 1.0, "sink_logit": 0.0}),  # outputs ~1e-6
    ],
)
@pytest.mark.parametrize("row_groups", [2, 3])
def test_the_fp16_parts_keep_their_precision_whatever_the_range(fp64, label, inputs, row_groups):
    """Parts are fp16 scaled per row quarter by a power of two: outputs of 1e6 (fp16 overflows at 65504)
    and of 1e-6 (subnormal in fp16) come through split row tiles as exactly as outputs of 1."""
    x = generate_inputs(make_case(label, prefix=300, inputs=inputs, tree={"kind": "ddtree", "budget": 8}))
    backend = emu_with(12, row_groups=row_groups)
    assert backend.marshaled_launch(x).plan.combines
    out = backend.run(x).clone()
    truth = fp64.run(x)
    magnitude = float(truth.abs().amax())
    assert (magnitude > 1e5) if label == "huge" else (magnitude < 1e-4), magnitude
    f = parity_figures(out, truth)
    assert bool(out.isfinite().all())
    assert f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP and f.max_channel_ulp <= 1.5, f


@pytest.fixture(scope="module")
def ragged_three():
    """Requests of 17, 1 and 17 tokens x 8 heads (136, 8 and 136 rows, no multiple of 5 or 16), the middle one
    a single key: its row tile is one unit, whole in one CTA however the others split."""
    return merge(
        [
            generate_inputs(make_case(prefix=700, tree={"kind": "ddtree", "budget": 16})),
            generate_inputs(make_case(prefix=0, tree={"kind": "chain", "length": 1})),
            generate_inputs(make_case(prefix=300, tree={"kind": "ddtree", "budget": 16})),
        ]
    )


@pytest.mark.parametrize("combine_rows", [2, 5, 16, 64])
def test_a_combine_cta_of_many_rows_merges_them_as_one_of_one_row_does(ragged_three, combine_rows):
    """A combine CTA of R rows crosses row tiles (48 rows) and requests, a segment each, skips the row tile
    written whole, and its warps each merge a row with the same arithmetic a half merged it with: the bits
    of one row a CTA."""
    x = ragged_three
    one = CudaEmuBackend(ctas=40, row_groups=3, combine_rows=1)
    many = CudaEmuBackend(ctas=40, row_groups=3, combine_rows=combine_rows)
    launch = many.marshaled_launch(x)
    plan, k = launch.plan, launch.kernel
    assert (plan.combines, plan.combine_halves, plan.combine_rows) == (True, 1, combine_rows), plan
    requests = request_extents(k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist(), plan.block_m)
    parts = [
        [len(parts_of_row_tile(plan, requests, r, t)) for t in range(g.row_tiles)]
        for r, g in enumerate(requests)
    ]
    assert parts[1] == [0] and all(n > 1 for n in parts[0] + parts[2]), parts
    lse_one, lse_many = lse_buffer(x), lse_buffer(x)
    out_one = one.run(x, lse=lse_one).clone()
    out_many = many.run(x, lse=lse_many).clone()
    assert not bool(poisoned_mask(out_many).any())
    assert torch.equal(out_one, out_many) and torch.equal(lse_one, lse_many)


def test_a_two_half_combine_of_many_rows_deals_them_to_its_eight_warps(fp64):
    """Two halves (row tiles of many parts) and 8 rows a CTA: rows go a warp each, every part added in order
    (not every other part by each half, as with one row a CTA): the same bits at 8 and 64 rows a CTA."""
    x = generate_inputs(make_case(prefix=2000, tree={"kind": "chain", "length": 4}))
    outs = []
    for combine_rows in (8, 64):
        backend = CudaEmuBackend(ctas=40, combine_rows=combine_rows)
        plan = backend.marshaled_launch(x).plan
        assert (plan.combine_halves, plan.combine_rows) == (2, combine_rows), plan
        lse = lse_buffer(x)
        outs.append((backend.run(x, lse=lse).clone(), lse))
    (out, lse), (other, other_lse) = outs
    assert torch.equal(out, other) and torch.equal(lse, other_lse)
    f = parity_figures(out, fp64.run(x))
    assert f.unwritten == 0 and f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f
    _, truth = dense(x)
    assert float((lse.double() - truth).abs().max()) <= LSE_ATOL


@pytest.mark.parametrize(("ctas", "halves"), [(8, 1), (40, 2)])
def test_the_combine_merges_alike_in_one_half_or_two(fp64, ctas, halves):
    """One row tile (4 tokens x 8 heads) over 63 key tiles: 40 CTAs are 40 parts a row, merged by two
    halves of the combine CTA (every other part each); 8 by one."""
    x = generate_inputs(make_case(prefix=2000, tree={"kind": "chain", "length": 4}))
    backend = emu_with(ctas)
    plan = backend.marshaled_launch(x).plan
    assert (plan.row_tiles, plan.combine_halves) == (1, halves)
    lse = lse_buffer(x)
    out = backend.run(x, lse=lse).clone()
    f = parity_figures(out, fp64.run(x))
    assert f.unwritten == 0 and f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f
    _, truth = dense(x)
    assert float((lse.double() - truth).abs().max()) <= LSE_ATOL


@pytest.mark.parametrize("row_groups", [2, 3])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_poisoned_key_in_one_part_reaches_the_output_through_the_combine(bad, row_groups):
    """A non-finite key in one part of a split row tile makes the rows that see it non-finite (a NaN/Inf
    element never sets the part's fp16 scale, so the other columns keep theirs); the other request's rows,
    which never read it, stay exact."""
    case = make_case("poison", batch_size=2, prefix=[300, 40], tree={"kind": "chain", "length": 4})
    x = generate_inputs(case)
    reference = get_backend("reference").run(x).clone()
    x.k_buffer[x.kv_indices[250], 0, 7] = bad  # a prefix key of request 0, in a late part
    backend = emu_with(16, row_groups=row_groups)
    assert backend.marshaled_launch(x).plan.combines
    out = backend.run(x).clone()
    first = out[: x.q_lens[0]]
    assert bool((~first.isfinite()).any(-1).all())  # every row of request 0 (each sees the whole prefix)
    second = out[x.q_lens[0] :]
    f = parity_figures(second, reference[x.q_lens[0] :])
    assert bool(second.isfinite().all()) and f.max_row_ulp <= MAX_ROW_ULP


# ------------------------------------------------------------------------- thread-block clusters --


def test_a_cluster_covering_its_row_tile_writes_what_the_combine_would(fp64):
    """One row tile (4 tokens x 8 heads) over 63 key tiles in 8 CTAs: as one cluster they merge their parts
    through distributed shared memory into the output, bit for bit what the combine makes of the same 8
    parts (same order, same arithmetic); as two clusters of 4, two merged parts go to the combine."""
    x = generate_inputs(make_case(prefix=2000, tree={"kind": "chain", "length": 4}))
    outs, lses = {}, {}
    for cluster in (1, 4, 8):
        backend = CudaEmuBackend(ctas=8, cluster=cluster)
        assert backend.marshaled_launch(x).plan.cluster == cluster
        lses[cluster] = lse_buffer(x)
        run = backend.run_traced(x, lse=lses[cluster], counters=True, sanitize=True)
        assert run.sanitizer.clean, run.sanitizer.summary()
        outs[cluster] = run.out.clone()
        verify = run.counters.kernel("verify")
        assert verify.totals.cluster_barriers == (0 if cluster == 1 else 2 * 8)
        f = parity_figures(outs[cluster], fp64.run(x))
        assert f.unwritten == 0 and f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, cluster
        x.fresh_output()
    assert torch.equal(outs[8], outs[1]) and torch.equal(lses[8], lses[1])
    assert not torch.equal(outs[4], outs[1])  # two levels of parts: rounded once more, so not the same bits


@pytest.mark.parametrize(("ctas", "cluster", "row_groups"), [(30, 5, 2), (12, 2, 3), (16, 8, 3), (40, 4, 2)])
def test_clusters_merge_where_their_units_lie_in_one_row_tile(long_prefix, fp64, ctas, cluster, row_groups):
    """A ragged batch's ranges fall inside one row tile only in places: those clusters merge (each CTA reads
    its rows of every part over distributed shared memory), the others write their parts as without clusters
    and read only each other's part tails (to arrive for them rank by rank), exactly where the host's mirror
    says; either way two cluster barriers a CTA, the output is fp64's, the sanitizer is clean, workers change
    nothing."""
    x = long_prefix
    backend = CudaEmuBackend(ctas=ctas, cluster=cluster, row_groups=row_groups)
    launch = backend.marshaled_launch(x)
    k = launch.kernel
    requests = request_extents(k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist(), launch.plan.block_m)
    expected = [m != MERGE_NONE for m in cta_merges(launch.plan, requests)]
    run = backend.run_traced(x, counters=True, sanitize=True)
    assert run.sanitizer.clean, run.sanitizer.summary()
    verify = run.counters.kernel("verify")
    assert {s.cluster_barriers for s in verify.cta_shapes} == {2}
    tails = 2 * cluster * (16 + 8) + cluster * 4  # every CTA's two part places and rows, and its parts word
    assert [s.cluster_bytes > tails for s in verify.cta_shapes] == expected
    assert all(
        0 < s.cluster_bytes <= tails
        for s, merges in zip(verify.cta_shapes, expected, strict=True)
        if not merges
    )
    assert any(expected) == (cluster != 8)  # clusters of 8 CTAs here always straddle two row tiles
    out = run.out.clone()
    f = parity_figures(out, fp64.run(x))
    assert f.unwritten == 0 and f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f
    x.fresh_output()
    again = CudaEmuBackend(ctas=ctas, cluster=cluster, row_groups=row_groups, workers=2).run(x)
    assert torch.equal(again, out)


def test_a_poisoned_key_reaches_the_output_through_a_cluster_merge():
    """A NaN key in the range of a merging cluster: the merged part carries it (its LSE is NaN, never an
    empty part), and the combine puts it in every row of that request; the other request stays exact."""
    case = make_case("poison", batch_size=2, prefix=[300, 40], tree={"kind": "chain", "length": 4})
    x = generate_inputs(case)
    reference = get_backend("reference").run(x).clone()
    backend = CudaEmuBackend(ctas=8, cluster=4)
    launch = backend.marshaled_launch(x)
    k = launch.kernel
    requests = request_extents(k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist(), launch.plan.block_m)
    assert cta_merges(launch.plan, requests)[:4] == [MERGE_PART] * 4  # key tiles 0-5 of request 0
    x.k_buffer[x.kv_indices[50], 0, 7] = float("nan")  # key tile 1
    out = backend.run(x).clone()
    first = out[: x.q_lens[0]]
    assert bool(first.isnan().any(-1).all())
    second = out[x.q_lens[0] :]
    f = parity_figures(second, reference[x.q_lens[0] :])
    assert bool(second.isfinite().all()) and f.max_row_ulp <= MAX_ROW_ULP


@pytest.mark.parametrize(
    ("resident", "ctas", "cluster", "asked"),
    [(20, 160, 8, [(8, 3), (8, 3)]), (19, 162, 1, [(8, 3), (5, 3)])],
)
def test_the_hardware_backend_keeps_clusters_only_where_the_gpu_runs_them_all_at_once(
    monkeypatch, resident, ctas, cluster, asked
):
    """bs1 q9 p32k on an RTX PRO 6000 is planned as 160 CTAs in 20 clusters of 8. The plan asks the GPU how
    many clusters of 8 it runs at once (a cluster's CTAs need SMs of one GPC): with 19, 81 parts a row tile
    go in clusters of 5 instead; a GPU that then holds only 19 of those gets the plan without clusters."""
    import ddbench.backends.cuda_kernel as cuda_kernel_module

    x = generate_inputs(make_case(prefix=32768, tree={"kind": "ddtree", "budget": 8}))
    asked_sizes: list[tuple[int, int]] = []

    class FakeExtension:
        @staticmethod
        def verify(*arguments):
            raise AssertionError("prepare must not launch")

        @staticmethod
        def max_active_clusters(size, row_groups):
            asked_sizes.append((size, row_groups))
            return resident

    class Properties:
        multi_processor_count = 188
        name = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
        major = 12

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Properties())
    backend = cuda_kernel_module.CudaKernelBackend()
    backend._extension = FakeExtension()
    captured = {}
    real = cuda_kernel_module.prepare_launch

    def keep(inputs, **kw):
        captured["launch"] = real(inputs, **kw)
        return captured["launch"]

    monkeypatch.setattr(cuda_kernel_module, "prepare_launch", keep)
    prepared(backend, x)
    assert asked_sizes == asked
    plan = captured["launch"].plan
    assert (plan.ctas, plan.cluster, plan.final_merge) == (ctas, cluster, cluster > 1)


def test_merged_parts_go_through_a_two_half_combine(fp64):
    """One row tile over 126 key tiles in 64 CTAs, clusters of 2: 32 merged parts a row, which the combine
    splits between its two halves (every other merged part each); the slots of the clusters' second CTAs
    are skipped, not read."""
    x = generate_inputs(make_case(prefix=4000, tree={"kind": "chain", "length": 4}))
    backend = CudaEmuBackend(ctas=64, cluster=2)
    plan = backend.marshaled_launch(x).plan
    assert (plan.row_tiles, plan.cluster, plan.combine_halves) == (1, 2, 2)
    lse = lse_buffer(x)
    run = backend.run_traced(x, lse=lse, counters=False, sanitize=True)
    assert run.sanitizer.clean, run.sanitizer.summary()
    f = parity_figures(run.out, fp64.run(x))
    assert f.unwritten == 0 and f.max_row_ulp <= MAX_ROW_ULP and f.mean_row_ulp <= MEAN_ROW_ULP, f
    _, truth = dense(x)
    assert float((lse.double() - truth).abs().max()) <= LSE_ATOL
