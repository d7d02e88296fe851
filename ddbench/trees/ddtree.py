"""DDTree (Ringel & Romano 2026): the best `budget` nodes over a block drafter's per-depth marginals.

A block-diffusion drafter (DFlash) predicts every position of its block at once, so depth d has one
distribution whatever was chosen above it. DDTree keeps its top-K log-probs per depth and grows the
tree best-first (see best_first.py), emitting exactly `budget` nodes below the root.
"""

from __future__ import annotations

import numpy as np

from ddbench.errors import TreeSpecError
from ddbench.trees._validate import check_q_len, int_arg
from ddbench.trees.best_first import best_first
from ddbench.trees.kind import TreeKind, given, options_label
from ddbench.trees.synthetic import SYNTHETIC_VOCAB, make_rng, top_logprobs
from ddbench.trees.tree import MAX_Q_LEN, Tree

DEFAULT_DEPTH_LIMIT = 15
"""DFlash block size 16 minus the bonus token."""

_CONF_FIRST = 2.0
_CONF_DECAY = 0.25
_CONF_JITTER = 0.5
"""Drafter confidence per depth: top-1 near 0.7 at depth 1, fading to ~0.3 by depth 15, as block
drafters lose accuracy along the block."""


def _capacity(topk: int, depth_limit: int, cap: int) -> int:
    """Nodes below the root of a full top-K tree of that depth, counted only up to `cap`."""
    total, level = 0, 1
    for _ in range(depth_limit):
        level *= topk
        total += level
        if total >= cap:
            return cap
    return total


def ddtree_q_len(
    budget: object, depth_limit: object = DEFAULT_DEPTH_LIMIT, topk: object | None = None
) -> int:
    """Check the parameters and return q_len = budget + 1."""
    b = int_arg(budget, "budget", lo=1)
    check_q_len(b + 1, "budget", MAX_Q_LEN, f"budget {b}")
    limit = int_arg(depth_limit, "depth_limit", lo=1)
    k = b if topk is None else int_arg(topk, "topk", lo=1, hi=SYNTHETIC_VOCAB)
    room = _capacity(k, limit, b)
    if room < b:
        raise TreeSpecError(
            f"budget {b} exceeds the {room} nodes a tree of depth_limit {limit} and topk {k} can hold",
            path="budget",
        )
    return b + 1


def ddtree(
    budget: int, depth_limit: int = DEFAULT_DEPTH_LIMIT, topk: int | None = None, seed: int = 0
) -> Tree:
    """DDTree over synthetic marginals; nodes are numbered in pop order, which is topological.

    `topk` defaults to `budget`: no node can have more than `budget` children, so K = B never cuts
    the search (reference builds use K = min(B, vocab)); a smaller K caps the tree's width.
    """
    q_len = ddtree_q_len(budget, depth_limit, topk)
    b = q_len - 1
    k = b if topk is None else int(topk)
    depths = min(int(depth_limit), b)  # a node deeper than the budget cannot be reached
    rng = make_rng(seed, "ddtree")
    confidence = _CONF_FIRST - _CONF_DECAY * np.arange(depths) + _CONF_JITTER * rng.standard_normal(depths)
    logp = list(top_logprobs(rng, confidence, k))
    emitted = best_first(logp, b)
    if len(emitted) != b:  # ddtree_q_len checked the capacity, so this is a bug, not a bad spec
        raise AssertionError(f"DDTree emitted {len(emitted)} nodes for budget {b}")
    return Tree((-1, *(e.parent for e in emitted)), kind="ddtree")


KIND = TreeKind(
    "ddtree",
    ("budget",),
    lambda f: ddtree_q_len(f["budget"], **given(f, "depth_limit", "topk")),
    lambda f, seed: ddtree(f["budget"], **given(f, "depth_limit", "topk"), seed=seed),
    lambda f: f"ddtree-b{f['budget']}" + options_label(f, (("depth_limit", "L"), ("topk", "k"))),
    optional=("depth_limit", "topk"),
)
