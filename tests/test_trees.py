"""Draft-tree generators: structure (topological, ancestor-closed masks), sizes, determinism and bad specs."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddbench.errors import TreeSpecError
from ddbench.trees import (
    MAX_Q_LEN,
    Tree,
    build_tree,
    chain,
    from_parents,
    from_paths,
    kary,
    star,
    tree_label,
    tree_q_len,
)
from ddbench.trees import eagle as eagle_module
from ddbench.trees.best_first import best_first
from ddbench.trees.ddtree import ddtree
from ddbench.trees.eagle import eagle
from ddbench.trees.medusa import medusa
from ddbench.trees.synthetic import make_rng, top_logprobs

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- helpers


def path_to_root(tree: Tree, i: int) -> set[int]:
    seen = {i}
    while tree.parents[i] != -1:
        i = tree.parents[i]
        seen.add(i)
    return seen


def assert_well_formed(tree: Tree) -> None:
    """Every property the verify kernel relies on: root first, parents first, mask = ancestors + self."""
    parents = tree.parents
    assert parents[0] == -1
    assert all(0 <= p < i for i, p in enumerate(parents) if i > 0)
    mask = tree.ancestor_mask()
    assert mask.dtype == torch.bool and mask.shape == (tree.q_len, tree.q_len)
    assert bool(mask[0, 0]) and int(mask[0].sum()) == 1
    for i in range(1, tree.q_len):
        expected = mask[parents[i]].clone()
        expected[i] = True
        assert torch.equal(mask[i], expected), f"row {i} is not parent's row plus itself"
        assert set(torch.nonzero(mask[i]).flatten().tolist()) == path_to_root(tree, i)
        assert tree.depths[i] == tree.depths[parents[i]] + 1
    assert torch.equal(mask, torch.tril(mask)), "a node sees a later node: order is not topological"
    assert mask.sum(dim=1).tolist() == [d + 1 for d in tree.depths]


def children_counts(tree: Tree) -> list[int]:
    counts = [0] * tree.q_len
    for p in tree.parents[1:]:
        counts[p] += 1
    return counts


def tree_to_paths(tree: Tree) -> list[tuple[int, ...]]:
    """Canonical Medusa paths: a child's choice index is its rank among its siblings."""
    paths: list[tuple[int, ...]] = [()]
    seen = [0] * tree.q_len
    for p in tree.parents[1:]:
        paths.append(paths[p] + (seen[p],))
        seen[p] += 1
    return paths[1:]


def capacity(k: int, depth: int) -> int:
    """Nodes below the root of a complete k-ary tree of that depth."""
    return sum(k**d for d in range(1, depth + 1))


def random_parents(rng: random.Random, n: int) -> list[int]:
    return [-1] + [rng.randrange(i) for i in range(1, n)]


# ---------------------------------------------------------------- specs for property tests

seeds = st.integers(min_value=0, max_value=2**32)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["chain", "star", "kary", "eagle", "ddtree", "medusa", "paths", "parents"]))
    if kind == "chain":
        return {"kind": kind, "length": draw(st.integers(1, 64))}
    if kind == "star":
        return {"kind": kind, "size": draw(st.integers(1, 64))}
    if kind == "kary":
        b = draw(st.integers(1, 4))
        return {"kind": kind, "branching": b, "depth": draw(st.integers(0, 4 if b > 1 else 30))}
    if kind == "eagle":
        steps, k = draw(st.integers(1, 7)), draw(st.integers(1, 10))
        pool = k + (steps - 1) * k * k
        n = draw(st.integers(2, min(pool + 1, 80)))
        return {"kind": kind, "steps": steps, "topk": k, "num_draft_tokens": n}
    if kind == "ddtree":
        spec: dict[str, Any] = {"kind": kind}
        if draw(st.booleans()):
            spec["depth_limit"] = draw(st.integers(1, 15))
        if draw(st.booleans()):
            spec["topk"] = draw(st.integers(2, 8))
        room = capacity(spec.get("topk", 96), spec.get("depth_limit", 15))
        spec["budget"] = draw(st.integers(1, min(96, room)))
        return spec
    if kind == "medusa":
        depth, k = draw(st.integers(2, 5)), draw(st.integers(3, 10))
        nodes = draw(st.integers(1, min(80, capacity(k, depth))))
        return {"kind": kind, "nodes": nodes, "depth": depth, "topk": k}
    parents = random_parents(random.Random(draw(seeds)), draw(st.integers(1, 40)))
    if kind == "parents":
        return {"kind": kind, "parents": parents}
    tree = Tree(tuple(parents))
    return {"kind": kind, "paths": [list(p) for p in tree_to_paths(tree)] or [[0]]}


