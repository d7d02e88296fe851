"""What ptxas reports for each kernel (registers, spills, stack, barriers) and what the SASS contains.

Pure parsing of `nvcc --resource-usage` output and `cuobjdump -sass` listings; `kernel_check.py` runs them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

REGISTER_LIMIT = 255
SMEM_LIMIT_BYTES = 101_376  # sm_120: 99 KB of shared memory per block
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>sm_\d+a?)'")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USED = re.compile(r"Used (?P<regs>\d+) registers(?P<rest>.*)")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_SMEM = re.compile(r"(?P<bytes>\d+) bytes smem")
_BARRIERS = re.compile(r"used (?P<n>\d+) barriers")
_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


@dataclass
class KernelResources:
    name: str
    arch: str
    registers: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    static_smem_bytes: int = 0
    barriers: int = 0
    # the spills of the out-of-line functions ptxas listed after this kernel (its callees):
    # name -> (bytes stored, bytes loaded)
    callee_spills: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def short_name(self) -> str:
        match = re.search(r"(\d+)([a-z_]+kernel)", self.name)
        return match.group(2) if match else self.name


def parse_resource_usage(report: str) -> list[KernelResources]:
    """Each entry function's resources. A frame line belongs to the function its "Function properties" line
    names: the out-of-line functions listed after a kernel have frames of their own, which must not overwrite
    the kernel's (a kernel's spill once read as none that way)."""
    kernels: list[KernelResources] = []
    owner: str | None = None  # the function the next frame line describes (None: the kernel, older reports)
    for line in report.splitlines():
        if m := _ENTRY.search(line):
            kernels.append(KernelResources(name=m["name"], arch=m["arch"]))
            owner = None
        elif m := _PROPERTIES.search(line):
            owner = m["name"]
        elif kernels and (m := _FRAME.search(line)):
            k = kernels[-1]
            stack, stores, loads = int(m["stack"]), int(m["stores"]), int(m["loads"])
            if owner in (None, k.name):
                k.stack_bytes, k.spill_store_bytes, k.spill_load_bytes = stack, stores, loads
            elif stores or loads:
                k.callee_spills[owner] = (stores, loads)
        elif kernels and (m := _USED.search(line)):
            k = kernels[-1]
            k.registers = int(m["regs"])
            if s := _SMEM.search(m["rest"]):
                k.static_smem_bytes = int(s["bytes"])
            if b := _BARRIERS.search(m["rest"]):
                k.barriers = int(b["n"])
    return kernels


@dataclass
class SassCensus:
    opcodes: Counter[str] = field(default_factory=Counter)

    def count(self, prefix: str) -> int:
        return sum(n for op, n in self.opcodes.items() if op == prefix or op.startswith(prefix + "."))

    @property
    def forbidden(self) -> list[str]:
        """Hopper's warpgroup MMA and datacenter Blackwell's tcgen05 (UTC*), which sm_120 lacks (TMA, UTMA*,
        it has)."""
        return sorted(op for op in self.opcodes if op.startswith(("HGMMA", "UTC")))


def sass_census(listing: str) -> SassCensus:
    return SassCensus(Counter(m["op"] for m in _OPCODE.finditer(listing)))


def violations(kernel: KernelResources, dynamic_smem_bytes: int) -> list[str]:
    out = []
    if kernel.spill_store_bytes or kernel.spill_load_bytes:
        out.append(f"spills {kernel.spill_store_bytes} B stored, {kernel.spill_load_bytes} B loaded")
    for name, (stored, loaded) in kernel.callee_spills.items():
        out.append(f"its out-of-line {name} spills {stored} B stored, {loaded} B loaded")
    if kernel.registers > REGISTER_LIMIT:
        out.append(f"{kernel.registers} registers > {REGISTER_LIMIT}")
    smem = kernel.static_smem_bytes + dynamic_smem_bytes
    if smem > SMEM_LIMIT_BYTES:
        out.append(f"{smem} B of shared memory > {SMEM_LIMIT_BYTES}")
    return out
