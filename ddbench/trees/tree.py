"""The draft tree as the verify kernel sees it: a parent array in topological order, root = bonus token."""

from __future__ import annotations

import numbers
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

from ddbench.errors import TreeSpecError

MAX_Q_LEN = 1025
"""Most draft tokens per request the suite asks of a kernel: DDTree's largest budget (1024) + the root."""


@dataclass(frozen=True)
class Tree:
    """`parents[i]` is the parent of node i; node 0 is the root (parent -1) and parents precede children.

    Topological order is part of the contract, not a convenience: SGLang's extend kernel keeps
    `is_causal=True` next to the custom mask, so a child placed before its parent would be masked out.
    """

    parents: tuple[int, ...]
    kind: str = "parents"

    def __post_init__(self) -> None:
        parents = self.parents
        if isinstance(parents, (str, bytes)) or not hasattr(parents, "__len__"):
            raise TreeSpecError(f"parents must be a list of integers, got {parents!r}", path="parents")
        if len(parents) == 0:
            raise TreeSpecError("a tree needs at least the root: parents is empty", path="parents")
        clean: list[int] = []
        for i, p in enumerate(parents):
            where = f"parents[{i}]"
            if isinstance(p, bool) or not isinstance(p, numbers.Integral):
                raise TreeSpecError(f"parent index must be an integer, got {p!r}", path=where)
            p = int(p)
            if i == 0:
                if p != -1:
                    raise TreeSpecError(
                        f"node 0 is the root (bonus token) and must have parent -1, got {p}", path=where
                    )
            elif p == -1:
                raise TreeSpecError(
                    f"only node 0 may be the root (parent -1); node {i} has parent -1", path=where
                )
            elif p < -1 or p >= len(parents):
                raise TreeSpecError(
                    f"parent index {p} of node {i} is out of range [0, {len(parents)})", path=where
                )
            elif p >= i:
                raise TreeSpecError(
                    f"nodes are not in topological order: node {i} has parent {p}, which must be < {i}",
                    path=where,
                )
            clean.append(p)
        object.__setattr__(self, "parents", tuple(clean))

    @property
    def q_len(self) -> int:
        """Draft tokens of one request, root included: the kernel's query length."""
        return len(self.parents)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Depth of each node (root 0); one pass suffices because parents come first."""
        depths = [0] * len(self.parents)
        for i in range(1, len(self.parents)):
            depths[i] = depths[self.parents[i]] + 1
        return tuple(depths)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    @cached_property
    def leaves(self) -> int:
        """Nodes without a child: the number of distinct root-to-leaf paths the verifier can accept."""
        has_child = set(self.parents[1:])
        return sum(1 for i in range(len(self.parents)) if i not in has_child)

    @cached_property
    def width(self) -> int:
        """Most nodes at one depth: how bushy the tree is, which changes the mask's sparsity pattern."""
        return max(Counter(self.depths).values())

    def positions(self, prefix: int) -> tuple[int, ...]:
        """RoPE positions of the draft tokens after `prefix` committed tokens: siblings share a position."""
        if prefix < 0:
            raise ValueError(f"prefix must be >= 0, got {prefix}")
        return tuple(prefix + d for d in self.depths)

    def ancestor_mask(self) -> torch.Tensor:
        """Bool (q_len, q_len): `[i, j]` iff j is i or an ancestor of i, i.e. what draft token i may see.

        Built like the engines build it, vis[i] = vis[parent[i]] ∪ {i}; a fresh tensor on every call
        because callers pack or move it.
        """
        n = len(self.parents)
        vis = np.zeros((n, n), dtype=np.bool_)
        vis[0, 0] = True
        for i in range(1, n):
            vis[i, :i] = vis[self.parents[i], :i]
            vis[i, i] = True
        return torch.from_numpy(vis)

    def summary(self) -> dict[str, Any]:
        """The few numbers a report shows next to a case."""
        return {"q_len": self.q_len, "depth": self.max_depth, "width": self.width, "leaves": self.leaves}
