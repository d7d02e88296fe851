"""How many SASS instructions a CTA's warps issue, from the kernel's basic blocks and the emulation's count
of each anchored call site (ddbench/kernel/sass_map.py): the issue work with the arithmetic, the index math
and the loop control the emulation does not count.

Unknowns: how often each block runs (warp passes; a divergent warp's two halves count apart, as the GPU
issues them) and each edge. What holds on every run:
- the kernel's entry runs once a warp, a subroutine's entry once a call;
- a block is entered only along its edges, and an edge carries at most what runs its source;
- a block's warps leave by one successor (EXACT), by at least one (DIVERGES: both ways, as two halves), or
  may stop (ENDS); a BSYNC block lets out, whole again, the warps that entered at its BSSY, less those that
  stopped or jumped out of the region on the way;
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
from itertools import pairwise
from typing import Any

from ddbench.errors import InputError
from ddbench.kernel.sass_map import DIVERGES, ENDS, EXACT, Anchor, KernelSass
from ddbench.kernel.source_calls import FileCalls

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
    # how often each block runs in the likely solution (warp passes), by block index
    runs: tuple[float, ...] = ()


def _site_key(site: str) -> tuple[str, int] | None:
    """("file", line) of a "file:line" site; None for the runtime's "<many sites>" and other names."""
    file, _, line = site.rpartition(":")
    return (file, int(line)) if file and line.isdigit() else None


def _statements(
    keys: set[tuple[str, str, int]], links: list[tuple[tuple[str, str, int], tuple[str, str, int]]]
) -> dict[tuple[str, str, int], int]:
    """(file, kind, line) -> a group: lines of one file and kind at most SITE_LINES_APART apart chain, and
    each link joins its two keys."""
    parent = {key: key for key in keys}

    def root(key: tuple[str, str, int]) -> tuple[str, str, int]:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    ordered = sorted(keys)
    chained = [(a, b) for a, b in pairwise(ordered) if a[:2] == b[:2] and b[2] - a[2] <= SITE_LINES_APART]
    for a, b in chained + links:
        parent[root(a)] = root(b)
    roots: dict[tuple[str, str, int], int] = {}
    return {key: roots.setdefault(root(key), len(roots)) for key in ordered}


def _kind(anchor: Anchor, ran: Mapping[str, int], calls: FileCalls | None, line: int) -> str | None:
    """The counted kind an anchor is one instruction of: the first its site ran; where its site ran none, the
    first its statement can issue (else the first of its kinds); None where its site ran only others (the
    SASS and the emulation disagree on what it is)."""
    if ran:
        return next((k for k in anchor.kinds if k in ran), None)
    if calls is not None:
        return next((k for k in anchor.kinds if calls.sites(line, k)), anchor.kinds[0])
    return anchor.kinds[0]


_FUNCTIONS: dict[int, tuple[KernelSass, dict[tuple[int, str], str]]] = {}


def _out_of_line(kernel: KernelSass) -> dict[tuple[int, str], str]:
    """(block, file) -> the source function of the out-of-line subroutine the block belongs to (not the
    compiler's slow paths)."""
    hit = _FUNCTIONS.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    bounds = [*sorted(kernel.subroutines), len(kernel.blocks)]
    out: dict[tuple[int, str], str] = {}
    for entry in sorted(set(kernel.subroutines) - set(kernel.slow_paths)):
        span = range(entry, next(b for b in bounds if b > entry))
        for file, calls in kernel.source:
            lines = [
                (key[1], n)
                for b in span
                for site, n in kernel.blocks[b].lines
                if (key := _site_key(site)) is not None and key[0] == file
            ]
            fn = calls.function_of(lines)
            if fn is not None:
                out.update({(b, file): fn for b in span})
    if len(_FUNCTIONS) >= 16:
        _FUNCTIONS.clear()
    _FUNCTIONS[id(kernel)] = (kernel, out)
    return out


def anchor_groups(kernel: KernelSass, sites: Mapping[str, Mapping[str, int]]):
    """(unpredicated blocks, predicated blocks, emulated count) per anchored statement and kind; a block once
    per copy in it. A site the CTA never ran counts 0; a site it ran with none of the anchor's kinds is left
    out. Where the kernel's source is known (ddbench/kernel/source_calls.py), an anchor counts with the lines
    its statement and the functions that statement calls issue its primitive at (nvcc kept only a helper's
    caller's frame). An anchor of an out-of-line function (whose line table nvcc keeps least well: the same
    source names a store at a helper's line in one build, at its own in the next) counts with every line its
    function reaches that issues it; a helper it shares with other code (warp_max, write_merged_row) joins
    those lines' anchors to its group too. Inlined code keeps its lines: one named where nothing issues it
    stays held to 0 there."""
    source = dict(kernel.source)
    out_of_line = _out_of_line(kernel) if source else {}
    copies: list[tuple[tuple[str, str, int], int, bool]] = []
    links: list[tuple[tuple[str, str, int], tuple[str, str, int]]] = []
    for b, block in enumerate(kernel.blocks):
        for a in block.anchors:
            at = _site_key(a.site)
            if at is None:
                continue
            file, line = at
            calls = source.get(file)
            kind = _kind(a, sites.get(a.site, {}), calls, line)
            if kind is None:
                continue
            key = (file, kind, line)
            copies.append((key, b, a.predicated))
            if calls is None:
                continue
            near = calls.sites(line, kind)
            fn = out_of_line.get((b, file))
            far = () if fn is None else calls.function_sites(fn, kind)
            links.extend((key, (file, kind, s)) for s in (*near, *far))
    counted = {}
    for site, ops in sites.items():
        key = _site_key(site)
        if key is not None:
            counted.update({(key[0], kind, key[1]): n for kind, n in ops.items()})
    group = _statements({key for key, _, _ in copies} | set(counted) | {b for _, b in links}, links)
    rows: dict[int, tuple[list[int], list[int], int]] = {}
    for key, b, predicated in copies:
        plain, pred, _ = rows.setdefault(group[key], ([], [], 0))
        (pred if predicated else plain).append(b)
    for key, n in counted.items():
        if group[key] in rows:
            plain, pred, total = rows[group[key]]
            rows[group[key]] = (plain, pred, total + n)
    return list(rows.values())


