"""Launch geometry of the custom kernel, decided on the host from tensor shapes alone (no device sync).

Mirrors the constants and the work split of kernels/verify/verify_attn.cuh; tests check they agree with the
source. The kernel cuts the batch's work units ((request, row tile, key tile) triples) into `ctas` equal
ranges itself, from the offsets on the device; the host only picks how many CTAs (one wave: shared memory
lets one CTA per SM) and whether short row tiles go one per CTA with nothing to combine.
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCK_M = 32  # (token, head) rows per CTA
BLOCK_N = 32  # keys per tile
THREADS = 256
SMEM_BYTES = 94_208
REDUCE_STRIDE = BLOCK_N + 8  # floats between partial-S rows
COMBINE_THREADS = 128
PART_QUARTERS = 4  # a part row's 512 fp16 columns: 4 quarters, each with its own power-of-two scale
PART_ROW_BYTES = 512 * 2 + PART_QUARTERS * 4 + 4  # fp16 columns, the quarters' scales, the row's LSE
CTAS_PER_SM = 1  # 94,208 B of shared memory per CTA: one fits in an SM's 100 KB
DEFAULT_SM_COUNT = 188  # RTX PRO 6000 Blackwell; the emulation plans as if on it
# About this many key tiles per CTA or more (units / MIN_TILES_PER_CTA CTAs): fewer, and the part a CTA
# writes for the combine (32 KB of fp16 per row tile) costs more than the tiles it saves. When the row
# tiles average at most this many tiles, each runs whole in one CTA. Re-swept with fp16 parts (2, 3, 4, 6 on
# suites/model-report.json): 4 is still best at bs1 q9 p4k (8.64 µs; 3: 9.10, 2: 10.6), 2-3 win at p1k.
MIN_TILES_PER_CTA = 4
# With at least this many waves of whole row tiles, the tail costs less than splitting them into parts (the
# k26-verify bs16 q_len 64 cases at prefix 128 were modeled 1.6x slower split).
WHOLE_WAVES = 2


@dataclass(frozen=True)
class LaunchPlan:
    ctas: int  # the verify grid (1-D)
    whole_row_tiles: int  # > 0: CTA c is row tile c % whole_row_tiles of request c // whole_row_tiles, whole
    row_tiles: int  # per request at the longest q_len

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.ctas, 1, 1)

    @property
    def combines(self) -> bool:
        """Whether the combine kernel runs: row tiles may be split between CTAs."""
        return self.whole_row_tiles == 0 and self.ctas > 1

    @property
    def workspace_parts(self) -> int:
        """Parts (BLOCK_M rows each) the workspace holds: at most two per CTA."""
        return 2 * self.ctas if self.combines else 0


def estimated_units(row_tiles: int, total_keys: int) -> int:
    """About the work units the kernel will count (from shapes): the batch's key tiles times the row tiles."""
    return row_tiles * (-(-total_keys // BLOCK_N))


def plan_launch(
    batch_size: int,
    heads: int,
    max_q_len: int,
    total_keys: int,
    sm_count: int = DEFAULT_SM_COUNT,
    ctas: int | None = None,
    whole_row_tiles: bool | None = None,
) -> LaunchPlan:
    """One wave of CTAs, about MIN_TILES_PER_CTA key tiles or more each, never fewer CTAs than row tiles.

    `ctas` forces the number of CTAs (balanced ranges, with a combine); `whole_row_tiles` forces (True) or
    forbids (False) one CTA per whole row tile.
    """
    row_tiles = -(-(max_q_len * heads) // BLOCK_M)
    all_row_tiles = batch_size * row_tiles
    units = estimated_units(row_tiles, total_keys)
    slots = max(1, sm_count * CTAS_PER_SM)
    if whole_row_tiles is None:  # short row tiles, or enough of them for waves without parts to combine
        whole_row_tiles = ctas is None and (
            units <= all_row_tiles * MIN_TILES_PER_CTA or all_row_tiles >= WHOLE_WAVES * slots
        )
    if whole_row_tiles:
        return LaunchPlan(ctas=all_row_tiles, whole_row_tiles=max(1, row_tiles), row_tiles=row_tiles)
    if ctas is None:
        ctas = min(slots, max(all_row_tiles, -(-units // MIN_TILES_PER_CTA)))  # 0 for an empty batch
    return LaunchPlan(
        ctas=ctas, whole_row_tiles=0, row_tiles=row_tiles
    )  # a forced 0 is the launch's to refuse
