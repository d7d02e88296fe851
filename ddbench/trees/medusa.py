"""Medusa trees: the static choice lists Medusa ships (e.g. 63 nodes, depth 4, top-10 heads), rebuilt from
synthetic head accuracies.

Medusa's head h guesses the token h steps ahead; `acc[h][r]` is how often its rank-r guess is right.
A path (r1, ..., rd) is accepted with probability ~ prod acc[h][r_h], and Medusa builds its tree by
greedily adding the path with the highest such value whose prefix is already in. Because accuracies
are sorted and below 1, that greedy is exactly best-first growth (best_first.py).
"""

from __future__ import annotations

import numpy as np

from ddbench.errors import TreeSpecError
from ddbench.trees._validate import check_q_len, int_arg
from ddbench.trees.best_first import best_first
from ddbench.trees.kind import TreeKind, given, options_label
from ddbench.trees.shapes import from_paths
from ddbench.trees.synthetic import SYNTHETIC_VOCAB, make_rng, top_logprobs
from ddbench.trees.tree import MAX_Q_LEN, Tree

DEFAULT_DEPTH = 4
"""Medusa's usual number of heads (its shipped 63-node tree has depth 4)."""
DEFAULT_TOPK = 10
"""Medusa reads the top-10 guesses of each head when it searches for its trees."""

_CONF_FIRST = 1.0
_CONF_DECAY = 0.8
_CONF_JITTER = 0.3
"""Head top-1 accuracy near 0.6 for head 1 falling to ~0.3 by head 4, as reported for Medusa heads."""


def medusa_q_len(nodes: object, depth: object = DEFAULT_DEPTH, topk: object = DEFAULT_TOPK) -> int:
    """Check the parameters and return q_len = nodes + 1."""
    n = int_arg(nodes, "nodes", lo=1)
    check_q_len(n + 1, "nodes", MAX_Q_LEN, f"{n} nodes plus the root")
    d = int_arg(depth, "depth", lo=1)
    k = int_arg(topk, "topk", lo=1, hi=SYNTHETIC_VOCAB)
    room, level = 0, 1
    for _ in range(d):
        level *= k
        room += level
        if room >= n:
            break
    if room < n:
        raise TreeSpecError(
            f"{n} nodes do not fit in a tree of depth {d} with top-{k} heads ({room} at most)", path="nodes"
        )
    return n + 1


def medusa(nodes: int, depth: int = DEFAULT_DEPTH, topk: int = DEFAULT_TOPK, seed: int = 0) -> Tree:
    """The `nodes` paths of highest expected acceptance, laid out as Medusa orders them (depth, path)."""
    q_len = medusa_q_len(nodes, depth, topk)
    n, d, k = q_len - 1, int(depth), int(topk)
    heads = min(d, n)  # deeper heads cannot be reached within `nodes`
    rng = make_rng(seed, "medusa")
    confidence = _CONF_FIRST - _CONF_DECAY * np.arange(heads) + _CONF_JITTER * rng.standard_normal(heads)
    emitted = best_first(list(top_logprobs(rng, confidence, k)), n)
    paths: list[tuple[int, ...]] = [()]
    for e in emitted:
        paths.append(paths[e.parent] + (e.rank,))
    tree = from_paths([list(p) for p in paths[1:]])
    return Tree(tree.parents, kind="medusa")


KIND = TreeKind(
    "medusa",
    ("nodes",),
    lambda f: medusa_q_len(f["nodes"], **given(f, "depth", "topk")),
    lambda f, seed: medusa(f["nodes"], **given(f, "depth", "topk"), seed=seed),
    lambda f: f"medusa-{f['nodes']}" + options_label(f, (("depth", "d"), ("topk", "k"))),
    optional=("depth", "topk"),
)
