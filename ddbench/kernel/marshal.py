"""From SGLang's extend layout to the custom kernel's inputs: a pure function, with no host synchronisation.

Two real-port mistakes live here, so both are spelled out: the draft tokens are NOT in kv_indices (each
request's key list is its prefix slots followed by its out_cache_loc slots), and the tree mask is the
q_len x q_len block at column offset `prefix` of rows whose stride is `prefix + q_len`, not `prefix`.
Everything is computed with tensor ops sized from tensor shapes, so it can run inside a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddbench.inputs.layout import VerifyInputs

MASK_WORD_BITS = 32


@dataclass(frozen=True)
class KernelInputs:
    q: torch.Tensor  # (T, H, 576) bf16
    kv: torch.Tensor  # (pool, 576) bf16, a view of k_buffer
    kv_draft: torch.Tensor  # (T, 576) bf16, k_extend: the draft keys the kernel reads in place
    kv_slots: torch.Tensor  # (sum(prefix + q_len)) int32: per request, prefix slots then draft slots
    kv_offsets: torch.Tensor  # (bs + 1) int32
    q_offsets: torch.Tensor  # (bs + 1) int32
    mask_words: torch.Tensor  # (T, W) int32 bit words: bit j of row t = draft column j is visible
    sm_scale: float
    max_q_len: int

    @property
    def heads(self) -> int:
        return self.q.shape[1]

    @property
    def batch_size(self) -> int:
        return self.q_offsets.numel() - 1


def _request_of(positions: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Index of the request each position falls in, for request-major data with these offsets."""
    return torch.searchsorted(offsets[1:].contiguous(), positions, right=True)


def kv_slot_lists(x: VerifyInputs) -> tuple[torch.Tensor, torch.Tensor]:
    kv_indptr, qo_indptr = x.kv_indptr.long(), x.qo_indptr.long()
    offsets = kv_indptr + qo_indptr  # request r's keys start after all earlier prefixes and drafts
    total = x.kv_indices.numel() + x.out_cache_loc.numel()
    position = torch.arange(total, device=x.device)
    request = _request_of(position, offsets)
    local = position - offsets[request]
    prefix = kv_indptr[request + 1] - kv_indptr[request]
    in_prefix = local < prefix
    from_prefix = (
        x.kv_indices.long()[(kv_indptr[request] + local).clamp(max=max(x.kv_indices.numel() - 1, 0))]
        if x.kv_indices.numel()
        else torch.zeros_like(position)
    )
    from_draft = x.out_cache_loc.long()[
        (qo_indptr[request] + local - prefix).clamp(0, x.out_cache_loc.numel() - 1)
    ]
    slots = torch.where(in_prefix, from_prefix, from_draft)
    return slots.to(torch.int32), offsets.to(torch.int32)


def mask_bit_words(x: VerifyInputs, max_q_len: int) -> torch.Tensor:
    words_per_row = (max_q_len + MASK_WORD_BITS - 1) // MASK_WORD_BITS
    qo_indptr, kv_indptr, mask_indptr = x.qo_indptr.long(), x.kv_indptr.long(), x.mask_indptr.long()
    total_q = x.q_extend.shape[0]
    token = torch.arange(total_q, device=x.device)
    request = _request_of(token, qo_indptr)
    row = token - qo_indptr[request]
    q_len = qo_indptr[request + 1] - qo_indptr[request]
    prefix = kv_indptr[request + 1] - kv_indptr[request]
    column = torch.arange(words_per_row * MASK_WORD_BITS, device=x.device)
    # Row `row` of request r starts at mask_indptr[r] + row * (prefix + q_len); its draft block at + prefix.
    start = mask_indptr[request] + row * (prefix + q_len) + prefix
    inside = column[None, :] < q_len[:, None]
    flat = (start[:, None] + column[None, :]).clamp(max=max(x.custom_mask.numel() - 1, 0))
    bits = (x.custom_mask[flat] != 0) & inside
    weights = torch.ones(MASK_WORD_BITS, dtype=torch.int64, device=x.device) << torch.arange(
        MASK_WORD_BITS, device=x.device
    )
    words = (bits.view(total_q, words_per_row, MASK_WORD_BITS).long() * weights).sum(-1)
    return (words - ((words >= 2**31).long() << 32)).to(torch.int32)  # uint32 bit pattern in an int32


def marshal(x: VerifyInputs) -> KernelInputs:
    kv_slots, kv_offsets = kv_slot_lists(x)
    return KernelInputs(
        q=x.q_extend,
        kv=x.k_buffer.view(x.k_buffer.shape[0], x.k_buffer.shape[-1]),
        kv_draft=x.k_extend.select(1, 0),  # a view, never a copy: the launch reads k_extend itself
        kv_slots=kv_slots,
        kv_offsets=kv_offsets,
        q_offsets=x.qo_indptr.to(torch.int32),
        mask_words=mask_bit_words(x, x.max_len_extend),
        sm_scale=x.sm_scale,
        max_q_len=x.max_len_extend,
    )
