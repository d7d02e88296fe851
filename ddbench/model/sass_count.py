"""How many SASS instructions a CTA's warps issue, from the kernel's basic blocks and the emulation's count
of each anchored call site (ddbench/kernel/sass_map.py): the issue work with the arithmetic, the index math
and the loop control the emulation does not count.

Unknowns: how often each block runs (warp passes; a divergent warp's two halves count apart, as the GPU
issues them) and each edge. What holds on every run:
- the kernel's entry runs once a warp, a subroutine's entry once a call;
- a block is entered only along its edges, and an edge carries at most what runs its source;
- a block's warps leave by one successor (EXACT), by at least one (DIVERGES: both ways, as two halves), or
  may stop (ENDS); a BSYNC block lets out, whole again, the warps that entered at its BSSY;
- an anchor's copies run as often as the emulation counted its site: the unpredicated ones at most that,
  all of them at least (a predicated copy issues where none of its lanes calls the primitive);
- a loop whose passes no anchor pins runs at most UNPINNED_LOOP_TRIPS times an entry.
A linear program finds, in order: the least mismatch with the anchors (the compiler may merge or split a
plain access, or divergent lanes run one site on two paths), the fewest split warps (a branch diverges only
where the counts demand it), then the fewest and the most instructions: the bounds. The likely figure takes
the compiler's slow paths and the unpinned loops at their least (what these kernels' sizes do) and the
middle of what is still free (a branch around arithmetic alone, such as O's rescale where the maxima held).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddbench.errors import InputError
from ddbench.kernel.sass_map import DIVERGES, ENDS, EXACT, KernelSass

WARP = 32
# A loop that no anchor pins on every pass (a search over a cluster's CTAs, a strided loop whose accesses sit
# behind a condition) runs at most this many times an entry: the largest such loop of these kernels runs
# over a cluster's CTAs (kMaxCluster).
UNPINNED_LOOP_TRIPS = 8
# One call over several lines may carry different lines in nvcc's line table and in the host compiler's
# source_location (mma's arguments on the next line): sites of one kind this close count together.
SITE_LINES_APART = 2


@dataclass(frozen=True)
class SassCount:
    """Warp instructions one CTA issues: bounds and a likely figure; `mismatch`: anchor executions the flow
    could not honour (0 when every anchor was met)."""

    least: float
    most: float
    likely: float
    mismatch: float
    # the likely figure by the kernel source line its instructions come from (ddbench profile --instructions)
    by_line: Mapping[str, float] = field(default_factory=dict)


def _site_key(site: str) -> tuple[str, int]:
    file, _, line = site.rpartition(":")
    return file, int(line)


def _statements(keys: set[tuple[str, str, int]]) -> dict[tuple[str, str, int], int]:
    """(file, kind, line) -> a group: lines of one file and kind at most SITE_LINES_APART apart chain."""
    group: dict[tuple[str, str, int], int] = {}
    last: tuple[str, str, int] | None = None
    for key in sorted(keys):
        chained = last is not None and last[:2] == key[:2] and key[2] - last[2] <= SITE_LINES_APART
        group[key] = group[last] if chained and last is not None else len(group)
        last = key
    return group


def anchor_groups(kernel: KernelSass, sites: Mapping[str, Mapping[str, int]]):
    """(unpredicated blocks, predicated blocks, emulated count) per anchored statement and kind; a block once
    per copy in it. A site the CTA never ran counts 0; a site it ran with none of the anchor's kinds is left
    out (the SASS and the emulation disagree on what it is)."""
    copies: list[tuple[tuple[str, str, int], int, bool]] = []
    for b, block in enumerate(kernel.blocks):
        for a in block.anchors:
            ran = sites.get(a.site, {})
            kind = next((k for k in a.kinds if k in ran), None if ran else a.kinds[0])
            if kind is not None:
                file, line = _site_key(a.site)
                copies.append(((file, kind, line), b, a.predicated))
    counted = {}
    for site, ops in sites.items():
        file, line = _site_key(site)
        counted.update({(file, kind, line): n for kind, n in ops.items()})
    group = _statements({key for key, _, _ in copies} | set(counted))
    rows: dict[int, tuple[list[int], list[int], int]] = {}
    for key, b, predicated in copies:
        plain, pred, _ = rows.setdefault(group[key], ([], [], 0))
        (pred if predicated else plain).append(b)
    for key, n in counted.items():
        if group[key] in rows:
            plain, pred, total = rows[group[key]]
            rows[group[key]] = (plain, pred, total + n)
    return list(rows.values())


def _reachable(kernel: KernelSass) -> set[int]:
    seen, todo = {0}, [0]
    while todo:
        b = todo.pop()
        for s in (*kernel.blocks[b].successors, *kernel.blocks[b].calls):
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return seen


def _dominators(kernel: KernelSass, reachable: frozenset[int] | set[int]) -> dict[int, set[int]]:
    preds: dict[int, set[int]] = {b: set() for b in reachable}
    for p in reachable:
        for s in (*kernel.blocks[p].successors, *kernel.blocks[p].calls):
            preds[s].add(p)
    dom = {b: set(reachable) for b in reachable}
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for b in sorted(reachable - {0}):
            new = (set.intersection(*(dom[p] for p in preds[b])) if preds[b] else set()) | {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


def unpinned_loops(kernel: KernelSass, reachable: frozenset[int] | set[int]) -> list[tuple[int, int]]:
    """Back edges (latch, header) of loops whose passes no anchor pins: none unpredicated on a block that
    dominates the latch. nvcc lays a loop out from its header: a back edge runs to a lower address."""
    dom = _dominators(kernel, reachable)

    def pins(d: int) -> bool:
        return any(not a.predicated for a in kernel.blocks[d].anchors)

    return [
        (p, s)
        for p in sorted(reachable)
        for s in kernel.blocks[p].successors
        if s <= p and not any(pins(d) for d in dom[p] if s <= d <= p)
    ]


@dataclass
class _Program:
    """Rows of a linear program over nonnegative variables: equalities and upper bounds (row <= rhs)."""

    size: int = 0
    x: Any = None
    eq: list[tuple[dict[int, float], float]] = field(default_factory=list)
    ub: list[tuple[dict[int, float], float]] = field(default_factory=list)
    built: dict[str, tuple[Any, Any, int]] = field(default_factory=dict)  # the matrices so far, by kind

    def variables(self, n: int) -> list[int]:
        self.size += n
        return list(range(self.size - n, self.size))

    def _matrix(self, kind: str, rows: list[tuple[dict[int, float], float]]):
        """The rows as a sparse matrix and right-hand side: built once, then extended by the rows since."""
        import numpy as np
        from scipy.sparse import coo_matrix, vstack

        done = self.built.get(kind)
        start = done[2] if done else 0
        new = rows[start:]
        r = [i for i, (row, _) in enumerate(new) for _ in row]
        c = [j for row, _ in new for j in row]
        v = [x for row, _ in new for x in row.values()]
        a = coo_matrix((v, (r, c)), shape=(len(new), self.size)).tocsr()
        b = np.array([rhs for _, rhs in new])
        if done:
            a, b = vstack([done[0], a]).tocsr(), np.concatenate([done[1], b])
        self.built[kind] = (a, b, len(rows))
        return a, b

    def solve(self, cost: dict[int, float], sign: float = 1.0) -> float:
        """The least (sign 1) or most (sign -1) of sum(cost x); `self.x` is the solution."""
        import numpy as np
        from scipy.optimize import linprog

        c = np.zeros(self.size)
        for j, x in cost.items():
            c[j] = sign * x
        a_eq, b_eq = self._matrix("eq", self.eq)
        a_ub, b_ub = self._matrix("ub", self.ub)
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
        if res.status != 0:
            raise InputError(f"the SASS flow has no solution for these counts: {res.message}")
        self.x = res.x
        return sign * res.fun

    def settle(self, cost: dict[int, float]) -> float:
        """Minimise sum(cost x), then keep it at that least for the next objectives."""
        least = self.solve(cost)
        self.ub.append((cost, least + 1e-6 * max(1.0, abs(least)) + 1e-9))
        return least


@functools.lru_cache(maxsize=8)
def _structure(kernel: KernelSass) -> tuple[frozenset[int], tuple[tuple[int, int], ...]]:
    """What of the flow does not depend on the counts: the blocks a warp can reach, the unpinned loops."""
    reachable = _reachable(kernel)
    return frozenset(reachable), tuple(unpinned_loops(kernel, reachable))


def count_cta(kernel: KernelSass, sites: Mapping[str, Mapping[str, int]], threads: int) -> SassCount:
    """The bounds and likely figure of one CTA's warp instructions, given its emulated site counts."""
    blocks = kernel.blocks
    lp = _Program()
    runs = lp.variables(len(blocks))
    edges = [(p, s) for p, block in enumerate(blocks) for s in block.successors]
    carries = dict(zip(edges, lp.variables(len(edges)), strict=True))
    reachable, unpinned = _structure(kernel)

    lp.eq.append(({runs[0]: 1.0}, float(-(-threads // WARP))))
    entered: dict[int, dict[int, float]] = {b: {} for b in range(len(blocks))}
    for (p, s), e in carries.items():
        entered[s][e] = 1.0
        lp.ub.append(({e: 1.0, runs[p]: -1.0}, 0.0))
    for b, block in enumerate(blocks):
        for callee in block.calls:
            entered[callee][runs[b]] = entered[callee].get(runs[b], 0.0) + 1.0
    for b in range(1, len(blocks)):
        lp.eq.append(({runs[b]: 1.0} if b not in reachable else {**entered[b], runs[b]: -1.0}, 0.0))

    splits: dict[int, float] = {}
    for b, block in enumerate(blocks):
        if not block.successors:
            continue
        leaving = runs[block.reconverges if block.reconverges is not None else b]
        out = {carries[(b, s)]: 1.0 for s in block.successors}
        if block.leaves == EXACT:
            lp.eq.append(({**out, leaving: -1.0}, 0.0))
        elif block.leaves == DIVERGES:
            (split,) = lp.variables(1)
            splits[split] = 1.0
            lp.eq.append(({**out, leaving: -1.0, split: -1.0}, 0.0))
        elif block.leaves == ENDS:
            lp.ub.append(({**out, leaving: -1.0}, 0.0))
        else:
            raise InputError(f"block {b} leaves by {block.leaves!r}")

    back_edges: dict[int, float] = {}
    for latch, header in unpinned:
        back_edges[carries[(latch, header)]] = 1.0
        entries = {
            e: 1.0 - UNPINNED_LOOP_TRIPS
            for (p, s), e in carries.items()
            if s == header and not header <= p <= latch
        }
        lp.ub.append(({carries[(latch, header)]: 1.0, **entries}, 0.0))

    mismatch: dict[int, float] = {}
    for plain, predicated, count in anchor_groups(kernel, sites):
        short, over = lp.variables(2)
        mismatch.update({short: 1.0, over: 1.0})
        at_most: dict[int, float] = {}
        for b in plain:
            at_most[runs[b]] = at_most.get(runs[b], 0.0) + 1.0
        if not predicated:
            lp.eq.append(({**at_most, short: 1.0, over: -1.0}, float(count)))
            continue
        at_least = dict(at_most)
        for b in predicated:
            at_least[runs[b]] = at_least.get(runs[b], 0.0) + 1.0
        lp.ub.append(({**at_most, over: -1.0}, float(count)))
        lp.ub.append(({**{v: -c for v, c in at_least.items()}, short: -1.0}, -float(count)))

    sizes = {runs[b]: float(block.instructions) for b, block in enumerate(blocks)}
    missed = lp.settle(mismatch)
    lp.settle(splits)
    least, most = lp.solve(sizes), lp.solve(sizes, -1.0)
    lp.settle({**back_edges, **{runs[b]: 1.0 for b in kernel.slow_paths}})
    fewest = lp.solve(sizes)
    low = lp.x
    likely = (fewest + lp.solve(sizes, -1.0)) / 2
    middle = (low + lp.x) / 2  # the two solutions' middle: as feasible as they are
    by_line: dict[str, float] = {}
    for b, block in enumerate(blocks):
        for line, n in block.lines:
            by_line[line] = by_line.get(line, 0.0) + n * float(middle[runs[b]])
    return SassCount(least, most, likely, missed, {k: v for k, v in by_line.items() if v > 0})