@FAST
@given(spec=specs(), seed=seeds)
def test_every_kind_is_well_formed_and_sized_without_building(spec: dict[str, Any], seed: int) -> None:
    tree = build_tree(spec, seed)
    assert_well_formed(tree)
    assert tree.kind == spec["kind"]
    assert tree_q_len(spec) == tree.q_len <= MAX_Q_LEN
    label = tree_label(spec)
    assert label and " " not in label and label.startswith(spec["kind"])
    assert set(tree.summary()) == {"q_len", "depth", "width", "leaves"}


# ---------------------------------------------------------------- fixed shapes


@pytest.mark.parametrize("n", [1, 2, 16, 64])
def test_chain_mask_is_causal(n: int) -> None:
    tree = chain(n)
    assert tree.q_len == n and tree.max_depth == n - 1 and tree.leaves == 1 and tree.width == 1
    assert torch.equal(tree.ancestor_mask(), torch.tril(torch.ones(n, n, dtype=torch.bool)))


def test_star_sees_root_and_itself() -> None:
    tree = star(9)
    expected = torch.eye(9, dtype=torch.bool)
    expected[:, 0] = True
    assert torch.equal(tree.ancestor_mask(), expected)
    assert tree.summary() == {"q_len": 9, "depth": 1, "width": 8, "leaves": 8}
    assert tree.positions(100) == (100,) + (101,) * 8


@pytest.mark.parametrize(("b", "d"), [(1, 0), (1, 7), (2, 0), (2, 3), (3, 4), (4, 4), (32, 1)])
def test_kary_sizes(b: int, d: int) -> None:
    tree = kary(b, d)
    assert_well_formed(tree)
    assert tree.q_len == sum(b**i for i in range(d + 1))
    assert tree.max_depth == d and tree.leaves == b**d and tree.width == b**d
    assert all(c in (0, b) for c in children_counts(tree))
    assert list(tree.depths) == sorted(tree.depths), "BFS order"


def test_positions_follow_depth() -> None:
    tree = from_parents([-1, 0, 1, 0, 3, 3])
    assert tree.positions(0) == (0, 1, 2, 1, 2, 2)
    assert tree.positions(21) == tuple(21 + d for d in tree.depths)
    with pytest.raises(ValueError):
        tree.positions(-1)


# ---------------------------------------------------------------- explicit trees


def test_from_paths_orders_by_depth_then_path() -> None:
    tree = from_paths([[1], [0, 1], [0], [0, 0], [1, 0]])
    # nodes: root, [0], [1], [0,0], [0,1], [1,0]
    assert tree.parents == (-1, 0, 0, 1, 1, 2)
    assert tree.kind == "paths"


@FAST
@given(seed=seeds, n=st.integers(1, 60))
def test_paths_round_trip(seed: int, n: int) -> None:
    rng = random.Random(seed)
    canonical = from_paths(tree_to_paths(Tree(tuple(random_parents(rng, n)))) or [[0]])
    paths = tree_to_paths(canonical)
    shuffled = [list(p) for p in paths]
    rng.shuffle(shuffled)
    rebuilt = from_paths(shuffled)
    assert rebuilt.parents == canonical.parents
    assert set(tree_to_paths(rebuilt)) == set(paths)
    assert_well_formed(rebuilt)


@FAST
@given(seed=seeds, n=st.integers(1, 60))
def test_from_parents_keeps_the_array(seed: int, n: int) -> None:
    parents = random_parents(random.Random(seed), n)
    tree = from_parents(parents)
    assert list(tree.parents) == parents and tree.q_len == n
    assert_well_formed(tree)


# ---------------------------------------------------------------- DDTree


@FAST
@given(
    budget=st.integers(1, 200), depth_limit=st.integers(1, 15), topk=st.none() | st.integers(1, 6), seed=seeds
)
def test_ddtree_emits_budget_nodes_within_depth_limit(
    budget: int, depth_limit: int, topk: int | None, seed: int
) -> None:
    room = capacity(topk or budget, depth_limit)
    if budget > room:
        with pytest.raises(TreeSpecError) as err:
            ddtree(budget, depth_limit, topk, seed=seed)
        assert err.value.path == "budget"
        return
    tree = ddtree(budget, depth_limit, topk, seed=seed)
    assert tree.q_len == budget + 1
    assert tree.max_depth <= depth_limit
    assert max(children_counts(tree)) <= (topk or budget)
    assert_well_formed(tree)


