"""Recover the draft trees from a captured custom mask, so reports can show real trees' depth and width.

A mask row is what draft token i may see among the draft tokens. When every row is its parent's row plus
itself, the mask is an ancestor mask and the tree is unique: the parent is the deepest proper ancestor,
which in topological order is the highest-numbered one. Anything else (a forest, a mask that is not
closed under ancestry) is reported as "no tree" rather than guessed.
"""

from __future__ import annotations

import numpy as np
import torch

from ddbench.trees import Tree

CAPTURED_KIND = "captured"


def tree_from_mask(visible: torch.Tensor | np.ndarray) -> Tree | None:
    """`visible[i, j]` = draft token i sees draft token j; the tree if it is an ancestor mask, else None."""
    vis = np.asarray(visible.cpu() if isinstance(visible, torch.Tensor) else visible).astype(bool)
    if vis.ndim != 2 or vis.shape[0] != vis.shape[1] or vis.shape[0] == 0:
        return None
    n = vis.shape[0]
    if not vis.diagonal().all() or np.triu(vis, 1).any():
        return None  # a token must see itself, and never a later token (topological order)
    parents = [-1]
    for i in range(1, n):
        ancestors = np.flatnonzero(vis[i, :i])
        if ancestors.size == 0:
            return None  # a second root: a forest, not a draft tree
        parent = int(ancestors[-1])
        if not np.array_equal(vis[i, :i], vis[parent, :i]):
            return None
        parents.append(parent)
    return Tree(tuple(parents), kind=CAPTURED_KIND)


def trees_from_custom_mask(
    custom_mask: torch.Tensor,
    mask_indptr: torch.Tensor,
    prefix_lens: tuple[int, ...],
    q_lens: tuple[int, ...],
) -> tuple[Tree, ...]:
    """One tree per request from SGLang's packed mask (row stride prefix+q_len); () if any is not a tree."""
    mask = custom_mask.cpu().bool()
    starts = mask_indptr.cpu().long().tolist()
    trees = []
    for start, prefix, q_len in zip(starts, prefix_lens, q_lens, strict=False):
        rows = mask[start : start + q_len * (prefix + q_len)].view(q_len, prefix + q_len)
        tree = tree_from_mask(rows[:, prefix:])
        if tree is None:
            return ()
        trees.append(tree)
    return tuple(trees)
