"""A drafter that proposes what the target itself would say, blurred by seeded noise, in three tree shapes.

A real drafter (DFlash, an EAGLE head, MTP) is a second network trained to agree with the target; its
drafts are right often near the root and less often deeper. The target's own logits plus Gaussian noise
(in units of the logits' spread) behave the same way, need no weights, and let a suite set how good the
drafter is. Its attention is its own float32 torch code over the committed rows of the pool (never a
backend under test), so every backend verifies the same drafts while the runs agree.

- `chain`: the noisy greedy path.
- `ddtree`: per-depth marginals along the noisy greedy path (a block drafter's view: one distribution per
  depth), grown best-first into `budget` nodes as DDTree does.
- `eagle`: a beam of `topk` paths expanded `steps` times, then the best `num_draft_tokens - 1` nodes by
  path score, as EAGLE's tree is chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ddbench.generation.kv_pool import PagedKvPool
from ddbench.generation.target import TargetModel
from ddbench.mla import KV_LORA_RANK
from ddbench.trees import Tree
from ddbench.trees.best_first import best_first
from ddbench.trees.ddtree import DEFAULT_DEPTH_LIMIT


@dataclass(frozen=True)
class DraftTree:
    """Node 0 is the root (the last verified token, whose KV is not in the pool yet); parents come first."""

    tree: Tree
    tokens: tuple[int, ...]

    @property
    def q_len(self) -> int:
        return self.tree.q_len


class NoisyTargetDrafter:
    def __init__(self, model: TargetModel, pool: PagedKvPool, noise: float, seed: int) -> None:
        self.model, self.pool, self.noise, self.seed = model, pool, noise, seed

    def _logits(self, request: int, seq_len: int, path: Sequence[int], key: tuple[int, ...]) -> torch.Tensor:
        """Noisy float32 logits after `path` (root first), the request holding `seq_len` committed tokens."""
        device = self.pool.k_buffers[0].device
        tokens = torch.tensor(list(path), dtype=torch.int64, device=device)
        positions = torch.arange(seq_len, seq_len + len(path), device=device)
        prefix = self.pool.slots(request, 0, seq_len)
        sm_scale = self.model.shape.sm_scale

        def attend(layer: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            keys = torch.cat([self.pool.k_buffers[layer][prefix, 0], kv]).float()
            scores = torch.einsum("nhd,kd->hnk", q.float(), keys) * sm_scale
            n = len(path)
            causal = torch.ones(n, seq_len + n, dtype=torch.bool, device=device).tril(seq_len)
            scores = scores.masked_fill(~causal, float("-inf"))
            return torch.einsum("hnk,kd->nhd", torch.softmax(scores, -1), keys[:, :KV_LORA_RANK])

        logits = self.model.forward(tokens, positions, attend)[-1]
        g = torch.Generator().manual_seed(hash((self.seed, request, *key)) & 0x7FFF_FFFF_FFFF)
        blur = torch.randn(logits.shape, generator=g).to(logits.device)
        return logits + self.noise * float(logits.std()) * blur

    def draft(self, spec: dict[str, Any], request: int, seq_len: int, root: int, step: int) -> DraftTree:
        kind = spec["kind"]
        if kind == "chain":
            return self._chain(int(spec["length"]), request, seq_len, root, step)
        if kind == "ddtree":
            budget = int(spec["budget"])
            depth = min(int(spec.get("depth_limit", DEFAULT_DEPTH_LIMIT)), budget)
            topk = min(int(spec.get("topk", budget)), self.model.shape.vocab)
            return self._ddtree(budget, depth, topk, request, seq_len, root, step)
        if kind == "eagle":
            steps, topk = int(spec["steps"]), int(spec["topk"])
            return self._eagle(steps, topk, int(spec["num_draft_tokens"]), request, seq_len, root, step)
        raise ValueError(f"no drafter for tree kind {kind!r}")

    def _greedy_marginals(
        self, depth: int, request: int, seq_len: int, root: int, step: int
    ) -> list[torch.Tensor]:
        """Log-probabilities at depths 1..depth along the drafter's own greedy path."""
        path, out = [root], []
        for d in range(depth):
            logp = torch.log_softmax(self._logits(request, seq_len, path, (step, d)), -1)
            out.append(logp)
            path.append(int(logp.argmax()))
        return out

    def _chain(self, length: int, request: int, seq_len: int, root: int, step: int) -> DraftTree:
        marginals = self._greedy_marginals(length - 1, request, seq_len, root, step)
        tokens = (root, *(int(m.argmax()) for m in marginals))
        return DraftTree(Tree(tuple(range(-1, length - 1)), kind="chain"), tokens)

    def _ddtree(
        self, budget: int, depth: int, topk: int, request: int, seq_len: int, root: int, step: int
    ) -> DraftTree:
        marginals = self._greedy_marginals(depth, request, seq_len, root, step)
        top = [m.topk(topk) for m in marginals]
        scores = [np.asarray(t.values.double().cpu()) for t in top]
        emitted = best_first(scores, budget)
        tokens = (root, *(int(top[e.depth - 1].indices[e.rank]) for e in emitted))
        return DraftTree(Tree((-1, *(e.parent for e in emitted)), kind="ddtree"), tokens)

    def _eagle(
        self, steps: int, topk: int, nodes: int, request: int, seq_len: int, root: int, step: int
    ) -> DraftTree:
        # candidate: (score, depth, parent candidate index or -1 for the root, token, path)
        candidates: list[tuple[float, int, int, int, tuple[int, ...]]] = []
        beams: list[tuple[float, int, tuple[int, ...]]] = [(0.0, -1, (root,))]
        for depth in range(1, steps + 1):
            grown = []
            for score, index, path in beams:
                logp = torch.log_softmax(self._logits(request, seq_len, path, (step, *path[1:])), -1)
                best = logp.topk(topk)
                for value, token in zip(best.values.tolist(), best.indices.tolist(), strict=True):
                    candidates.append((score + value, depth, index, token, (*path, token)))
                    grown.append((score + value, len(candidates) - 1, (*path, token)))
            beams = sorted(grown, key=lambda b: -b[0])[:topk]
        chosen: list[int] = []
        kept = set()
        for i in sorted(range(len(candidates)), key=lambda i: (-candidates[i][0], candidates[i][1])):
            if len(chosen) == nodes - 1:
                break
            if candidates[i][2] == -1 or candidates[i][2] in kept:
                chosen.append(i)
                kept.add(i)
        chosen.sort(key=lambda i: (candidates[i][1], -candidates[i][0]))
        node_of = {c: n + 1 for n, c in enumerate(chosen)}
        parents = tuple(0 if candidates[c][2] == -1 else node_of[candidates[c][2]] for c in chosen)
        tokens = (root, *(candidates[c][3] for c in chosen))
        return DraftTree(Tree((-1, *parents), kind="eagle"), tokens)