@pytest.mark.parametrize("budget", [8, 64, 1024])
def test_ddtree_paper_budgets(budget: int) -> None:
    tree = build_tree({"kind": "ddtree", "budget": budget}, seed=3)
    assert tree.q_len == budget + 1 and tree.max_depth <= 15
    assert_well_formed(tree)


@FAST
@given(data=st.data(), k=st.integers(1, 4), depth=st.integers(1, 4))
def test_best_first_takes_the_heaviest_nodes(data: st.DataObject, k: int, depth: int) -> None:
    """The heap's pop order must give exactly the top-B nodes of the full tree by summed log-score."""
    rng = np.random.default_rng(data.draw(seeds))
    logp = [np.sort(np.log(rng.uniform(0.01, 0.99, k)))[::-1] for _ in range(depth)]
    everything = {
        ranks: sum(float(logp[d][r]) for d, r in enumerate(ranks))
        for length in range(1, depth + 1)
        for ranks in itertools.product(range(k), repeat=length)
    }
    budget = data.draw(st.integers(1, len(everything)))
    emitted = best_first(logp, budget)
    paths: list[tuple[int, ...]] = [()]
    for e in emitted:
        assert e.parent < len(paths)
        paths.append(paths[e.parent] + (e.rank,))
        assert len(paths[-1]) == e.depth
        assert math.isclose(e.logw, everything[paths[-1]], rel_tol=1e-12, abs_tol=1e-12)
    best = sorted(everything.values(), reverse=True)[:budget]
    assert sorted((everything[p] for p in paths[1:]), reverse=True) == pytest.approx(best)


def test_best_first_is_deterministic_on_ties() -> None:
    logp = [np.full(3, -1.0)] * 3
    first = best_first(logp, 7)
    assert first == best_first(logp, 7)
    assert [(e.parent, e.depth, e.rank) for e in first[:3]] == [(0, 1, 0), (0, 1, 1), (0, 1, 2)]


# ---------------------------------------------------------------- EAGLE


@FAST
@given(steps=st.integers(1, 8), k=st.integers(1, 10), data=st.data())
def test_eagle_size_depth_and_fanout(steps: int, k: int, data: st.DataObject) -> None:
    pool = k + (steps - 1) * k * k
    n = data.draw(st.integers(2, min(pool + 1, 128)))
    tree = eagle(steps, k, n, seed=data.draw(seeds))
    assert tree.q_len == n
    assert tree.max_depth <= steps
    assert max(children_counts(tree)) <= k
    assert_well_formed(tree)


@pytest.mark.parametrize(("steps", "n"), [(3, 4), (7, 8), (1, 2)])
def test_eagle_topk1_is_a_chain(steps: int, n: int) -> None:
    assert eagle(steps, 1, n, seed=5).parents == chain(n).parents


def test_eagle_matches_sglang_selection_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """steps 2, topk 2: candidates c0 .6, c1 .35 (root); c2 .3, c3 .24 (beam c0); c4 .315, c5 .0175 (c1)."""
    draws = iter([np.log([[0.6, 0.35]]), np.log([[0.5, 0.4], [0.9, 0.05]])])
    monkeypatch.setattr(eagle_module, "top_logprobs", lambda rng, confidence, k: next(draws))
    # best 3 = c0, c1, c4 -> sorted by index; c4 hangs below c1, not below the best beam
    assert eagle(2, 2, 4, seed=0).parents == (-1, 0, 0, 2)
    draws = iter([np.log([[0.6, 0.35]]), np.log([[0.5, 0.4], [0.9, 0.05]])])
    assert eagle(2, 2, 5, seed=0).parents == (-1, 0, 0, 1, 2)


def test_eagle_max_draft_tokens() -> None:
    tree = eagle(3, 2, 1 + 2 + 2 * 4, seed=1)  # every candidate kept
    assert tree.q_len == 11 and tree.max_depth == 3


# ---------------------------------------------------------------- Medusa


@FAST
@given(nodes=st.integers(1, 120), depth=st.integers(1, 5), k=st.integers(2, 10), seed=seeds)
def test_medusa_shape(nodes: int, depth: int, k: int, seed: int) -> None:
    if nodes > capacity(k, depth):
        with pytest.raises(TreeSpecError) as err:
            medusa(nodes, depth, k, seed=seed)
        assert err.value.path == "nodes"
        return
    tree = medusa(nodes, depth, k, seed=seed)
    assert tree.q_len == nodes + 1 and tree.max_depth <= depth
    assert max(children_counts(tree)) <= k
    # Medusa's own order: by depth, then by path
    paths = tree_to_paths(tree)
    assert paths == sorted(paths, key=lambda p: (len(p), p))
    assert_well_formed(tree)


