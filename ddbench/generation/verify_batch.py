"""One verify step's call, built as SGLang's Triton backend builds it for target-verify.

Per request: the committed prefix's pool rows (`kv_indices`, through `kv_indptr`), the draft tokens' rows
(`out_cache_loc`, written before the call), and the tree mask of q_len rows, each of row stride
prefix + q_len (`custom_mask`, through `mask_indptr`). As in a live server, `kv_indices` is sized for every
request's largest context and its tail holds stale slot numbers: only `kv_indptr[-1]` entries mean
anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ddbench.generation.drafter import DraftTree
from ddbench.generation.kv_pool import PagedKvPool
from ddbench.inputs.layout import VerifyInputs
from ddbench.mla import HEAD_DIM_V
from ddbench.poison import poison_


@dataclass
class VerifyBatch:
    seq_lens: tuple[int, ...]  # committed tokens of each request (its prefix)
    drafts: tuple[DraftTree, ...]
    tokens: torch.Tensor  # (T,) the draft tokens, request after request, root first
    positions: torch.Tensor  # (T,) RoPE positions: prefix + depth
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    out_cache_loc: torch.Tensor
    custom_mask: torch.Tensor
    mask_indptr: torch.Tensor

    def inputs(
        self, pool: PagedKvPool, layer: int, q: torch.Tensor, kv: torch.Tensor, sm_scale: float
    ) -> VerifyInputs:
        """The call for one layer, after the draft rows were written to the pool."""
        k_buffer = pool.k_buffers[layer]
        k_extend = kv.view(-1, 1, kv.shape[-1])
        return VerifyInputs(
            q_extend=q,
            k_extend=k_extend,
            v_extend=k_extend[..., :HEAD_DIM_V].contiguous(),
            o_extend=poison_(torch.empty(q.shape[0], q.shape[1], HEAD_DIM_V, dtype=q.dtype, device=q.device)),
            k_buffer=k_buffer,
            v_buffer=k_buffer[..., :HEAD_DIM_V],
            qo_indptr=self.qo_indptr,
            kv_indptr=self.kv_indptr,
            kv_indices=self.kv_indices,
            out_cache_loc=self.out_cache_loc,
            custom_mask=self.custom_mask,
            mask_indptr=self.mask_indptr,
            sm_scale=sm_scale,
            max_len_extend=max(d.q_len for d in self.drafts),
            page_size=pool.page_size,
            prefix_lens=self.seq_lens,
            q_lens=tuple(d.q_len for d in self.drafts),
            trees=tuple(d.tree for d in self.drafts),
        )


def build_batch(
    pool: PagedKvPool,
    requests: Sequence[int],
    seq_lens: Sequence[int],
    drafts: Sequence[DraftTree],
    max_context: int,
    seed: int,
) -> VerifyBatch:
    """Reserve the draft rows after each prefix and lay the call out; `max_context` sizes kv_indices."""
    device = pool.k_buffers[0].device
    prefix_slots, draft_slots, masks, positions, tokens = [], [], [], [], []
    for request, seq_len, draft in zip(requests, seq_lens, drafts, strict=True):
        pool.reserve(request, seq_len + draft.q_len)
        prefix_slots.append(pool.slots(request, 0, seq_len))
        draft_slots.append(pool.slots(request, seq_len, seq_len + draft.q_len))
        visible = torch.ones(draft.q_len, seq_len + draft.q_len, dtype=torch.bool)
        visible[:, seq_len:] = draft.tree.ancestor_mask()
        masks.append(visible.flatten())
        positions.extend(draft.tree.positions(seq_len))
        tokens.extend(draft.tokens)
    q_lens = [d.q_len for d in drafts]
    used = int(sum(seq_lens))
    capacity = max(used, len(requests) * max_context)
    stale = torch.Generator().manual_seed(seed)
    kv_indices = torch.randint(0, pool.rows, (capacity,), generator=stale, dtype=torch.int64).to(device)
    kv_indices[:used] = torch.cat(prefix_slots) if used else kv_indices[:0]

    def indptr(lengths: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([0, *torch.tensor(list(lengths)).cumsum(0).tolist()], dtype=dtype, device=device)

    return VerifyBatch(
        seq_lens=tuple(seq_lens),
        drafts=tuple(drafts),
        tokens=torch.tensor(tokens, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        qo_indptr=indptr(q_lens, torch.int32),
        kv_indptr=indptr(seq_lens, torch.int32),
        kv_indices=kv_indices,
        out_cache_loc=torch.cat(draft_slots),
        custom_mask=torch.cat(masks).to(device),
        mask_indptr=indptr([q * (s + q) for q, s in zip(q_lens, seq_lens, strict=True)], torch.int64),
    )
