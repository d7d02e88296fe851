"""Launch geometry of the custom kernel, decided on the host from tensor shapes alone (no device sync).

Mirrors the constants of kernels/verify/verify_attn.cuh; tests check they agree with the source.
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCK_M = 32  # (token, head) rows per CTA
BLOCK_N = 32  # keys per tile
THREADS = 256
SMEM_BYTES = 90_112
COMBINE_THREADS = 128
MAX_SPLITS = 64
DEFAULT_SM_COUNT = 188  # RTX PRO 6000 Blackwell; the emulation plans as if on it


@dataclass(frozen=True)
class LaunchPlan:
    grid: tuple[int, int, int]  # (splits, row tiles, requests)
    num_splits: int
    row_tiles: int

    @property
    def ctas(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


def plan_launch(
    batch_size: int,
    heads: int,
    max_q_len: int,
    total_keys: int,
    sm_count: int = DEFAULT_SM_COUNT,
    num_splits: int | None = None,
) -> LaunchPlan:
    """Split the keys only as far as needed to give every SM about two CTAs, never below one tile each."""
    row_tiles = -(-(max_q_len * heads) // BLOCK_M)
    if num_splits is None:
        base = max(1, batch_size * row_tiles)
        mean_tiles = max(1, -(-total_keys // (max(batch_size, 1) * BLOCK_N)))
        num_splits = max(1, min(MAX_SPLITS, mean_tiles, -(-2 * sm_count // base)))
    return LaunchPlan(grid=(num_splits, row_tiles, batch_size), num_splits=num_splits, row_tiles=row_tiles)
