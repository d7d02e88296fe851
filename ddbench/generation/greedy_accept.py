"""Greedy acceptance along a draft tree: SGLang's own op where it imports, else ours, and the two agree.

From the root, a child is accepted when its token is the target's argmax at its parent; the walk stops
where no child matches, and the target's argmax there is the bonus token. SGLang's
`verify_tree_greedy_kernel_triton` (sglang.kernels.ops.speculative.spec_tree) does this over its
retrieve arrays (first child, next sibling) for the whole batch; on a machine without a GPU it runs under
Triton's interpreter. `accept_greedy` is the same walk in Python: the fallback, and the test's check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ddbench.generation.drafter import DraftTree
from ddbench.generation.sglang_spec_ops import spec_tree_op

Accepted = list[int]
"""The accepted path's node indices, root (0) first; the bonus token is the target's argmax at its end."""


def accept_greedy(draft: DraftTree, predicts: Sequence[int]) -> Accepted:
    path, node = [0], 0
    parents, tokens = draft.tree.parents, draft.tokens
    while True:
        match = next(
            (c for c in range(node + 1, len(parents)) if parents[c] == node and tokens[c] == predicts[node]),
            None,
        )
        if match is None:
            return path
        path.append(match)
        node = match


def retrieve_arrays(drafts: Sequence[DraftTree], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's (bs, width) first-child and next-sibling arrays, -1 where there is none."""
    first = torch.full((len(drafts), width), -1, dtype=torch.int64)
    sibling = torch.full((len(drafts), width), -1, dtype=torch.int64)
    for b, draft in enumerate(drafts):
        last_child: dict[int, int] = {}
        for c, p in enumerate(draft.tree.parents[1:], start=1):
            if p in last_child:
                sibling[b, last_child[p]] = c
            else:
                first[b, p] = c
            last_child[p] = c
    return first, sibling


class SglangGreedyAccept:
    """SGLang's greedy tree verify for a batch of drafts; `problem` says why it cannot run here."""

    def __init__(self) -> None:
        self._kernel, self.problem = spec_tree_op("verify_tree_greedy_kernel_triton")

    def __call__(self, drafts: Sequence[DraftTree], predicts: Sequence[Sequence[int]]) -> list[Accepted]:
        if self._kernel is None:
            raise RuntimeError(self.problem)
        bs, width = len(drafts), max(d.q_len for d in drafts)
        spec_tokens = max(d.tree.max_depth for d in drafts) + 1
        device = "cuda" if torch.cuda.is_available() else "cpu"
        candidates = torch.full((bs, width), -1, dtype=torch.int64)
        target = torch.zeros((bs, width), dtype=torch.int64)
        for b, (draft, predicted) in enumerate(zip(drafts, predicts, strict=True)):
            candidates[b, : draft.q_len] = torch.tensor(draft.tokens)
            target[b, : draft.q_len] = torch.tensor(list(predicted))
        first, sibling = retrieve_arrays(drafts, width)
        index = torch.arange(bs * width, dtype=torch.int64).view(bs, width)
        accept_index = torch.full((bs, spec_tokens), -1, dtype=torch.int64)
        accept_num = torch.zeros(bs, dtype=torch.int64)
        predicted_out = torch.zeros(bs * width, dtype=torch.int64)
        args = [predicted_out, accept_index, accept_num, candidates, index, first, sibling, target]
        args = [a.to(device) for a in args]
        self._kernel[(bs,)](*args, batch_size=bs, num_speculative_tokens=spec_tokens, num_draft_tokens=width)
        counts, rows = args[2].cpu().tolist(), args[1].cpu().tolist()
        return [[i - b * width for i in rows[b][: counts[b] + 1]] for b in range(bs)]


def greedy_acceptor() -> tuple[Callable[[Sequence[DraftTree], Sequence[Sequence[int]]], list[Accepted]], str]:
    """The acceptance to use and what it is: SGLang's op when it imports, else ours (and why)."""
    sglang = SglangGreedyAccept()
    if sglang.problem is None:
        return sglang, "SGLang's verify_tree_greedy (Triton)"

    def ours(drafts: Sequence[DraftTree], predicts: Sequence[Sequence[int]]) -> list[Accepted]:
        return [accept_greedy(d, p) for d, p in zip(drafts, predicts, strict=True)]

    return ours, f"ddbench's greedy walk ({sglang.problem})"