def _next(kernel: KernelSass, b: int) -> tuple[int, ...]:
    """Where a warp goes from block b: its successors and the subroutines it calls."""
    return (*kernel.blocks[b].successors, *kernel.blocks[b].calls)


def _reachable(kernel: KernelSass) -> set[int]:
    seen, todo = {0}, [0]
    while todo:
        b = todo.pop()
        for s in _next(kernel, b):
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return seen


def _dominators(kernel: KernelSass, reachable: frozenset[int] | set[int]) -> dict[int, set[int]]:
    preds: dict[int, set[int]] = {b: set() for b in reachable}
    for p in reachable:
        for s in _next(kernel, p):
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


def _unpinned(
    structure: tuple[frozenset[int], dict[int, set[int]], tuple[tuple[int, int], ...]], pins: set[int]
) -> list[tuple[int, int]]:
    """Back edges (latch, header) of loops whose passes no anchor pins: none that constrains this solve (an
    unpredicated copy) on a block that dominates the latch. nvcc lays a loop out from its header: a back
    edge runs to a lower address."""
    _, dom, back_edges = structure
    return [(p, s) for p, s in back_edges if not any(d in pins for d in dom[p] if s <= d <= p)]


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
def _structure(kernel: KernelSass) -> tuple[frozenset[int], dict[int, set[int]], tuple[tuple[int, int], ...]]:
    """What of the flow does not depend on the counts: the blocks a warp can reach, their dominators, the
    back edges."""
    reachable = _reachable(kernel)
    back = tuple((p, s) for p in sorted(reachable) for s in kernel.blocks[p].successors if s <= p)
    return frozenset(reachable), _dominators(kernel, reachable), back


def _region_exits(kernel: KernelSass, opened: int, closing: int) -> tuple[list[int], list[tuple[int, int]]]:
    """The blocks between a BSSY (block `opened`) and its BSYNC (block `closing`) whose warps may stop there
    (an EXIT, not a subroutine's RET), and the edges that leave the region other than through its BSYNC (a
    break or an early return): warps the BSYNC never lets out."""
    first_subroutine = min(kernel.subroutines, default=len(kernel.blocks))
    inside = range(opened, closing + 1)
    stops = [
        b for b in range(opened + 1, closing) if kernel.blocks[b].leaves == ENDS and b < first_subroutine
    ]
    leaves = [(u, v) for u in range(opened, closing) for v in kernel.blocks[u].successors if v not in inside]
    return stops, leaves


def count_cta(kernel: KernelSass, sites: Mapping[str, Mapping[str, int]], threads: int) -> SassCount:
    """The bounds and likely figure of one CTA's warp instructions, given its emulated site counts."""
    blocks = kernel.blocks
    lp = _Program()
    runs = lp.variables(len(blocks))
    edges = [(p, s) for p, block in enumerate(blocks) for s in block.successors]
    carries = dict(zip(edges, lp.variables(len(edges)), strict=True))
    structure = _structure(kernel)
    reachable = structure[0]

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

    ends = [b for b, block in enumerate(blocks) if block.leaves == ENDS]
    stopped = dict(zip(ends, lp.variables(len(ends)), strict=True))  # the warps that stopped in a block
    splits: dict[int, float] = {}  # a divergent block's warps sent out beyond those that entered it
    for b, block in enumerate(blocks):
        out = {carries[(b, s)]: 1.0 for s in block.successors}
        if block.leaves == ENDS:
            lp.eq.append(({**out, runs[b]: -1.0, stopped[b]: 1.0}, 0.0))
            continue
        if not block.successors:
            continue
        if block.leaves == DIVERGES:
            (split,) = lp.variables(1)
            splits[split] = 1.0
            out[split] = -1.0
        elif block.leaves != EXACT:
            raise InputError(f"block {b} leaves by {block.leaves!r}")
        if block.reconverges is None:
            lp.eq.append(({**out, runs[b]: -1.0}, 0.0))
            continue
        # a BSYNC lets out, whole again, the warps that entered its region, less those that stopped or left
        # it on the way (a warp only part of whose lanes stopped still comes out: hence a range)
        opened = block.reconverges
        stops, escapes = _region_exits(kernel, opened, b)
        lp.ub.append(({**out, runs[opened]: -1.0}, 0.0))
        lost = {runs[opened]: 1.0, **{carries[e]: -1.0 for e in escapes}, **{stopped[s]: -1.0 for s in stops}}
        lp.ub.append(({**lost, **{v: -c for v, c in out.items()}}, 0.0))

    groups = anchor_groups(kernel, sites)
    back_edges: dict[int, float] = {}
    for latch, header in _unpinned(structure, {b for plain, _, _ in groups for b in plain}):
        back_edges[carries[(latch, header)]] = 1.0
        entries = {
            e: 1.0 - UNPINNED_LOOP_TRIPS
            for (p, s), e in carries.items()
            if s == header and not header <= p <= latch
        }
        lp.ub.append(({carries[(latch, header)]: 1.0, **entries}, 0.0))

    mismatch: dict[int, float] = {}
    for plain, predicated, count in groups:
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
    by_line = {k: v for k, v in by_line.items() if v > 0}
    return SassCount(least, most, likely, missed, by_line, tuple(float(middle[r]) for r in runs))
