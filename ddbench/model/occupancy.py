"""How many CTAs of a kernel an SM holds at once, and how many waves a grid takes (pure).

CTAs per SM = min(by shared memory, by registers, by warps, by the block limit), the way the CUDA occupancy
calculator counts: each CTA also holds 1 KB of system shared memory, and registers are allocated per warp in
units of 256. Unknown registers (no ptxas report for the arch) do not limit, and the result says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddbench.errors import InputError
from ddbench.gpus import REGISTER_ALLOCATION_UNIT, SYSTEM_SMEM_PER_CTA, GpuSpec


@dataclass(frozen=True)
class Occupancy:
    ctas_per_sm: int
    by_smem: int
    by_registers: int | None  # None: registers unknown
    by_warps: int
    by_blocks: int

    @property
    def limited_by(self) -> str:
        limits = {"smem": self.by_smem, "warps": self.by_warps, "blocks": self.by_blocks}
        if self.by_registers is not None:
            limits["registers"] = self.by_registers
        return min(limits, key=lambda k: limits[k])

    def to_json(self) -> dict[str, object]:
        return {
            "ctas_per_sm": self.ctas_per_sm,
            "limited_by": self.limited_by,
            "by_smem": self.by_smem,
            "by_registers": self.by_registers,
            "by_warps": self.by_warps,
            "by_blocks": self.by_blocks,
        }


def registers_per_warp(registers_per_thread: int) -> int:
    raw = registers_per_thread * 32
    return -(-raw // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT


def occupancy(
    gpu: GpuSpec, threads_per_cta: int, smem_bytes: int, registers_per_thread: int | None
) -> Occupancy:
    """Raises InputError for a CTA no SM of `gpu` can hold (too many threads, smem or registers)."""
    if threads_per_cta <= 0:
        raise InputError(f"threads_per_cta must be positive, not {threads_per_cta}")
    warps = -(-threads_per_cta // 32)
    by_smem = gpu.smem_per_sm_bytes // (smem_bytes + SYSTEM_SMEM_PER_CTA)
    by_warps = gpu.max_warps_per_sm // warps
    by_registers = None
    if registers_per_thread is not None:
        by_registers = gpu.registers_per_sm // (registers_per_warp(registers_per_thread) * warps)
    problems = []
    if smem_bytes > gpu.smem_per_cta_bytes or by_smem == 0:
        problems.append(f"{smem_bytes} B of shared memory > {gpu.smem_per_cta_bytes} per block")
    if by_warps == 0:
        problems.append(f"{threads_per_cta} threads > {gpu.max_warps_per_sm * 32} per SM")
    if by_registers == 0:
        problems.append(
            f"{registers_per_thread} registers x {threads_per_cta} threads > {gpu.registers_per_sm}"
        )
    if problems:
        raise InputError(f"a CTA does not fit an SM of {gpu.name}: " + "; ".join(problems))
    limits = [by_smem, by_warps, gpu.max_ctas_per_sm] + ([by_registers] if by_registers is not None else [])
    return Occupancy(min(limits), by_smem, by_registers, by_warps, gpu.max_ctas_per_sm)


def waves(ctas: int, sms: int, ctas_per_sm: int) -> int:
    """Full or partial rounds of the grid over every CTA slot of the GPU (a tail counts as a wave)."""
    return math.ceil(ctas / (sms * ctas_per_sm)) if ctas > 0 else 0


def tail_ctas(ctas: int, sms: int, ctas_per_sm: int) -> int:
    """CTAs in the last, partial wave (0 when the grid fills its waves exactly)."""
    return ctas % (sms * ctas_per_sm)