def test_medusa_default_is_63_nodes_depth_4() -> None:
    tree = build_tree({"kind": "medusa", "nodes": 63}, seed=0)
    assert tree.q_len == 64 and tree.max_depth <= 4


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "eagle", "steps": 5, "topk": 4, "num_draft_tokens": 16},
        {"kind": "eagle", "steps": 6, "topk": 10, "num_draft_tokens": 60},
        {"kind": "ddtree", "budget": 32},
        {"kind": "ddtree", "budget": 256},
        {"kind": "medusa", "nodes": 63},
    ],
)
def test_same_seed_same_tree_other_seeds_differ(spec: dict[str, Any]) -> None:
    assert build_tree(spec, 7) == build_tree(spec, 7)
    assert build_tree(spec, 7).ancestor_mask().equal(build_tree(dict(spec), 7).ancestor_mask())
    shapes = {build_tree(spec, s).parents for s in range(8)}
    assert len(shapes) >= 4, f"only {len(shapes)} distinct trees over 8 seeds"


def test_synthetic_logprobs_are_sorted_and_lossy() -> None:
    rng = make_rng(0, "test")
    top = top_logprobs(rng, np.linspace(-3, 4, 50), 16)
    assert top.shape == (50, 16)
    assert np.all(top < 0) and np.all(np.diff(top, axis=1) <= 0)
    assert np.all(np.exp(top).sum(axis=1) <= 1 + 1e-12)


# ---------------------------------------------------------------- labels and limits


@pytest.mark.parametrize(
    ("spec", "label"),
    [
        ({"kind": "chain", "length": 16}, "chain16"),
        ({"kind": "star", "size": 8}, "star8"),
        ({"kind": "kary", "branching": 2, "depth": 3}, "kary-2x3"),
        ({"kind": "eagle", "steps": 5, "topk": 4, "num_draft_tokens": 8}, "eagle-5-4-8"),
        ({"kind": "ddtree", "budget": 8}, "ddtree-b8"),
        ({"kind": "ddtree", "budget": 8, "depth_limit": 7, "topk": 4}, "ddtree-b8-L7-k4"),
        ({"kind": "medusa", "nodes": 63}, "medusa-63"),
        ({"kind": "medusa", "nodes": 63, "depth": 3}, "medusa-63-d3"),
        ({"kind": "paths", "paths": [[0]] * 12}, "paths-12"),
        ({"kind": "parents", "parents": [-1] + [0] * 8}, "parents-9"),
    ],
)
def test_labels(spec: dict[str, Any], label: str) -> None:
    assert tree_label(spec) == label


