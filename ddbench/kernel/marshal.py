"""From SGLang's extend layout to the custom kernel's inputs: a pure function, with no host synchronisation.

Two real-port mistakes live here, so both are spelled out: the draft tokens are NOT in kv_indices (each
request's keys are its prefix slots, read from kv_indices at kv_indptr, followed by its draft tokens, read in
place from k_extend), and the tree mask is the q_len x q_len block at column offset `prefix` of rows whose
stride is `prefix + q_len`, not `prefix`. Nothing is sized from the lengths, which live on the device: the
kernel reads kv_indices itself, as SGLang passes it (over-allocated, its tail past kv_indptr[-1] holding
anything), and the mask words are one row per token of q_extend. So the same marshaling runs eagerly and
inside a CUDA graph replayed at any lengths.
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
    kv_slots: torch.Tensor  # (N) int64 pool slots of the prefix keys: kv_indices itself, its tail never read
    slot_offsets: torch.Tensor  # (bs + 1) int32: where each request's prefix slots start (kv_indptr)
    kv_offsets: torch.Tensor  # (bs + 1) int32: each request's keys (kv_indptr + qo_indptr)
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

    @property
    def capacity_keys(self) -> int:
        """The keys the buffers can hold (prefix slots and draft tokens): what a launch planned from tensor
        shapes alone is sized for. The real lengths may be fewer; only the device knows them."""
        return self.kv_slots.numel() + self.q.shape[0]


def _request_of(positions: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Index of the request each position falls in, for request-major data with these offsets."""
    return torch.searchsorted(offsets[1:].contiguous(), positions, right=True)


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
    kv_indptr = x.kv_indptr.to(torch.int32)
    return KernelInputs(
        q=x.q_extend,
        kv=x.k_buffer.view(x.k_buffer.shape[0], x.k_buffer.shape[-1]),
        kv_draft=x.k_extend.select(1, 0),  # a view, never a copy: the launch reads k_extend itself
        kv_slots=x.kv_indices.to(torch.int64).contiguous(),  # SGLang's int64 kv_indices: not copied
        slot_offsets=kv_indptr,
        kv_offsets=kv_indptr + x.qo_indptr.to(torch.int32),
        q_offsets=x.qo_indptr.to(torch.int32),
        mask_words=mask_bit_words(x, x.max_len_extend),
        sm_scale=x.sm_scale,
        max_q_len=x.max_len_extend,
    )


def marshal_into(x: VerifyInputs, k: KernelInputs) -> None:
    """Marshal `x` again into the tensors of `k`, marshaled earlier from the same buffers: what a launch
    replayed at new lengths recomputes on the device before its kernel (the offsets and mask words; the
    tensors that are x's own need nothing)."""
    fresh = marshal(x)
    for name in ("kv_slots", "slot_offsets", "kv_offsets", "q_offsets", "mask_words"):
        target, source = getattr(k, name), getattr(fresh, name)
        if target.shape != source.shape:
            raise ValueError(f"{name}: {tuple(source.shape)} does not fit the launch's {tuple(target.shape)}")
        if target.data_ptr() != source.data_ptr():
            target.copy_(source)
