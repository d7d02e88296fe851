"""Best-first growth of a tree over per-depth top-K log-scores (DDTree's heap; also Medusa's greedy).

When every depth has its own sorted score vector, independent of the path above it (block-diffusion
marginals, Medusa heads), a node's weight is the sum of its edges' scores. Siblings are ranked, so a
node's next sibling and its first child are the only new candidates it creates; popping the heap
`budget` times yields the `budget` heaviest ancestor-closed nodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Emitted(NamedTuple):
    """One node in pop order; its tree index is its position in the returned list + 1 (root is 0)."""

    parent: int
    depth: int
    rank: int
    logw: float


def best_first(logp: Sequence[np.ndarray], budget: int) -> list[Emitted]:
    """Pop `budget` nodes (fewer only if the space runs out); `logp[d - 1]` scores depth d, best first.

    Heap entries are (-logw, parent, depth, rank): equal weights are broken by the smaller parent,
    then depth, then rank, so the same scores always give the same tree.
    """
    depth_limit = len(logp)
    if budget < 1 or depth_limit == 0:
        return []
    heap: list[tuple[float, int, int, int]] = [(-float(logp[0][0]), 0, 1, 0)]
    logw_of = [0.0]  # root carries no weight
    out: list[Emitted] = []
    while heap and len(out) < budget:
        neg, parent, depth, rank = heapq.heappop(heap)
        logw = -neg
        node = len(out) + 1
        out.append(Emitted(parent, depth, rank, logw))
        logw_of.append(logw)
        scores = logp[depth - 1]
        if rank + 1 < len(scores):
            heapq.heappush(heap, (-(logw_of[parent] + float(scores[rank + 1])), parent, depth, rank + 1))
        if depth < depth_limit:
            heapq.heappush(heap, (-(logw + float(logp[depth][0])), node, depth + 1, 0))
    return out
