"""Which counted primitives each line of the kernel's source can issue, directly or through the kernel's own
functions it calls: where the SASS count (ddbench/model/sass_count.py) looks for an anchor's emulated site
when nvcc's line table names the wrong line.

nvdisasm names an instruction's line from the inlined chain ptxas kept. Out of line (the merges), ptxas
sometimes keeps only the outermost frame: a shuffle inlined from `warp_max` is named at the line that calls
`warp_max`, where the emulation (which records the line of each ddk:: call) counted none. Or it names an
earlier statement for a load it hoisted, or, after an unrelated change, a helper's line for a store. Held to
the count of a line that issues no such primitive (0), such an anchor bends the solve's flow. The source says
where it can come from: the lines of the functions its line calls, or else any line its function reaches.
Pure: parses text.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

# ddk:: primitive (kernels/include/ddk/primitives.h) -> the counted kinds one call issues (the emulation's
# op names, kernels/emu/counters.h). tests/test_source_calls.py checks that every primitive taking a call
# site is here or in UNCOUNTED.
PRIMITIVE_KINDS: Mapping[str, tuple[str, ...]] = {
    "mma_bf16_m16n8k16": ("mma",),
    "ldmatrix_x4": ("ldmatrix",),
    "ldmatrix_x4_trans": ("ldmatrix",),
    "ldmatrix_x2": ("ldmatrix",),
    "ldmatrix_x2_trans": ("ldmatrix",),
    "cp_async_16": ("cp_async",),
    "cp_async_4": ("cp_async",),
    "sync_block": ("sync_block",),
    "sync_cluster": ("sync_cluster",),
    "cluster_arrive": ("sync_block",),  # its block barrier; the arrival itself is no counted kind
    "cluster_wait": ("sync_cluster",),
    "shfl_xor": ("shfl",),
    "ld_cluster": ("ld_cluster",),
    "ld_global": ("ld_global",),
    "ld_global_cg": ("ld_global",),
    "st_global": ("st_global",),
    "st_generic": ("st_global", "st_shared"),
    "atomic_add_global": ("atom_global",),
    "ld_shared": ("ld_shared",),
    "st_shared": ("st_shared",),
}
# primitives that take a call site for their error reports but count no instruction kind
UNCOUNTED = frozenset({"cp_async_wait", "cp_async_wait_all"})

_DEFINITION = re.compile(r"^DDK_\w+")
_CALL = re.compile(r"\b(ddk::)?([A-Za-z_]\w*)\s*(?:<[^;(){}<>]*(?:<[^;(){}<>]*>[^;(){}<>]*)*>)?\s*\(")
_MACRO = re.compile(r"^DDK_\w+$")
# a statement's call may carry another line than the emulation's site (its arguments on the next lines)
STATEMENT_LINES = 2


def _code(text: str) -> list[str]:
    """The lines without comments, string and character literals (their braces and names are not code)."""
    text = re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return [re.sub(r"//.*", "", line) for line in text.split("\n")]


@dataclass(frozen=True)
class FileCalls:
    """One source file: its functions' bodies, the functions and primitives each line calls."""

    bodies: tuple[tuple[str, int, int], ...]  # (function, first line, last line), 1-based, overloads apart
    calls: tuple[tuple[int, tuple[str, ...]], ...]  # line -> the file's functions it calls
    primitives: tuple[tuple[int, tuple[str, ...]], ...]  # line -> the counted kinds its ddk:: calls issue

    @cached_property
    def _calls(self) -> dict[int, tuple[str, ...]]:
        return dict(self.calls)

    @cached_property
    def _kinds(self) -> dict[int, tuple[str, ...]]:
        return dict(self.primitives)

    def issues(self, line: int, kind: str) -> bool:
        return kind in self._kinds.get(line, ())

    def reach(self, lines: Iterable[int]) -> set[int]:
        """The lines and every line of the functions they call, transitively."""
        seen: set[str] = set()
        out = set(lines)
        todo = [name for line in out for name in self._calls.get(line, ())]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for fn, first, last in self.bodies:
                if fn == name:
                    body = range(first, last + 1)
                    out.update(body)
                    todo.extend(n for line in body for n in self._calls.get(line, ()))
        return out

    def function_of(self, lines: Iterable[tuple[int, int]]) -> str | None:
        """The function that reaches most of these (line, instructions), the one that reaches least besides
        among equals: the out-of-line function whose code they are, not a helper it inlined nor its caller."""
        lines = list(lines)
        best: tuple[int, int, str] | None = None
        for name in dict.fromkeys(name for name, _, _ in self.bodies):
            reach = self.reach(self._body(name))
            covered = sum(n for line, n in lines if line in reach)
            if covered and (best is None or (covered, -len(reach)) > best[:2]):
                best = (covered, -len(reach), name)
        return None if best is None else best[2]

    def function_sites(self, name: str, kind: str) -> tuple[int, ...]:
        """The lines a function reaches (its body and its callees') that issue `kind`."""
        memo = self._sites.get((name, kind))
        if memo is None:
            memo = tuple(sorted(n for n in self.reach(self._body(name)) if self.issues(n, kind)))
            self._sites[(name, kind)] = memo
        return memo

    def _body(self, name: str) -> list[int]:
        return [n for fn, first, last in self.bodies if fn == name for n in range(first, last + 1)]

    @cached_property
    def _sites(self) -> dict[tuple[int | str, str], tuple[int, ...]]:
        return {}  # by (line or function, kind)

    def sites(self, line: int, kind: str) -> tuple[int, ...]:
        """The lines where a `kind` instruction named at `line` was counted: those of its statement that call
        the primitive; failing those, those of the functions its statement calls (nvcc kept only the outer
        frame); () where neither does (nvcc named another statement: see function_sites)."""
        memo = self._sites.get((line, kind))
        if memo is None:
            statement = range(line - STATEMENT_LINES, line + STATEMENT_LINES + 1)
            for lines in (statement, self.reach(statement)):
                memo = tuple(sorted(n for n in lines if self.issues(n, kind)))
                if memo:
                    break
            self._sites[(line, kind)] = memo
        return memo


