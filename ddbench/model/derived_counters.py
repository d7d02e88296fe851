"""Counters the model derives rather than counts: the same typed records the emulation produces
(ddbench/counters.py), with what a derivation does not know left at 0 (pure).

The Triton kernel's model (`triton_model.py`) and the hand-derived tiling of the custom kernel
(`tiling_counters.py`) build their launches from these, so every modeled kernel goes through one record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ddbench.counters import (
    INSTRUCTION_KINDS,
    SHARED_KINDS,
    CpAsyncCounters,
    CtaShape,
    GlobalCounters,
    KernelCounters,
    PhaseCounters,
    SharedCounters,
    Totals,
)

NO_INSTRUCTIONS = dict.fromkeys(INSTRUCTION_KINDS, 0)


def phase(
    mma: int = 0, wavefronts: int = 0, global_bytes: int = 0, shuffles: int = 0, instructions: int = 0
) -> PhaseCounters:
    """One phase (the stretch between barriers) with the figures the model reads."""
    return PhaseCounters(
        mma=mma,
        shared_wavefronts=wavefronts,
        global_bytes=global_bytes,
        global_store_bytes=0,
        shuffles=shuffles,
        warp_instructions=instructions,
        instructions=NO_INSTRUCTIONS,
    )


def cta_shape(count: int, phases: Sequence[PhaseCounters], global_bytes: int) -> CtaShape:
    """`count` CTAs that run `phases` and move `global_bytes` each."""
    return CtaShape(
        count=count,
        example_cta=(0, 0, 0),
        phases=tuple(phases),
        barriers=0,
        global_bytes=global_bytes,
        load_bytes=0,
        store_bytes=0,
        cp_async_bytes=0,
        sectors=0,
        unique_sectors=0,
        shared_wavefronts=0,
        bank_conflicts=0,
        cp_async_waits=(),
    )


def derived_kernel(
    name: str,
    grid: tuple[int, int, int],
    threads_per_cta: int,
    dynamic_smem_bytes: int,
    shapes: Sequence[CtaShape],
    sectors: int,
    unique_sectors: int,
    *,
    shared_instructions: Mapping[str, int] | None = None,
    shared_wavefronts: Mapping[str, int] | None = None,
    bytes_in_flight_at_wait: tuple[int, ...] = (),
    barriers: int = 0,
    mma: int = 0,
) -> KernelCounters:
    """A kernel's counters from its grid, shapes and traffic; shared-memory tables by SHARED_KINDS."""
    ctas = grid[0] * grid[1] * grid[2]
    return KernelCounters(
        name=name,
        grid=grid,
        threads_per_cta=threads_per_cta,
        ctas=ctas,
        dynamic_smem_bytes=dynamic_smem_bytes,
        cta_detail="shapes",
        totals=Totals(
            barriers=barriers,
            mma=mma,
            ldmatrix=0,
            shuffles=0,
            global_=GlobalCounters(0, 0, 0, sectors, unique_sectors),
            shared=SharedCounters(
                instructions=_by_kind(shared_instructions),
                wavefronts=_by_kind(shared_wavefronts),
                bank_conflicts=0,
            ),
            cp_async=CpAsyncCounters(len(bytes_in_flight_at_wait), bytes_in_flight_at_wait, 0),
        ),
        cta_shapes=tuple(shapes),
        emulated_ctas=ctas,
    )


def _by_kind(table: Mapping[str, int] | None) -> dict[str, int]:
    unknown = set(table or {}) - set(SHARED_KINDS)
    if unknown:
        raise ValueError(f"unknown shared-memory kinds {sorted(unknown)}")
    return {kind: (table or {}).get(kind, 0) for kind in SHARED_KINDS}
