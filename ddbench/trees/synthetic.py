"""Seeded stand-ins for a drafter's next-token distributions, so tree generators need no model.

Only the shape of the top-k matters to the tree builders: real drafter distributions are heavy-headed
(one to a few tokens carry most of the mass, then a long flat tail). Each synthetic distribution is a
softmax over `SYNTHETIC_VOCAB` logits: a standard-normal tail plus 1-4 "dominant" tokens lifted by
log(vocab) + confidence (+ noise). `confidence` is roughly the log-odds of the head against the tail:
measured mean top-1 probability 0.70 at 2, 0.52 at 0, 0.26 at -2, with a wide spread around each (a
drafter is sometimes sure and sometimes lost).
"""

from __future__ import annotations

import math
import numbers
import zlib

import numpy as np

SYNTHETIC_VOCAB = 2048
"""Tokens per synthetic distribution; larger than any top-k asked for (DDTree budgets reach 1024)."""

_MAX_DOMINANT = 4
_HEAD_JITTER = 1.5
_MAX_LOGP = -1e-9
"""Cap on a log-prob: every edge strictly loses mass, so a child always scores below its parent."""


def make_rng(seed: int, family: str) -> np.random.Generator:
    """A generator per (seed, family): EAGLE and DDTree trees of one seed do not share a stream."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    return np.random.default_rng([int(seed) % 2**64, zlib.crc32(family.encode())])


def top_logprobs(
    rng: np.random.Generator, confidence: np.ndarray | float, k: int, vocab: int = SYNTHETIC_VOCAB
) -> np.ndarray:
    """Sorted-descending log-probs of the k likeliest tokens, one row per entry of `confidence`."""
    conf = np.atleast_1d(np.asarray(confidence, dtype=np.float64))
    rows = conf.shape[0]
    if not 1 <= k <= vocab:
        raise ValueError(f"k must be in [1, {vocab}], got {k}")
    logits = rng.standard_normal((rows, vocab))
    n_dominant = rng.integers(1, _MAX_DOMINANT + 1, size=rows)
    lift = math.log(vocab) + conf[:, None] + _HEAD_JITTER * rng.standard_normal((rows, _MAX_DOMINANT))
    is_head = np.arange(_MAX_DOMINANT)[None, :] < n_dominant[:, None]
    logits[:, :_MAX_DOMINANT] += np.where(is_head, lift, 0.0)
    peak = logits.max(axis=1, keepdims=True)
    logp = logits - (peak + np.log(np.exp(logits - peak).sum(axis=1, keepdims=True)))
    top = -np.partition(-logp, k - 1, axis=1)[:, :k]
    top = -np.sort(-top, axis=1)
    return np.minimum(top, _MAX_LOGP)
