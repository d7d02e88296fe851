"""Invariants of SGLang's extend layout: what any inputs (generated, captured, user-made) must satisfy.

A violation names the tensor and the reason; kernels are never run on inputs that break these.
"""

from __future__ import annotations

import torch

from ddbench.errors import InputError
from ddbench.inputs.layout import VerifyInputs
from ddbench.suite.presets import HEAD_DIM_QK, HEAD_DIM_V


def _indptr_ok(name: str, indptr: torch.Tensor, total: int, batch: int) -> None:
    """Rises from 0 to exactly `total`."""
    values = _rising(name, indptr, batch)
    if values[-1] != total:
        raise InputError(f"must rise from 0 to {total}; got {values.tolist()[:8]}…", path=name)


def _indptr_within(name: str, indptr: torch.Tensor, capacity: int, batch: int, of: str) -> int:
    """Rises from 0 to at most `capacity` (the entries of `of`, which may be over-allocated); its end."""
    values = _rising(name, indptr, batch)
    if values[-1] > capacity:
        raise InputError(
            f"ends at {int(values[-1])}, past the {capacity} entries of {of}; got {values.tolist()[:8]}…",
            path=name,
        )
    return int(values[-1])


def _rising(name: str, indptr: torch.Tensor, batch: int) -> torch.Tensor:
    if indptr.numel() != batch + 1:
        raise InputError(f"has {indptr.numel()} entries, expected batch size + 1 = {batch + 1}", path=name)
    values = indptr.long().cpu()
    if values[0] != 0 or bool((values[1:] < values[:-1]).any()):
        raise InputError(f"must rise from 0; got {values.tolist()[:8]}…", path=name)
    return values


def check_inputs(x: VerifyInputs, source: str | None = None) -> None:
    """Raise InputError on the first broken invariant; `source` (a file) is named in the message."""
    try:
        _check(x)
    except InputError as err:
        raise InputError(err.reason, file=source, path=err.path) from None


def _check(x: VerifyInputs) -> None:
    total_q, heads = x.q_extend.shape[0], x.q_extend.shape[1]
    bs = x.batch_size
    expect = {
        "q_extend": (total_q, heads, HEAD_DIM_QK),
        "k_extend": (total_q, 1, HEAD_DIM_QK),
        "v_extend": (total_q, 1, HEAD_DIM_V),
        "o_extend": (total_q, heads, HEAD_DIM_V),
    }
    for name, shape in expect.items():
        if tuple(getattr(x, name).shape) != shape:
            raise InputError(f"shape {tuple(getattr(x, name).shape)}, expected {shape}", path=name)
    if x.k_buffer.dim() != 3 or x.k_buffer.shape[1:] != (1, HEAD_DIM_QK):
        raise InputError(
            f"shape {tuple(x.k_buffer.shape)}, expected (pool, 1, {HEAD_DIM_QK})", path="k_buffer"
        )
    pool = x.k_buffer.shape[0]
    # kv_indices, custom_mask and out_cache_loc may be longer than the lengths say (a live server's
    # over-allocated buffers): their tails hold anything and are never checked, nor read by a backend.
    _indptr_ok("qo_indptr", x.qo_indptr, total_q, bs)
    used_slots = _indptr_within("kv_indptr", x.kv_indptr, x.kv_indices.numel(), bs, "kv_indices")
    q_lens = (x.qo_indptr[1:] - x.qo_indptr[:-1]).long().cpu()
    prefixes = (x.kv_indptr[1:] - x.kv_indptr[:-1]).long().cpu()
    _indptr_ok("mask_indptr", x.mask_indptr, int((q_lens * (prefixes + q_lens)).sum()), bs)
    if x.custom_mask.numel() < int(x.mask_indptr[-1]):
        raise InputError(
            f"has {x.custom_mask.numel()} entries, mask_indptr ends at {int(x.mask_indptr[-1])}",
            path="custom_mask",
        )
    if x.out_cache_loc.numel() < total_q:
        raise InputError(
            f"has {x.out_cache_loc.numel()} slots for {total_q} draft tokens", path="out_cache_loc"
        )
    kv_indices, out_cache_loc = x.kv_indices[:used_slots], x.out_cache_loc[:total_q]
    for name, idx in (("kv_indices", kv_indices), ("out_cache_loc", out_cache_loc)):
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= pool):
            raise InputError(
                f"index out of range [0, {pool}): min {int(idx.min())}, max {int(idx.max())}", path=name
            )
    used = torch.cat([kv_indices, out_cache_loc]).long()
    if not bool(torch.isfinite(x.k_buffer[used]).all()):
        raise InputError("a pool row the call reads holds NaN or Inf", path="k_buffer")
    for name in ("q_extend", "k_extend"):
        if not bool(torch.isfinite(getattr(x, name)).all()):
            raise InputError("holds NaN or Inf", path=name)
    if not torch.equal(x.k_buffer[out_cache_loc.long()], x.k_extend):
        raise InputError(
            "differs from the pool rows at out_cache_loc (the draft KV must be written first)",
            path="k_extend",
        )
    if not torch.equal(x.k_extend[..., :HEAD_DIM_V], x.v_extend):
        raise InputError("is not the latent part of k_extend", path="v_extend")
    if x.v_buffer.data_ptr() != x.k_buffer.data_ptr() or x.v_buffer.stride(0) != x.k_buffer.stride(0):
        raise InputError("must be a view of k_buffer[..., :512]", path="v_buffer")
    if not (0 < x.sm_scale < 10) or x.sm_scale != x.sm_scale:
        raise InputError(f"{x.sm_scale} is not a softmax scale", path="sm_scale")
