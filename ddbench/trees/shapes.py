"""Fixed tree shapes: the extremes of the mask (chain, star, complete k-ary) and trees written out by hand.

A chain is DFlash's draft block and makes the mask plain causal; a star is the widest tree of its size;
explicit parents/paths let a suite pin down a topology seen in production.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddbench.errors import TreeSpecError
from ddbench.trees._validate import check_q_len, int_arg
from ddbench.trees.kind import TreeKind, count
from ddbench.trees.tree import MAX_Q_LEN, Tree


def chain_q_len(n: object) -> int:
    length = int_arg(n, "length", lo=1)
    return check_q_len(length, "length", MAX_Q_LEN, f"a chain of length {length}")


def chain(n: int) -> Tree:
    """Root and n-1 successors, each the child of the previous: q_len = n."""
    length = chain_q_len(n)
    return Tree(tuple(range(-1, length - 1)), kind="chain")


def star_q_len(n: object) -> int:
    size = int_arg(n, "size", lo=1)
    return check_q_len(size, "size", MAX_Q_LEN, f"a star of size {size}")


def star(n: int) -> Tree:
    """Root plus n-1 children of the root: every draft token sees only the root and itself."""
    size = star_q_len(n)
    return Tree((-1, *(0,) * (size - 1)), kind="star")


def kary_q_len(branching: object, depth: object) -> int:
    b = int_arg(branching, "branching", lo=1)
    d = int_arg(depth, "depth", lo=0)
    total, level = 0, 1
    for _ in range(d + 1):  # stop as soon as the limit is passed: 64^64 is not worth computing
        total += level
        level *= b
        if total > MAX_Q_LEN:
            break
    return check_q_len(total, "depth", MAX_Q_LEN, f"a complete {b}-ary tree of depth {d}")


def kary(branching: int, depth: int) -> Tree:
    """Complete tree in BFS order: every node above `depth` has `branching` children."""
    q_len = kary_q_len(branching, depth)
    b = int(branching)
    return Tree((-1, *((i - 1) // b for i in range(1, q_len))), kind="kary")


def from_parents(parents: Sequence[int]) -> Tree:
    """A tree given as its parent array (validated by Tree)."""
    if isinstance(parents, (str, bytes)) or not isinstance(parents, Sequence):
        raise TreeSpecError(f"parents must be a list of integers, got {parents!r}", path="parents")
    check_q_len(len(parents), "parents", MAX_Q_LEN, f"{len(parents)} parents")
    return Tree(tuple(parents), kind="parents")


def _clean_paths(paths: object) -> list[tuple[int, ...]]:
    if isinstance(paths, (str, bytes)) or not isinstance(paths, Sequence):
        raise TreeSpecError(f"paths must be a list of lists of child indices, got {paths!r}", path="paths")
    check_q_len(len(paths) + 1, "paths", MAX_Q_LEN, f"{len(paths)} paths plus the root")
    clean: list[tuple[int, ...]] = []
    for i, path in enumerate(paths):
        if isinstance(path, (str, bytes)) or not isinstance(path, Sequence):
            raise TreeSpecError(f"a path must be a list of child indices, got {path!r}", path=f"paths[{i}]")
        if len(path) == 0:
            raise TreeSpecError("an empty path would be the root, which is implicit", path=f"paths[{i}]")
        clean.append(tuple(int_arg(c, f"paths[{i}][{j}]", lo=0) for j, c in enumerate(path)))
    return clean


def from_paths(paths: Sequence[Sequence[int]]) -> Tree:
    """Medusa-style tree: one node per root-to-node path of child choices, e.g. [[0], [1], [0, 0]].

    Every proper prefix of a path must be listed too, so each node has a parent. Nodes are ordered by
    (depth, path), which is topological and matches how Medusa sorts its choices.
    """
    clean = _clean_paths(paths)
    first_seen: dict[tuple[int, ...], int] = {}
    for i, path in enumerate(clean):
        if path in first_seen:
            raise TreeSpecError(
                f"duplicate path {list(path)} (same as paths[{first_seen[path]}])", path=f"paths[{i}]"
            )
        first_seen[path] = i
    for i, path in enumerate(clean):
        for cut in range(1, len(path)):
            if path[:cut] not in first_seen:
                raise TreeSpecError(
                    f"path {list(path)} needs its prefix {list(path[:cut])}, which is not listed",
                    path=f"paths[{i}]",
                )
    ordered = sorted(clean, key=lambda p: (len(p), p))
    index = {p: k + 1 for k, p in enumerate(ordered)}
    parents = (-1, *(index[p[:-1]] if len(p) > 1 else 0 for p in ordered))
    return Tree(parents, kind="paths")


CHAIN = TreeKind(
    "chain",
    ("length",),
    lambda f: chain_q_len(f["length"]),
    lambda f, _: chain(f["length"]),
    lambda f: f"chain{f['length']}",
)
STAR = TreeKind(
    "star",
    ("size",),
    lambda f: star_q_len(f["size"]),
    lambda f, _: star(f["size"]),
    lambda f: f"star{f['size']}",
)
KARY = TreeKind(
    "kary",
    ("branching", "depth"),
    lambda f: kary_q_len(f["branching"], f["depth"]),
    lambda f, _: kary(f["branching"], f["depth"]),
    lambda f: f"kary-{f['branching']}x{f['depth']}",
)
PATHS = TreeKind(
    "paths",
    ("paths",),
    lambda f: check_q_len(count(f["paths"], "paths") + 1, "paths", MAX_Q_LEN, "paths + root"),
    lambda f, _: from_paths(f["paths"]),
    lambda f: f"paths-{count(f['paths'], 'paths')}",
)
PARENTS = TreeKind(
    "parents",
    ("parents",),
    lambda f: check_q_len(count(f["parents"], "parents", 1), "parents", MAX_Q_LEN, "parents"),
    lambda f, _: from_parents(f["parents"]),
    lambda f: f"parents-{count(f['parents'], 'parents')}",
)
