"""Deterministic synthetic inputs for one case, in SGLang's extend layout.

Realism that matters for parity: score spread like a real model's (not tiny logits that make softmax flat),
an attention-sink token, optionally a peak on the recent tokens, per-channel scale in the latent KV,
scattered pool slots, NaN in every unused pool row so a stray read poisons the output, and per-request
trees drawn from the case's tree spec.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import torch

from ddbench.errors import InputError
from ddbench.inputs.capture_file import read_capture
from ddbench.inputs.layout import VerifyInputs
from ddbench.inputs.pool import pool_layout, scatter_slots
from ddbench.inputs.served_buffers import over_allocated
from ddbench.poison import poison_
from ddbench.suite.ids import canonical_json
from ddbench.suite.model import Case
from ddbench.suite.presets import HEAD_DIM_QK, HEAD_DIM_V
from ddbench.trees import Tree, build_tree

DTYPES = {"bfloat16": torch.bfloat16}


def case_generator_seed(case: Case) -> int:
    """Every distinct workload gets its own random stream, even when suites leave `seed` at 0."""
    return int(hashlib.sha256(canonical_json(case.workload()).encode()).hexdigest()[:15], 16)


def request_trees(case: Case) -> tuple[Tree, ...]:
    """One tree per request (its own spec when the case gives one per request): stochastic kinds (EAGLE,
    DDTree, Medusa) differ between requests."""
    return tuple(build_tree(case.tree_of(r), seed=case.seed * 4099 + r) for r in range(case.batch_size))


def _ancestor_rows(tree: Tree, prefix: int) -> torch.Tensor:
    """q_len rows of SGLang's custom mask: every prefix column set, then the tree's ancestor mask."""
    rows = torch.ones(tree.q_len, prefix + tree.q_len, dtype=torch.bool)
    rows[:, prefix:] = tree.ancestor_mask()
    return rows


def generate_inputs(case: Case, device: torch.device | str = "cpu") -> VerifyInputs:
    """Build on the CPU from the case's seed (bit-identical on every machine), then move to `device`.
    A replayed capture is read from its file instead (with the output the serving kernel produced)."""
    if case.capture is not None:
        return _replayed(case, device)
    g = torch.Generator().manual_seed(case_generator_seed(case))
    dtype = DTYPES[case.dtype]
    heads, q_lens = case.heads_per_rank, list(case.q_lens)
    prefixes = list(case.prefix_lens)
    trees = request_trees(case)
    total_q = case.total_q

    request_keys = [p + q for p, q in zip(prefixes, q_lens, strict=True)]
    slots, pool_rows = scatter_slots(request_keys, case.page_size, g, _pool_rows(case))
    prefix_slots = [s[:p] for s, p in zip(slots, prefixes, strict=True)]
    draft_slots = [s[p:] for s, p in zip(slots, prefixes, strict=True)]

    # Keys: per-channel gain on the latent part (like a normed latent with learned scales), a few outlier
    # channels, the rope part at its own scale.
    style = case.inputs
    latent = torch.exp(style.latent_spread * torch.randn(HEAD_DIM_V, generator=g)) * style.latent_scale
    if style.outlier_channels:
        latent[torch.randperm(HEAD_DIM_V, generator=g)[: style.outlier_channels]] *= style.outlier_scale
    gain = torch.cat([latent, torch.full((HEAD_DIM_QK - HEAD_DIM_V,), style.rope_scale)])
    n_tokens = sum(prefixes) + total_q
    keys = torch.randn(n_tokens, HEAD_DIM_QK, generator=g) * gain

    # Queries scaled so that sm_scale * q.k has the requested standard deviation.
    q_std = case.inputs.logit_spread / (case.model.sm_scale * gain.square().sum().sqrt())
    queries = torch.randn(total_q, heads, HEAD_DIM_QK, generator=g) * q_std
    # Attention sink: every query leans a little toward one direction; the first prefix token of each
    # request points along it, scoring `sink_logit` above the rest on average.
    sink_dir = torch.randn(HEAD_DIM_QK, generator=g)
    sink_dir /= sink_dir.norm()
    lean = float(q_std) * math.sqrt(HEAD_DIM_QK) / 4
    queries += lean * sink_dir
    start = 0
    for p in prefixes:
        if p > 0:
            keys[start] += case.inputs.sink_logit / (case.model.sm_scale * lean) * sink_dir
        start += p
    if style.local_window > 0 and style.local_logit > 0:  # drawn last: inputs without a peak do not move
        queries += lean * _local_peak(
            keys, prefixes, style.local_window, style.local_logit / (case.model.sm_scale * lean), sink_dir, g
        )

    k_buffer = torch.full((pool_rows, 1, HEAD_DIM_QK), float("nan"), dtype=dtype)
    order = torch.cat([torch.cat(prefix_slots), torch.cat(draft_slots)])
    k_buffer[order, 0] = keys.to(dtype)  # keys are numbered like `order`: all prefixes, then all drafts

    out_cache_loc = torch.cat(draft_slots).to(torch.int64)
    k_extend = k_buffer[out_cache_loc].clone()
    custom_mask = torch.cat([_ancestor_rows(t, p).flatten() for t, p in zip(trees, prefixes, strict=True)])
    mask_sizes = torch.tensor([q * (p + q) for p, q in zip(prefixes, q_lens, strict=True)])

    inputs = VerifyInputs(
        q_extend=queries.to(dtype),
        k_extend=k_extend,
        v_extend=k_extend[..., :HEAD_DIM_V].contiguous(),
        o_extend=poison_(torch.empty(total_q, heads, HEAD_DIM_V, dtype=dtype)),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :HEAD_DIM_V],
        qo_indptr=_indptr(q_lens, torch.int32),
        kv_indptr=_indptr(prefixes, torch.int32),
        kv_indices=torch.cat(prefix_slots).to(torch.int64),
        out_cache_loc=out_cache_loc,
        custom_mask=custom_mask,
        mask_indptr=_indptr(mask_sizes.tolist(), torch.int64),
        sm_scale=case.model.sm_scale,
        max_len_extend=case.q_len,
        page_size=case.page_size,
        prefix_lens=tuple(prefixes),
        q_lens=tuple(q_lens),
        trees=trees,
    )
    if case.sglang_buffers is not None:
        inputs = over_allocated(inputs, case.sglang_buffers.max_context, g)
    return inputs if torch.device(device).type == "cpu" else inputs.to(device)


def _pool_rows(case: Case) -> int:
    """The pool's rows at least: the style's, and for a CUDA-graph group the largest of its calls' pools, so
    that every call of the group fits the same buffers."""
    rows = case.inputs.pool_rows
    buffers = case.sglang_buffers
    for prefixes in buffers.group_prefixes if buffers is not None else ():
        keys = [p + q for p, q in zip(prefixes, case.q_lens, strict=True)]
        rows = max(rows, pool_layout(keys, case.page_size, case.inputs.pool_rows)[1])
    return rows


def _local_peak(
    keys: torch.Tensor,
    prefixes: list[int],
    window: int,
    lift: float,
    sink_dir: torch.Tensor,
    g: torch.Generator,
) -> torch.Tensor:
    """Lean the recent keys along a direction of their own (orthogonal to the sink's) and return it, for the
    queries to lean along too: each request's last `window` prefix keys by `lift` falling linearly to 0
    (the most recent the most), its draft keys (the newest tokens) by `lift` in full."""
    direction = torch.randn(keys.shape[1], generator=g)
    direction -= (direction @ sink_dir) * sink_dir
    direction /= direction.norm()
    start = 0
    for p in prefixes:
        back = torch.arange(min(window, p), 0, -1, dtype=keys.dtype) - 1  # tokens before the newest
        keys[start + p - back.numel() : start + p] += ((1 - back / window) * lift)[:, None] * direction
        start += p
    keys[start:] += lift * direction  # the draft keys follow every prefix
    return direction


def _indptr(lengths: list[int], dtype: torch.dtype) -> torch.Tensor:
    out = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    out[1:] = torch.tensor(lengths, dtype=torch.int64).cumsum(0)
    return out.to(dtype)


def _replayed(case: Case, device: torch.device | str) -> VerifyInputs:
    capture = read_capture(case.capture.path)  # read once: the checksum below is of these very bytes
    if capture.sha256 != case.capture.sha256:
        raise InputError(
            "the capture changed since the suite was loaded (its SHA-256 differs)", file=case.capture.path
        )
    inputs = dataclasses.replace(
        capture.inputs, captured_output=capture.output, candidate_output=capture.candidate_output
    )
    return inputs if torch.device(device).type == "cpu" else inputs.to(device)
