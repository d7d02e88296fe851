"""Shrink a serving pool to the rows one call reads, keeping the slots scattered and the pages intact.

A server's KV pool is gigabytes; a call reads a few thousand rows. The capture keeps only those, in a
compact pool where each used page (a single slot when page_size is 1) lands on an odd page of a seeded
random permutation: logical neighbours are never neighbours in the pool and a NaN page separates every
two used ones, so a kernel that reads a wrong slot still meets NaN, as with generated inputs. Tokens keep
their offset inside their page and two requests that share a prefix page still share it; everything
else about the original slot numbers is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CompactPool:
    rows: int  # rows of the compact pool: (2 * used pages + 2) * page_size
    kv_indices: torch.Tensor  # int64: the prefix slots, re-indexed
    out_cache_loc: torch.Tensor  # int64: the draft slots, re-indexed (or freshly allocated)
    source_rows: torch.Tensor  # int64: distinct prefix slots of the serving pool, to gather
    target_rows: torch.Tensor  # int64: where each of them lands in the compact pool


def compact_pool(
    prefix_slots: torch.Tensor,
    draft_slots: torch.Tensor | None,
    q_lens: list[int],
    page_size: int,
    seed: int,
) -> CompactPool:
    """Plan the compact pool for one call (CPU index tensors in, CPU index tensors out).

    `draft_slots` are the serving pool's out_cache_loc when known; when None, each request's draft tokens
    get fresh pages of their own (the kernel reads them from k_extend, not from the pool, so only the
    layout's own invariant — pool rows at out_cache_loc equal k_extend — has to hold).
    """
    prefix_slots = prefix_slots.long().cpu()
    ps = int(page_size)
    known_slots = prefix_slots if draft_slots is None else torch.cat([prefix_slots, draft_slots.long().cpu()])
    pages = torch.unique(known_slots // ps)  # sorted
    fresh_pages = 0 if draft_slots is not None else sum(-(-q // ps) for q in q_lens)
    used = pages.numel() + fresh_pages
    g = torch.Generator().manual_seed(seed)
    new_page = torch.randperm(used, generator=g) * 2 + 1  # odd pages only: a NaN page between any two

    def remap(slots: torch.Tensor) -> torch.Tensor:
        return new_page[torch.searchsorted(pages, slots // ps)] * ps + slots % ps

    kv_indices = remap(prefix_slots)
    if draft_slots is not None:
        out_cache_loc = remap(draft_slots.long().cpu())
    else:
        chunks, next_page = [], pages.numel()
        for q in q_lens:
            token = torch.arange(q)
            chunks.append(new_page[next_page + token // ps] * ps + token % ps)
            next_page += -(-q // ps)
        out_cache_loc = torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.int64)
    source_rows = torch.unique(prefix_slots)
    return CompactPool(
        rows=(2 * used + 2) * ps,
        kv_indices=kv_indices,
        out_cache_loc=out_cache_loc.long(),
        source_rows=source_rows,
        target_rows=remap(source_rows),
    )
