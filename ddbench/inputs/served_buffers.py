"""A call in the buffers a live SGLang server hands the verify kernel: over-allocated, their tails garbage.

SGLang sizes `kv_indices` for `bs * max_context_len` (eagerly, where the sum of the lengths is not known on
the host) or takes its full-capacity CUDA-graph buffer, and sizes the verify mask for the same capacity;
only the first `kv_indptr[-1]` and `mask_indptr[-1]` entries mean anything. Under CUDA graphs the buffers are
fixed at capture and each replay writes its call into them: what a replay leaves past its lengths is whatever
the buffers held before. Both are built here from an exactly sized call, with tails that make a stray read
fail: zeros, slots past the pool, and slots of NaN rows.
"""

from __future__ import annotations

import dataclasses

import torch

from ddbench.inputs.layout import VerifyInputs

# A tail entry of kv_indices is one of these, drawn per entry: slot 0 (a NaN row of every generated pool:
# slots are handed out from 1), a slot just past the pool, a slot far past it, or -1.
_TAIL_KINDS = 4


def mask_capacity(batch_size: int, q_len: int, max_context: int) -> int:
    """Entries of a verify mask buffer for this capacity: q_len rows of max_context + q_len a request."""
    return batch_size * q_len * (max_context + q_len)


def garbage_slots(count: int, pool_rows: int, generator: torch.Generator) -> torch.Tensor:
    """`count` int64 slots no kernel may read: NaN rows, rows past the pool, negative slots."""
    kind = torch.randint(0, _TAIL_KINDS, (count,), generator=generator)
    past = pool_rows + torch.randint(0, max(pool_rows, 1), (count,), generator=generator)
    far = torch.full((count,), 1 << 40, dtype=torch.int64)
    choices = torch.stack([torch.zeros(count, dtype=torch.int64), past, far, torch.full((count,), -1)])
    return choices.gather(0, kind[None, :])[0]


def over_allocated(x: VerifyInputs, max_context: int, generator: torch.Generator) -> VerifyInputs:
    """The same call with kv_indices sized for `max_context` keys a request and the mask for that capacity,
    the tails past the lengths garbage (`garbage_slots`, random mask bits)."""
    bs = x.batch_size
    used = x.used_lengths()
    slots_needed = bs * max_context
    if used["kv_indices"] > slots_needed:
        raise ValueError(f"{used['kv_indices']} prefix slots do not fit a capacity of {slots_needed}")
    garbage = garbage_slots(slots_needed - used["kv_indices"], x.k_buffer.shape[0], generator)
    kv_indices = torch.cat([x.kv_indices[: used["kv_indices"]], garbage])
    mask_size = mask_capacity(bs, x.max_len_extend, max_context)
    tail = torch.randint(0, 2, (mask_size - used["custom_mask"],), generator=generator).to(
        x.custom_mask.dtype
    )
    custom_mask = torch.cat([x.custom_mask[: used["custom_mask"]], tail])
    return dataclasses.replace(x, kv_indices=kv_indices.to(x.kv_indices.dtype), custom_mask=custom_mask)


def write_into(buffers: VerifyInputs, x: VerifyInputs) -> VerifyInputs:
    """Write call `x` into the fixed buffers of an earlier call, as a CUDA-graph runner does before a
    replay: every tensor in place, the over-allocated ones up to x's lengths (their rest keeps what it held).
    Returns the buffers described by x's lengths and trees; raises ValueError where x does not fit them."""
    if x.max_len_extend != buffers.max_len_extend:
        raise ValueError(
            f"max_len_extend {x.max_len_extend} differs from the buffers' {buffers.max_len_extend}"
        )
    fixed = (
        "q_extend",
        "k_extend",
        "v_extend",
        "o_extend",
        "k_buffer",
        "qo_indptr",
        "kv_indptr",
        "mask_indptr",
    )
    for name in fixed:
        if getattr(buffers, name).shape != getattr(x, name).shape:
            raise ValueError(
                f"{name}: shape {tuple(getattr(x, name).shape)} differs from the buffers' "
                f"{tuple(getattr(buffers, name).shape)}"
            )
    for name in fixed:
        getattr(buffers, name).copy_(getattr(x, name))
    for name, n in x.used_lengths().items():
        if n > getattr(buffers, name).numel():
            raise ValueError(f"{name}: {n} entries do not fit the buffers' {getattr(buffers, name).numel()}")
        getattr(buffers, name)[:n].copy_(getattr(x, name)[:n])
    return dataclasses.replace(
        buffers,
        sm_scale=x.sm_scale,
        prefix_lens=x.prefix_lens,
        q_lens=x.q_lens,
        trees=x.trees,
        captured_output=x.captured_output,
        candidate_output=x.candidate_output,
    )
