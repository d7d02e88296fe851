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
  path score, chosen and built as SGLang's EAGLE drafter does (eagle_tree.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ddbench.generation.eagle_tree import BuiltTree, EagleSelection, eagle_selection
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


EagleBuild = Callable[[EagleSelection, int], BuiltTree]


class NoisyTargetDrafter:
    def __init__(
        self, model: TargetModel, pool: PagedKvPool, noise: float, seed: int, eagle_build: EagleBuild
    ) -> None:
        self.model, self.pool, self.noise, self.seed = model, pool, noise, seed
        self.eagle_build = eagle_build

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
        def children(path: tuple[int, ...]) -> torch.Tensor:
            return torch.softmax(self._logits(request, seq_len, (root, *path), (step, *path)), -1)

        selection = eagle_selection(topk, steps, nodes, children)
        built = self.eagle_build(selection, seq_len)
        # the verify call lays its mask and positions out from the tree: they must be what SGLang built
        mask = torch.ones_like(built.mask)
        mask[:, seq_len:] = built.tree.ancestor_mask()
        if not torch.equal(mask, built.mask) or built.positions != built.tree.positions(seq_len):
            raise RuntimeError("the EAGLE tree's mask or positions differ from those of its parents")
        return DraftTree(built.tree, (root, *selection.tokens))
