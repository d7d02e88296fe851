"""Where each token's KV lives in the pool: scattered slots, never contiguous, as in a long-running server.

Only odd slots (page_size 1) or odd pages (page_size > 1) are handed out, so no two logical neighbours sit
in neighbouring rows and every row in between is unused (and poisoned with NaN by the generator).
"""

from __future__ import annotations

import torch


def scatter_slots(
    tokens_per_request: list[int], page_size: int, generator: torch.Generator
) -> tuple[list[torch.Tensor], int]:
    """Pool slots for each request's logical tokens (prefix then draft) and the pool's row count."""
    if page_size == 1:
        total = sum(tokens_per_request)
        slots = torch.randperm(total, generator=generator) * 2 + 1
        return list(torch.split(slots, tokens_per_request)), 2 * total + 2
    pages_needed = [-(-n // page_size) for n in tokens_per_request]
    total_pages = sum(pages_needed)
    pages = torch.randperm(total_pages, generator=generator) * 2 + 1
    out = []
    for n, request_pages in zip(tokens_per_request, torch.split(pages, pages_needed), strict=True):
        token = torch.arange(n)
        out.append(request_pages[token // page_size] * page_size + token % page_size)
    return out, (2 * total_pages + 2) * page_size
