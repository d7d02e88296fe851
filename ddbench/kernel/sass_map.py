"""A kernel's SASS as basic blocks: how many instructions each holds, where its warps go next, and which
counted primitives (by call site) it issues.

The emulation counts, per CTA, how often a warp ran each primitive at each call site (`sites` in the
counters); nvdisasm (`-gi`, of a cubin built with -lineinfo) names each SASS instruction's source line, the
inlined call chain included. A counted primitive is one SASS instruction a warp a call (an asm statement or
an intrinsic exactly; a plain load or store unless the compiler merged or split it): an *anchor*, which ties
its block's execution count to the emulation's count of its site.
ddbench/model/sass_count.py solves for every block's count from the anchors and the control flow. Pure:
parses text; `ddbench/kernel/kernel_check.py` runs the tools.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ddbench.errors import InputError
from ddbench.kernel.source_calls import FileCalls, parse_source

# The kernels of kernels/verify/verify_attn.cuh, by the name the emulation's counters give them.
KERNEL_NAMES = {"verify_attention_kernel": "verify", "combine_parts_kernel": "combine"}
# SASS opcode (prefix) -> the counted primitive(s) it is one instruction of. The first are asm statements
# or intrinsics, one instruction a call; plain loads and stores (the rest) are one an access unless the
# compiler merged, split or dropped some, which the solve absorbs as a mismatch. A generic load is an
# ld_cluster's mapa'd address, or a plain access through a pointer of unknown space.
ANCHOR_OPCODES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("HMMA", ("mma",)),
    ("LDSM", ("ldmatrix",)),
    ("LDGSTS", ("cp_async",)),
    ("BAR.SYNC", ("sync_block",)),
    ("UCGABAR_WAIT", ("sync_cluster",)),
    ("SHFL", ("shfl",)),
    ("ATOM", ("atom_global",)),
    ("ATOMG", ("atom_global",)),
    ("RED", ("atom_global",)),
    ("REDG", ("atom_global",)),
    ("LDS", ("ld_shared",)),
    ("STS", ("st_shared",)),
    ("LDG", ("ld_global",)),
    ("STG", ("st_global",)),
    ("LD", ("ld_cluster", "ld_global", "ld_shared")),
    ("ST", ("st_global", "st_shared")),
)
# How a block's warps leave it (the flow equations, ddbench/model/sass_count.py).
EXACT = "exact"  # by exactly one successor: falls through, an unconditional or uniform branch
DIVERGES = "diverges"  # a per-thread predicated branch: a warp may take both ways, as two partial warps
ENDS = "ends"  # some or all of its warps stop here (EXIT, RET, predicated EXIT)

SLOW_PATH_PREFIX = "$__internal_"
_FUNCTION = re.compile(r"^//-+ \.text\.(\S+) -+$")
_LINE = re.compile(r'^//## File "([^"]+)", line (\d+)')
_LABEL = re.compile(r"^(\.L_x_\d+|\$[^:\s]+):$")
_INSTRUCTION = re.compile(r"^/\*([0-9a-f]+)\*/\s+(.*?)\s*;$")
_PREDICATE = re.compile(r"^(@!?U?P[T0-9]+)\s+(.*)$")
_TARGET = re.compile(r"`\(([^)]+)\)")
_BARRIER_REGISTER = re.compile(r"^BS(?:SY|YNC)(?:\.\w+)?\s+(B\d+)")


@dataclass(frozen=True)
class Anchor:
    site: str  # "verify_attn.cuh:512": the innermost line of its inlined chain in the kernel's own source
    kinds: tuple[str, ...]  # the counted primitive it is one instruction of (ANCHOR_OPCODES): the first the
    # emulation counted at its site
    predicated: bool  # issued whether or not its lanes call the primitive: runs at least as often


@dataclass(frozen=True)
class Block:
    instructions: int
    successors: tuple[int, ...]
    leaves: str  # EXACT, DIVERGES or ENDS
    anchors: tuple[Anchor, ...] = ()
    calls: tuple[int, ...] = ()  # entry blocks of the subroutines it calls, once per call
    reconverges: int | None = None  # its BSYNC merges the warps that entered at this BSSY block
    # its instructions by the innermost line of the kernel's source they come from ("" where none)
    lines: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class KernelSass:
    name: str  # the emulation's name ("verify", "combine")
    blocks: tuple[Block, ...]  # block 0 is the kernel's entry
    subroutines: tuple[int, ...]  # entry blocks of the subroutines (noinline functions, division helpers)
    # entry blocks of the compiler's slow paths (`__internal_*`: 64-bit division and remainder where an
    # operand does not fit 32 bits, a reciprocal of a denormal), which these kernels' sizes never take
    slow_paths: tuple[int, ...] = ()
    # the kernel's source files by base name: where an anchor's primitive can have been counted
    # (ddbench/kernel/source_calls.py); none in hand-built maps
    source: tuple[tuple[str, FileCalls], ...] = field(default=(), hash=False, compare=False)

    @property
    def instructions(self) -> int:
        return sum(b.instructions for b in self.blocks)


@dataclass
class _Instruction:
    text: str  # without predicate
    opcode: str
    predicate: str
    target: str | None
    site: str | None


def _site(chain: list[tuple[str, int]], source_files: tuple[str, ...]) -> str | None:
    for file, line in chain:
        base = file.rsplit("/", 1)[-1]
        if base in source_files:
            return f"{base}:{line}"
    return None


def _functions(
    text: str, source_files: tuple[str, ...]
) -> dict[str, tuple[list[_Instruction], dict[str, int]]]:
    functions: dict[str, tuple[list[_Instruction], dict[str, int]]] = {}
    current: tuple[list[_Instruction], dict[str, int]] | None = None
    chain: list[tuple[str, int]] = []
    labels: list[str] = []
    fresh = False  # within a group of line comments
    for raw in text.splitlines():
        line = raw.strip()
        if m := _FUNCTION.match(line):
            current = functions.setdefault(m.group(1), ([], {}))
            chain, labels = [], []
        elif current is None:
            continue
        elif m := _LINE.match(line):  # a group of these, innermost first: each line one level of inlining
            chain = [*chain, (m.group(1), int(m.group(2)))] if fresh else [(m.group(1), int(m.group(2)))]
            fresh = True
        elif m := _LABEL.match(line):
            labels.append(m.group(1))
            fresh = False
        elif m := _INSTRUCTION.match(line):
            fresh = False
            body, predicate = m.group(2), ""
            if p := _PREDICATE.match(body):
                predicate, body = p.group(1), p.group(2)
            target = _TARGET.search(body)
            instructions, label_at = current
            for label in labels:
                label_at[label] = len(instructions)
            labels = []
            instructions.append(
                _Instruction(
                    body,
                    body.split()[0],
                    predicate,
                    target.group(1) if target else None,
                    _site(chain, source_files),
                )
            )
    return functions


def _anchor(ins: _Instruction) -> Anchor | None:
    if ins.site is None or ins.predicate == "@!PT":  # @!PT never runs: padding (e.g. LDS RZ, [RZ])
        return None
    for prefix, kinds in ANCHOR_OPCODES:
        if ins.opcode == prefix or ins.opcode.startswith(prefix + "."):
            return Anchor(ins.site, kinds, ins.predicate not in ("", "@PT"))
    return None


def _is_branch(ins: _Instruction) -> bool:
    """Ends a block: a jump, an exit, a return, or a WARPSYNC.COLLECTIVE's jump to a diverged warp's path."""
    head = ins.opcode.split(".")[0]
    return head in ("BRA", "BRX", "JMP", "EXIT", "RET") or (head == "WARPSYNC" and ins.target is not None)


def _blocks(
    instructions: list[_Instruction], label_at: dict[str, int], where: str
) -> tuple[list[Block], list[int], list[int]]:
    n = len(instructions)
    leaders = {0, *label_at.values()}
    leaders.update(k + 1 for k, ins in enumerate(instructions) if _is_branch(ins))
    starts = sorted(k for k in leaders if k < n)
    block_of_start = {start: b for b, start in enumerate(starts)}
    ends = [*starts[1:], n]

    def block_at(label: str | None, ins: _Instruction) -> int:
        if label is None or label not in label_at:
            what = "an indirect jump" if label is None else f"a jump to {label!r}, which the listing lacks"
            raise InputError(f"{ins.opcode} {ins.text[len(ins.opcode) :].strip()[:60]}: {what}", file=where)
        return block_of_start[label_at[label]]

    # BSSY Bn, `(L)` opens a region; its BSYNC Bn ends the block just before L, where the warp, split by
    # the branches between, runs on whole again.
    reconverge_at: dict[int, int] = {}
    for b, (start, end) in enumerate(zip(starts, ends, strict=True)):
        for ins in instructions[start:end]:
            if ins.opcode.startswith("BSSY"):
                closing = block_at(ins.target, ins) - 1
                register = _BARRIER_REGISTER.match(ins.text)
                tail = instructions[starts[closing] : ends[closing]]
                if register and any(
                    i.opcode.startswith("BSYNC")
                    and (m := _BARRIER_REGISTER.match(i.text))
                    and m.group(1) == register.group(1)
                    for i in tail
                ):
                    reconverge_at[closing] = b
    blocks: list[Block] = []
    for b, (start, end) in enumerate(zip(starts, ends, strict=True)):
        body = instructions[start:end]
        last = body[-1]
        head = last.opcode.split(".")[0]
        uniform = last.predicate in ("", "@PT") or last.predicate.startswith(("@UP", "@!UP"))
        fallthrough = [block_of_start[end]] if end < n else []
        if head in ("EXIT", "RET"):
            successors, leaves = ([] if last.predicate == "" else fallthrough), ENDS
        elif _is_branch(last):
            taken = [block_at(last.target, last)]
            operands = last.text[len(last.opcode) :].strip()
            conditional = last.predicate != "" or not operands.startswith("`")  # BRA.U !UP0, BRA.DIV, ...
            successors = taken + [s for s in fallthrough if conditional and s not in taken]
            per_thread = not uniform or head == "WARPSYNC" or ".DIV" in last.opcode
            leaves = DIVERGES if len(successors) > 1 and per_thread else EXACT
        else:
            successors, leaves = fallthrough, EXACT
        calls = tuple(block_at(ins.target, ins) for ins in body if ins.opcode.startswith("CALL"))
        blocks.append(
            Block(
                instructions=len(body),
                successors=tuple(successors),
                leaves=leaves,
                anchors=tuple(a for ins in body if (a := _anchor(ins)) is not None),
                calls=calls,
                reconverges=reconverge_at.get(b),
                lines=tuple(Counter(ins.site or "" for ins in body).items()),
            )
        )
    subroutines = sorted({c for blk in blocks for c in blk.calls})
    slow = sorted(block_of_start[at] for label, at in label_at.items() if label.startswith(SLOW_PATH_PREFIX))
    return blocks, subroutines, slow


def parse_sass(
    text: str, sources: Mapping[str, str], where: str = "nvdisasm output"
) -> dict[str, KernelSass]:
    """The kernels of an `nvdisasm -gi` listing, by their emulation name; `sources`: the kernel's own source
    files (where the emulation records its call sites), their text by base name."""
    out: dict[str, KernelSass] = {}
    calls = tuple((name, parse_source(text)) for name, text in sorted(sources.items()))
    for mangled, (instructions, label_at) in _functions(text, tuple(sources)).items():
        name = next((emu for cxx, emu in KERNEL_NAMES.items() if cxx in mangled), None)
        if name is None or not instructions:
            continue
        blocks, subroutines, slow = _blocks(instructions, label_at, where)
        out[name] = KernelSass(name, tuple(blocks), tuple(subroutines), tuple(slow), calls)
    if not out:
        raise InputError("no verify or combine kernel in the listing", file=where)
    return out
