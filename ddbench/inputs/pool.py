"""Where each token's KV lives in the pool: scattered slots, never contiguous, as in a long-running server.

Only odd slots (page_size 1) or odd pages (page_size > 1) are handed out, so no two logical neighbours sit
in neighbouring rows and every row in between is unused (and poisoned with NaN by the generator). A case may
ask for a pool the size of a real server's: the slots then spread over all of it.
"""

from __future__ import annotations

import torch


def pool_layout(tokens_per_request: list[int], page_size: int, min_rows: int = 0) -> tuple[int, int]:
    """(stride, rows): every `stride`-th slot (or page) is handed out, 2 unless a pool of at least
    `min_rows` rows (a real server's) spreads the tokens over it."""
    units = sum(tokens_per_request) if page_size == 1 else sum(-(-n // page_size) for n in tokens_per_request)
    stride = max(2, (min_rows // page_size - 2) // units) if units else 2
    return stride, max((stride * units + 2) * page_size, -(-min_rows // page_size) * page_size)


def scatter_slots(
    tokens_per_request: list[int], page_size: int, generator: torch.Generator, min_rows: int = 0
) -> tuple[list[torch.Tensor], int]:
    """Pool slots for each request's logical tokens (prefix then draft) and the pool's row count."""
    stride, rows = pool_layout(tokens_per_request, page_size, min_rows)
    if page_size == 1:
        total = sum(tokens_per_request)
        slots = torch.randperm(total, generator=generator) * stride + 1
        return list(torch.split(slots, tokens_per_request)), rows
    pages_needed = [-(-n // page_size) for n in tokens_per_request]
    pages = torch.randperm(sum(pages_needed), generator=generator) * stride + 1
    out = []
    for n, request_pages in zip(tokens_per_request, torch.split(pages, pages_needed), strict=True):
        token = torch.arange(n)
        out.append(request_pages[token // page_size] * page_size + token % page_size)
    return out, rows