def parse_source(text: str) -> FileCalls:
    """A kernel source's functions (definitions at column 0 that start with a DDK_ macro) and calls."""
    code = _code(text)
    joined = "\n".join(code)
    line_at = [0]  # the offset of each line's start
    for line in code:
        line_at.append(line_at[-1] + len(line) + 1)

    def line_of(offset: int) -> int:
        return bisect.bisect_right(line_at, offset)

    bodies: list[tuple[str, int, int]] = []
    for k, line in enumerate(code):
        if not _DEFINITION.match(line):
            continue
        body = _body(joined, line_at[k])
        if body is not None:
            bodies.append((body[0], k + 1, line_of(body[1])))
    names = {name for name, _, _ in bodies}
    defined = {first: name for name, first, _ in bodies}
    calls: list[tuple[int, tuple[str, ...]]] = []
    primitives: list[tuple[int, tuple[str, ...]]] = []
    for n, line in enumerate(code, start=1):
        found = _CALL.findall(line)
        if ("", defined.get(n)) in found:  # a definition's own name is not a call
            found.remove(("", defined[n]))
        mine = tuple(sorted({name for ddk, name in found if not ddk and name in names}))
        kinds = tuple(sorted({kind for ddk, name in found if ddk for kind in PRIMITIVE_KINDS.get(name, ())}))
        if mine:
            calls.append((n, mine))
        if kinds:
            primitives.append((n, kinds))
    return FileCalls(tuple(bodies), tuple(calls), tuple(primitives))


def _body(code: str, start: int) -> tuple[str, int] | None:
    """(name, offset of its closing `}`) of the definition at `start`; None for a declaration or an
    unbalanced text."""
    parens = 0
    for at in range(start, len(code)):
        ch = code[at]
        if ch == "(":
            parens += 1
        elif ch == ")":
            parens -= 1
        elif ch == ";" and parens == 0:
            return None
        elif ch == "{" and parens == 0:
            called = [m.group(2) for m in _CALL.finditer(code, start, at) if not _MACRO.match(m.group(2))]
            if not called:
                return None
            depth = 0
            for end in range(at, len(code)):
                depth += {"{": 1, "}": -1}.get(code[end], 0)
                if depth == 0:
                    return called[0], end
            return None
    return None
