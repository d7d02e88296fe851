"""EAGLE draft trees as SGLang selects them (`speculative_num_steps`, `speculative_eagle_topk`,
`speculative_num_draft_tokens`), over synthetic drafter distributions.

SGLang runs a beam search: step 0 takes the root's top-k tokens as k candidates (and beams); every
later step expands each of the k beams by its own top-k (k*k candidates scored by the cumulative
log-prob) and keeps the best k as the next beams. All k + (steps-1)*k*k candidates are pooled, the
best num_draft_tokens-1 are kept, sorted by candidate index (which keeps parents first), and hung
below the root. An autoregressive drafter conditions on the path, so every beam gets its own draw.
"""

from __future__ import annotations

import numpy as np

from ddbench.errors import TreeSpecError
from ddbench.trees._validate import int_arg
from ddbench.trees.kind import TreeKind
from ddbench.trees.synthetic import make_rng, top_logprobs
from ddbench.trees.tree import MAX_Q_LEN, Tree

MAX_TOPK = 64
"""Deployments use 1-10; the bound keeps the synthetic draw (k distributions per step) small."""

_CONF_ROOT = 1.5
_CONF_DECAY = 0.25
_CONF_JITTER = 1.0
"""EAGLE's drafter is confident near the root (top-1 ~0.65) and less so at each step; the jitter
makes beams differ, as real contexts do."""


def eagle_candidates(steps: int, topk: int) -> int:
    """Size of SGLang's candidate pool: k from step 0, k*k from each later step."""
    return topk + (steps - 1) * topk * topk


def eagle_q_len(steps: object, topk: object, num_draft_tokens: object) -> int:
    """Check the parameters and return q_len = num_draft_tokens."""
    s = int_arg(steps, "steps", lo=1)
    k = int_arg(topk, "topk", lo=1, hi=MAX_TOPK)
    n = int_arg(num_draft_tokens, "num_draft_tokens", lo=2, hi=MAX_Q_LEN)
    pool = eagle_candidates(s, k)
    if n - 1 > pool:
        raise TreeSpecError(
            f"num_draft_tokens {n} needs {n - 1} candidates, but steps {s} with topk {k} produce only "
            f"{pool} (k + (steps-1)*k^2); at most {pool + 1} draft tokens",
            path="num_draft_tokens",
        )
    return n


def eagle(steps: int, topk: int, num_draft_tokens: int, seed: int = 0) -> Tree:
    """The tree SGLang's EAGLE worker would verify for one request."""
    n = eagle_q_len(steps, topk, num_draft_tokens)
    k = int(topk)
    # Candidates of step i sit at depth i+1 and need i ancestors, so steps past n-1 can never be
    # selected; skipping them changes nothing (earlier draws come first in the stream).
    live_steps = min(int(steps), n - 1)
    rng = make_rng(seed, "eagle")

    root = top_logprobs(rng, _CONF_ROOT + _CONF_JITTER * rng.standard_normal(), k)[0]
    scores = [root]
    parents = [np.full(k, -1, dtype=np.int64)]
    beam_ids = np.arange(k, dtype=np.int64)  # pool index of each beam, best first
    beam_scores = root
    offset = k
    for step in range(1, live_steps):
        confidence = _CONF_ROOT - _CONF_DECAY * step + _CONF_JITTER * rng.standard_normal(k)
        expanded = (beam_scores[:, None] + top_logprobs(rng, confidence, k)).ravel()  # beam-major, as SGLang
        scores.append(expanded)
        parents.append(np.repeat(beam_ids, k))
        best = np.argsort(-expanded, kind="stable")[:k]
        beam_ids = offset + best
        beam_scores = expanded[best]
        offset += k * k

    pool_scores = np.concatenate(scores)
    pool_parents = np.concatenate(parents)
    chosen = np.sort(np.argsort(-pool_scores, kind="stable")[: n - 1])
    index = {int(c): i + 1 for i, c in enumerate(chosen)}
    tree_parents = [-1]
    for c in chosen:
        p = int(pool_parents[c])
        # A child's score is its parent's plus a negative log-prob, so the top set is ancestor-closed.
        assert p == -1 or p in index, f"EAGLE selection not ancestor-closed: candidate {c}, parent {p}"
        tree_parents.append(0 if p == -1 else index[p])
    return Tree(tuple(tree_parents), kind="eagle")


KIND = TreeKind(
    "eagle",
    ("steps", "topk", "num_draft_tokens"),
    lambda f: eagle_q_len(f["steps"], f["topk"], f["num_draft_tokens"]),
    lambda f, seed: eagle(f["steps"], f["topk"], f["num_draft_tokens"], seed=seed),
    lambda f: f"eagle-{f['steps']}-{f['topk']}-{f['num_draft_tokens']}",
)
