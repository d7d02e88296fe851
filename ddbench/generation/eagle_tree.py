"""EAGLE's draft tree as SGLang chooses and builds it: a beam of `topk`, the best nodes, SGLang's own op.

SGLang's EAGLE drafter keeps a beam of `topk` paths. Its first step takes the root's `topk` best tokens,
and each later step gives every path its `topk` best children and keeps the `topk` best of those, by path
score (the product of the drafter's probabilities). Every candidate of every step is numbered in one flat
list: the first step's `topk`, then `topk * topk` a step, beam by beam. The `num_draft_tokens - 1` best
candidates are kept, sorted by that number (`selected`). `parent_list` holds, for each step but the last,
the flat numbers of the candidates its beam continued from (-1 and the first step's candidates at the start),
so a candidate numbered `s` descends from `parent_list[s // topk]`.

`sgl_build_tree_kernel_triton` (sglang.kernels.ops.speculative.spec_tree; Triton's interpreter without a
GPU) turns these into the verify call's tree mask, RoPE positions and retrieve arrays. `tree_of_selection`
is the same construction in Python: the fallback where SGLang's op does not import, and the test's check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ddbench.generation.sglang_spec_ops import spec_tree_op
from ddbench.trees import Tree


@dataclass(frozen=True)
class EagleSelection:
    topk: int
    steps: int
    parent_list: tuple[int, ...]
    selected: tuple[int, ...]  # flat candidate numbers, ascending
    tokens: tuple[int, ...]  # the selected candidates' tokens, in the same order

    @property
    def num_draft_tokens(self) -> int:
        return len(self.selected) + 1


def eagle_selection(
    topk: int, steps: int, num_draft_tokens: int, children: Callable[[tuple[int, ...]], torch.Tensor]
) -> EagleSelection:
    """Beam search as SGLang's EAGLE drafter does it; `children(path)` gives the drafter's probabilities
    after a path of draft tokens (the root not included)."""
    first = children(()).topk(topk)
    scores = first.values.double()  # (topk,) path scores of the beam
    beam_paths = [(int(t),) for t in first.indices]
    flat_scores, flat_tokens = [*scores.tolist()], [p[0] for p in beam_paths]
    parent_list = [-1, *range(topk)]
    for step in range(1, steps):
        child = [children(path).topk(topk) for path in beam_paths]
        expanded = torch.stack([scores[j] * child[j].values.double() for j in range(topk)])  # (topk, topk)
        tokens = torch.stack([child[j].indices for j in range(topk)])
        base = topk + topk * topk * (step - 1)
        flat_scores += expanded.flatten().tolist()
        flat_tokens += [int(t) for t in tokens.flatten()]
        best = expanded.flatten().topk(topk)
        scores = best.values
        picked = [int(i) for i in best.indices]
        beam_paths = [(*beam_paths[i // topk], int(tokens.flatten()[i])) for i in picked]
        if step < steps - 1:
            parent_list += [base + i for i in picked]
    keep = torch.tensor(flat_scores, dtype=torch.float64).topk(num_draft_tokens - 1).indices
    selected = tuple(sorted(int(i) for i in keep))
    return EagleSelection(topk, steps, tuple(parent_list), selected, tuple(flat_tokens[i] for i in selected))


def tree_of_selection(selection: EagleSelection) -> Tree:
    """Node i + 1 is selected[i]; its parent is the node of the candidate it continued from (0: the root)."""
    node_of = {s: n + 1 for n, s in enumerate(selection.selected)}
    parents = [-1]
    for s in selection.selected:
        origin = s // selection.topk
        parent = 0 if origin == 0 else node_of.get(selection.parent_list[origin])
        if parent is None:
            raise ValueError(f"candidate {s} is kept without the candidate it continued from")
        parents.append(parent)
    return Tree(tuple(parents), kind="eagle")


def tree_of_retrieve(first_child: Sequence[int], next_sibling: Sequence[int]) -> Tree:
    """The parents SGLang's retrieve arrays (first child, next sibling, -1 for none) describe."""
    parents = [-1] + [-2] * (len(first_child) - 1)
    for node in range(len(first_child)):
        child = first_child[node]
        while child != -1:
            parents[child] = node
            child = next_sibling[child]
    if -2 in parents:
        raise ValueError(f"SGLang's retrieve arrays leave node {parents.index(-2)} without a parent")
    return Tree(tuple(parents), kind="eagle")


@dataclass(frozen=True)
class BuiltTree:
    tree: Tree
    mask: torch.Tensor  # bool (q_len, seq_len + q_len): the verify call's rows, prefix columns set
    positions: tuple[int, ...]


class SglangEagleTree:
    """SGLang's tree build for one request; `problem` says why it cannot run here.

    The build depends on the request's committed length only through an offset (mask columns, positions),
    so each distinct selection is built once, at length 0, and shifted: under Triton's interpreter one
    build takes most of a second."""

    def __init__(self) -> None:
        self._build, self.problem = spec_tree_op("sgl_build_tree_kernel_triton")
        self._built: dict[tuple[Any, ...], BuiltTree] = {}

    def __call__(self, selection: EagleSelection, seq_len: int) -> BuiltTree:
        key = (selection.topk, selection.steps, selection.parent_list, selection.selected)
        if key not in self._built:
            self._built[key] = self._run(selection)
        at_zero = self._built[key]
        n = at_zero.tree.q_len
        mask = torch.ones(n, seq_len + n, dtype=torch.bool)
        mask[:, seq_len:] = at_zero.mask
        return BuiltTree(at_zero.tree, mask, tuple(seq_len + p for p in at_zero.positions))

    def _run(self, selection: EagleSelection, seq_len: int = 0) -> BuiltTree:
        if self._build is None:
            raise RuntimeError(self.problem)
        n = selection.num_draft_tokens
        device = "cuda" if torch.cuda.is_available() else "cpu"
        parent_list = torch.tensor([selection.parent_list], dtype=torch.int64).view(1, -1)
        selected = torch.tensor([selection.selected], dtype=torch.int64)
        seq_lens = torch.tensor([seq_len], dtype=torch.int64)
        tree_mask = torch.ones(seq_len * n + n * n, dtype=torch.bool)  # prefix columns stay set, as SGLang's
        positions = torch.empty(n, dtype=torch.int64)
        retrieve = [torch.full((1, n), -1, dtype=torch.int64) for _ in range(3)]
        args = [a.to(device) for a in (parent_list, selected, seq_lens, tree_mask, positions, *retrieve)]
        self._build(*args, topk=selection.topk, depth=selection.steps, draft_token_num=n)
        mask, at, _, first, sibling = (a.cpu() for a in args[3:])
        return BuiltTree(
            tree_of_retrieve(first[0].tolist(), sibling[0].tolist()),
            mask.view(n, seq_len + n),
            tuple(at.tolist()),
        )


def eagle_tree_builder() -> tuple[Callable[[EagleSelection, int], BuiltTree], str]:
    """The build to use and what it is: SGLang's op when it imports, else ours (and why)."""
    sglang = SglangEagleTree()
    if sglang.problem is None:
        return sglang, "SGLang's build_tree_kernel_efficient (Triton)"

    def ours(selection: EagleSelection, seq_len: int) -> BuiltTree:
        tree = tree_of_selection(selection)
        mask = torch.ones(tree.q_len, seq_len + tree.q_len, dtype=torch.bool)
        mask[:, seq_len:] = tree.ancestor_mask()
        return BuiltTree(tree, mask, tree.positions(seq_len))

    return ours, f"ddbench's tree build ({sglang.problem})"