def test_largest_trees_fit_the_limit() -> None:
    assert MAX_Q_LEN == 1025
    assert tree_q_len({"kind": "ddtree", "budget": 1024}) == MAX_Q_LEN
    assert tree_q_len({"kind": "chain", "length": 1025}) == MAX_Q_LEN
    assert tree_q_len({"kind": "eagle", "steps": 64, "topk": 64, "num_draft_tokens": 1025}) == MAX_Q_LEN
    assert tree_q_len({"kind": "parents", "parents": list(range(-1, 1024))}) == MAX_Q_LEN


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"kind": "banyan", "size": 3}, "kind"),
        ({"size": 3}, "kind"),
        ({"kind": 3}, "kind"),
        ({"kind": "chain"}, "length"),
        ({"kind": "chain", "length": 0}, "length"),
        ({"kind": "chain", "length": "16"}, "length"),
        ({"kind": "chain", "length": True}, "length"),
        ({"kind": "chain", "length": 16.0}, "length"),
        ({"kind": "chain", "length": 1026}, "length"),
        ({"kind": "star", "size": 2000}, "size"),
        ({"kind": "kary", "branching": 0, "depth": 2}, "branching"),
        ({"kind": "kary", "branching": 2, "depth": -1}, "depth"),
        ({"kind": "kary", "branching": 2, "depth": 10}, "depth"),
        ({"kind": "kary", "branching": 64, "depth": 64}, "depth"),
        ({"kind": "kary", "depth": 2}, "branching"),
        ({"kind": "eagle", "steps": 3, "topk": 2}, "num_draft_tokens"),
        ({"kind": "eagle", "steps": 0, "topk": 2, "num_draft_tokens": 4}, "steps"),
        ({"kind": "eagle", "steps": 3, "topk": 0, "num_draft_tokens": 4}, "topk"),
        ({"kind": "eagle", "steps": 3, "topk": 65, "num_draft_tokens": 4}, "topk"),
        ({"kind": "eagle", "steps": 3, "topk": 2, "num_draft_tokens": 1}, "num_draft_tokens"),
        ({"kind": "eagle", "steps": 3, "topk": 2, "num_draft_tokens": 12}, "num_draft_tokens"),
        ({"kind": "eagle", "steps": 3, "topk": 1, "num_draft_tokens": 5}, "num_draft_tokens"),
        ({"kind": "eagle", "steps": 64, "topk": 64, "num_draft_tokens": 1026}, "num_draft_tokens"),
        ({"kind": "ddtree"}, "budget"),
        ({"kind": "ddtree", "budget": 0}, "budget"),
        ({"kind": "ddtree", "budget": 1025}, "budget"),
        ({"kind": "ddtree", "budget": None}, "budget"),
        ({"kind": "ddtree", "budget": 8, "depth_limit": 0}, "depth_limit"),
        ({"kind": "ddtree", "budget": 8, "topk": 0}, "topk"),
        ({"kind": "ddtree", "budget": 8, "topk": "4"}, "topk"),
        ({"kind": "ddtree", "budget": 100, "depth_limit": 15, "topk": 1}, "budget"),
        ({"kind": "ddtree", "budget": 20, "depth_limit": 2, "topk": 3}, "budget"),
        ({"kind": "medusa", "nodes": 0}, "nodes"),
        ({"kind": "medusa", "nodes": 1025}, "nodes"),
        ({"kind": "medusa", "nodes": 31, "depth": 2, "topk": 5}, "nodes"),
        ({"kind": "medusa", "nodes": 8, "depth": 0}, "depth"),
        ({"kind": "medusa", "nodes": 8, "topk": -2}, "topk"),
        ({"kind": "paths", "paths": [[0], [1, 0], [0, 0]]}, "paths[1]"),
        ({"kind": "paths", "paths": [[0], [0, 0, 1]]}, "paths[1]"),
        ({"kind": "paths", "paths": [[0], [1], [0]]}, "paths[2]"),
        ({"kind": "paths", "paths": [[-1]]}, "paths[0][0]"),
        ({"kind": "paths", "paths": [[0], []]}, "paths[1]"),
        ({"kind": "paths", "paths": [[0], 3]}, "paths[1]"),
        ({"kind": "paths", "paths": "0,1"}, "paths"),
        ({"kind": "paths", "paths": [[i] for i in range(1025)]}, "paths"),
        ({"kind": "parents", "parents": [-1, 2, 0]}, "parents[1]"),
        ({"kind": "parents", "parents": [-1, 0, 2]}, "parents[2]"),
        ({"kind": "parents", "parents": [-1, 0, 5]}, "parents[2]"),
        ({"kind": "parents", "parents": [-1, 0, -3]}, "parents[2]"),
        ({"kind": "parents", "parents": [0, 0]}, "parents[0]"),
        ({"kind": "parents", "parents": [-1, -1]}, "parents[1]"),
        ({"kind": "parents", "parents": [-1, 0.5]}, "parents[1]"),
        ({"kind": "parents", "parents": []}, "parents"),
        ({"kind": "parents", "parents": {"a": 1}}, "parents"),
        ({"kind": "parents", "parents": [-1] + [0] * 1025}, "parents"),
    ],
)
def test_bad_specs_name_their_field(spec: dict[str, Any], path: str) -> None:
    with pytest.raises(TreeSpecError) as err:
        build_tree(spec, seed=0)
    assert err.value.path == path, err.value.message
    assert err.value.reason
    if "[" not in path:  # only element-level faults need the tree built; the rest fail before it
        with pytest.raises(TreeSpecError) as early:
            tree_q_len(spec)
        assert early.value.path == path


def test_non_mapping_spec() -> None:
    with pytest.raises(TreeSpecError) as err:
        build_tree(["chain", 3], seed=0)  # type: ignore[arg-type]
    assert err.value.path is None


@pytest.mark.parametrize("seed", [-1, 2**70, np.int64(12)])
def test_any_int_seed_is_accepted(seed: int) -> None:
    assert build_tree({"kind": "ddtree", "budget": 8}, seed).q_len == 9


def test_tree_is_validated_directly() -> None:
    with pytest.raises(TreeSpecError) as err:
        Tree((-1, 0, 3, 1))
    assert err.value.path == "parents[2]"
    assert "topological" in err.value.reason
    assert Tree([-1, 0]).parents == (-1, 0)  # type: ignore[arg-type]
