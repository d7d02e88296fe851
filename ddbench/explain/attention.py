"""Attention as an explicit plan (which pool rows each request attends, under which visibility), evaluated.

The hypotheses of `ddbench explain` are edits of this plan: a classic mistake changes which keys a request
reads, which of them a row may see, the query, the scale or the value columns. Spelling the computation
as data makes each mistake a small, reviewable transformation of the correct plan, and lets one evaluator
produce every "what the output would be under this mistake" the same way (pure tensor code, no I/O).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ddbench.inputs.layout import VerifyInputs
from ddbench.mla import HEAD_DIM_V


@dataclass(frozen=True)
class RequestPlan:
    """One request: its draft tokens' rows [q0, q1) attend the pool rows `key_slots` where `visible`."""

    q0: int
    q1: int
    key_slots: torch.Tensor  # (K,) int64 rows of the pool
    visible: torch.Tensor  # (q_len, K) bool
    draft_keys: torch.Tensor  # (K,) bool: keys that are draft tokens (the tree part), for the error map


@dataclass(frozen=True)
class AttentionPlan:
    q: torch.Tensor  # (T, H, 576)
    pool: torch.Tensor  # (pool, 576), keys; values are the columns `v_columns` of the same rows
    requests: tuple[RequestPlan, ...]
    sm_scale: float
    v_columns: tuple[int, int] = (0, HEAD_DIM_V)

    def replace(self, **changes: object) -> AttentionPlan:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_requests(self, edit) -> AttentionPlan:
        """Apply `edit(index, RequestPlan) -> RequestPlan` to every request."""
        return self.replace(requests=tuple(edit(r, req) for r, req in enumerate(self.requests)))


@dataclass(frozen=True)
class Prediction:
    """An output (float, T x H x 512) and what it means: rows with no visible key are undefined."""

    output: torch.Tensor
    free: torch.Tensor  # (T, H) bool: no key visible; any kernel's choice (0 or NaN) is accepted there
    tree_mass: torch.Tensor  # (T, H): softmax mass on draft keys (NaN where undefined)

    def permuted(self, rows: torch.Tensor | None = None, heads: torch.Tensor | None = None) -> Prediction:
        """The same prediction with its (T, H) rows reindexed: output position (t, h) takes (rows, heads)."""
        out, free, mass = self.output, self.free, self.tree_mass
        if heads is not None:
            out, free, mass = out[:, heads], free[:, heads], mass[:, heads]
        if rows is not None:
            shape = out.shape
            out = out.reshape(-1, shape[-1])[rows].reshape(shape)
            free = free.reshape(-1)[rows].reshape(free.shape)
            mass = mass.reshape(-1)[rows].reshape(mass.shape)
        return Prediction(out, free, mass)


def request_bounds(x: VerifyInputs) -> list[tuple[int, int, int, int, int]]:
    """(q0, q1, kv0, kv1, mask0) per request, read from the indptr tensors."""
    qo, kv, mk = x.qo_indptr.tolist(), x.kv_indptr.tolist(), x.mask_indptr.tolist()
    return [(qo[r], qo[r + 1], kv[r], kv[r + 1], mk[r]) for r in range(x.batch_size)]


def read_draft_mask(
    x: VerifyInputs, request: int, row_stride: int, column_offset: int, mask0: int | None = None
) -> torch.Tensor:
    """(q_len, q_len) bool: the draft block of `request` read from custom_mask with a given geometry.

    Row i, column j is `custom_mask[mask0 + i * row_stride + column_offset + j]` (mask0: the request's
    mask_indptr unless given), exactly what a kernel with that geometry reads, including rows of other
    requests; past the buffer's end reads False.
    """
    q0, q1, _, _, own_mask0 = request_bounds(x)[request]
    mask0 = own_mask0 if mask0 is None else mask0
    q_len = q1 - q0
    i = torch.arange(q_len, device=x.custom_mask.device)
    flat = mask0 + i[:, None] * row_stride + column_offset + i[None, :]
    inside = flat < x.custom_mask.numel()
    return (x.custom_mask[flat.clamp(max=max(x.custom_mask.numel() - 1, 0))] != 0) & inside


def correct_plan(x: VerifyInputs) -> AttentionPlan:
    """What the verify step computes: prefix slots then draft slots, the ancestor mask."""
    requests = []
    for r, (q0, q1, kv0, kv1, _) in enumerate(request_bounds(x)):
        prefix, q_len = kv1 - kv0, q1 - q0
        slots = torch.cat([x.kv_indices[kv0:kv1].long(), x.out_cache_loc[q0:q1].long()])
        tree = read_draft_mask(x, r, prefix + q_len, prefix)
        visible = torch.cat([torch.ones(q_len, prefix, dtype=torch.bool, device=tree.device), tree], dim=1)
        draft = torch.arange(prefix + q_len, device=tree.device) >= prefix
        requests.append(RequestPlan(q0, q1, slots, visible, draft))
    pool = x.k_buffer.reshape(x.k_buffer.shape[0], x.k_buffer.shape[-1])
    return AttentionPlan(x.q_extend, pool, tuple(requests), x.sm_scale)


def evaluate(
    plan: AttentionPlan, accumulate: torch.dtype = torch.float32, round_p: torch.dtype | None = None
) -> Prediction:
    """Softmax attention of the plan; a row that sees a non-finite key or value is NaN, as in a kernel.

    `round_p`: round the unnormalised probabilities exp(s - max) to this type before P.V and sum the
    rounded values, as a flash kernel does (a correct kernel's rounding, for the self-test's controls)."""
    total, heads = plan.q.shape[0], plan.q.shape[1]
    v0, v1 = plan.v_columns
    device = plan.q.device
    out = torch.zeros(total, heads, v1 - v0, dtype=accumulate, device=device)
    free = torch.ones(total, heads, dtype=torch.bool, device=device)
    mass = torch.full((total, heads), float("nan"), dtype=accumulate, device=device)
    for req in plan.requests:
        q_len = req.q1 - req.q0
        if q_len == 0 or req.key_slots.numel() == 0:
            continue
        keys = plan.pool[req.key_slots].to(accumulate)
        values = keys[:, v0:v1]
        bad_key = ~keys.isfinite().all(-1)
        scores = torch.einsum("qhd,kd->hqk", plan.q[req.q0 : req.q1].to(accumulate), keys.nan_to_num(0.0))
        scores = (scores * plan.sm_scale).masked_fill(~req.visible[None], float("-inf"))
        if round_p is None:
            probs = torch.softmax(scores, dim=-1)
        else:
            e = torch.exp(scores - scores.amax(-1, keepdim=True).clamp(min=torch.finfo(accumulate).min))
            e = e.to(round_p).to(accumulate)
            probs = e / e.sum(-1, keepdim=True).clamp(min=torch.finfo(accumulate).tiny)
        seen = req.visible.any(-1)  # (q_len,)
        probs = torch.where(seen[None, :, None], probs, torch.zeros_like(probs))
        rows = torch.einsum("hqk,kd->qhd", probs, values.nan_to_num(0.0))
        poisoned = (req.visible & bad_key[None]).any(-1)  # a visible NaN key poisons the whole row
        rows[poisoned] = float("nan")
        out[req.q0 : req.q1] = rows
        free[req.q0 : req.q1] = ~seen[:, None]
        tree = (probs * req.draft_keys.to(accumulate)).sum(-1).transpose(0, 1)
        mass[req.q0 : req.q1] = torch.where(seen[:, None], tree, torch.full_like(tree, float("nan")))
    return Prediction(out, free, mass)
