"""Launch geometry of the custom kernel, decided on the host from tensor shapes alone (no device sync).

Mirrors the constants and the work split of kernels/verify/verify_attn.cuh; tests check they agree with the
source. The kernel cuts the batch's work units ((request, row tile, key tile) triples) into `ctas` equal
ranges itself, from the offsets on the device; the host only picks how many CTAs (for ranges, one wave at
most: shared memory lets one CTA per SM; and no more than keep pace with the GPU's DRAM), how many rows a CTA
holds, and whether row tiles go whole, one per CTA (in as many waves as they take), with nothing to combine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GROUP_ROWS = 16  # (token, head) rows per row group: the mma M
GROUP_THREADS = 128  # four warps per row group
MAX_ROW_GROUPS = 3  # 48 rows, 384 threads: what the kernel's registers are fitted to
BLOCK_N = 32  # keys per tile
KV_TILE_BYTES = BLOCK_N * 576 * 2  # a tile of keys in the pool: 36,864 B
STAGE_BYTES = KV_TILE_BYTES + BLOCK_N * 16  # the same in shared memory, each row padded by 16 bytes
SMEM_PER_GROUP_BYTES = 4 * GROUP_ROWS * BLOCK_N * 4 + 2 * GROUP_ROWS * 2 * 4  # partial S, 2 tiles' mask words
SMEM_FIXED_BYTES = 2 * STAGE_BYTES + 2 * BLOCK_N * 4 + 192  # two stages, two tiles' slot indices, the CTA's
# cursor and its parts for the final merge
COMBINE_HALF = 128  # combine threads per half: a row each, or of a CTA's one row every other part each
MAX_COMBINE_ROWS = 64  # rows a combine CTA merges at most
COMBINE_FIXED_BYTES = 48 + 5 * COMBINE_HALF * 4  # the segment it merges, half 1's sums; then its parts' list
# CTAs rounded to a multiple of the row tiles (up while the wave holds them, else down where that keeps
# this share of them), and they hold this many key tiles each or more (fewer, and the tile a rounded range
# may gain costs more than the parts it saves: bs1 q9 p4k, 4 tiles a CTA, modeled 8.2 -> 8.8 µs). In a
# batch of equal requests each CTA's range is then one part of one row tile, instead of straddling two (up
# to twice the parts, written and re-read; DeepSeek-V3 bs4 q65 p4k, 188 -> 176 CTAs, 107.8 -> 103.2 µs); a
# ragged batch (the plan sees shapes, not lengths) only gives up that share of its CTAs.
ALIGNED_SHARE = 0.9
ALIGN_FROM_TILES = 6
# Two combine halves once row tiles average this many parts or more: twice the bytes in flight for a
# latency-bound combine of few rows (bs1 q9 p32k: 94 parts a row, modeled 5.2 -> 4.0 µs), while a combine
# of many rows with few parts each fits fewer 256-thread CTAs per SM (bs16 q9 p4k: 6 parts, 5.2 -> 6.6).
HALVES_FROM_PARTS = 16
PART_QUARTERS = 4  # a part row's 512 fp16 columns: 4 quarters, each with its own power-of-two scale
PART_ROW_BYTES = 512 * 2 + PART_QUARTERS * 4 + 4  # fp16 columns, the quarters' scales, the row's LSE
CTAS_PER_SM = 1  # 92,096 or 100,544 B of shared memory per CTA: one fits in an SM's 100 KB
DEFAULT_SM_COUNT = 188  # RTX PRO 6000 Blackwell; the emulation plans as if on it
# About this many key tiles per CTA or more (units / MIN_TILES_PER_CTA CTAs): fewer, and the part a CTA
# writes for the combine (32 or 48 rows of fp16) costs more than the tiles it saves. When the row tiles
# average at most this many tiles, each runs whole in one CTA. Re-swept with fp16 parts (2, 3, 4, 6 on
# suites/model-report.json): 4 is still best at bs1 q9 p4k (8.64 µs; 3: 9.10, 2: 10.6), 2-3 win at p1k.
MIN_TILES_PER_CTA = 4
# With at least this many waves of whole row tiles, the tail costs less than splitting them into parts (the
# k26-verify bs16 q_len 64 cases at prefix 128 were modeled 1.6x slower split).
WHOLE_WAVES = 2
# Whole row tiles, one per CTA, when the key tiles balanced ranges would save each CTA (whole row tiles
# take their waves times a row tile's tiles; ranges, units / CTAs) are no more than what the split costs, in
# the same tiles: WHOLE_FIXED_TILES for the combine's launch and round trips, and every CTA's part, written
# and read back (PART_PASSES), over DRAM at the GPU's pace. Swept on the RTX PRO 6000 (fixed 1, 2, 3 with
# 1 pass, 2 with 0 and 2; stream launches): kernel-parity 307.6 µs in all before the rule, 294.6 at 2 and 2
# passes (or 3 and 1), 297.9 without the parts; the 40 bs4 and bs16 cases of `suites/k26-verify.json -k
# "gpu and p128 and full"` the same at every setting, none left at cuda/triton >= 1 (bs4 h16 q64: 188 split
# CTAs, 22.5 µs; 128 whole, 11.2; bs16 h8 q61: 256 whole row tiles in two waves, 30.8 -> 18.5).
WHOLE_FIXED_TILES = 2.0
PART_PASSES = 2
# The combine kernel's cost per row it merges, in one CTA's key tiles on one SM. Fitted when the combine ran a
# CTA a row whose warps each redid its index arithmetic (modeled, graph, the combine's µs x SMs / rows over a
# 48-row CTA's µs a key tile, k26-verify bs16 EAGLE-60 p127, 7,680 rows of 2 parts: H200 0.28, 64.5 µs; RTX
# PRO 6000 0.29 with 132 CTAs forced, 10.5 µs); without a cost the split looked cheap where many rows have
# few parts each (on the H200 1.5x whole row tiles' time). The combine that merges rows a warp each and pays
# the arithmetic once a CTA costs 0.17 there on the RTX PRO 6000 (6.0 µs) and 0.04 on the H200 (9.7 µs), but
# at 0.15 or 0.2 the plan split 5-10 k26-verify cases it ran whole, and 7 of the 8 modeled slower (H200 bs4
# p1k DDTree-64 on 16 heads 74.2 -> 87.0 µs, RTX PRO 6000 bs16 p4k EAGLE-60 164.2 -> 177.5): the split
# costs more than its parts and combine say. Kept at 0.25.
COMBINE_ROW_TILES = 0.25
# Rows a combine CTA merges: finding their row tile and listing its parts (64-bit divisions) is paid once
# for them, not once a row, while the combine keeps COMBINE_CTAS_PER_SLOT CTAs an SM or more to run its
# rows' round trips side by side; powers of two up to PLANNED_COMBINE_ROWS, of the rows the shapes give (a
# ragged batch's, padded to its longest request). Where two halves share a row (many parts), one row a CTA.
# Modeled on the H200 (graph, suites/model-report.json; the combine's µs at 1, 2, 4, 8 and 16 rows): q65
# p4k, 520 rows, 4.21 3.52 3.61 5.99 9.55; bs16 q9 p4k, 1,152 rows, 9.19 7.75 4.27 4.56 6.80; DeepSeek-V3
# bs4, 4,160 rows, 22.84 13.14 8.65 6.19 5.39 (the rule: 2, 4 and 16 rows; a CTA a row before, 8.23, 15.5
# and 49.6 µs); bs1 q9 p32k, 72 rows of 66 parts in two halves, 4.96 at one row, 5.40 at two.
COMBINE_CTAS_PER_SLOT = 1.5
PLANNED_COMBINE_ROWS = 16
# 48-row CTAs once a launch has at least this many 32-row work units per CTA slot: each KV tile then serves
# 48 rows, so the L2 traffic of many row tiles falls by a third, while a short launch is better served by
# more, smaller CTAs (modeled on suites/model-report.json: bs1 q9 p4k, 2 units per slot, 8.6 µs at 32 rows
# and 10.3 at 48; q65 p4k, 12 per slot, 26.1 and 23.2). Only where 48-row tiles pad no more rows than
# 32-row ones: 64 rows (EAGLE-8 on 8 heads) are 2 tiles either way, 50 % more work at 48 (modeled on the
# H200, shared-memory bound: bs1 p32k 26.6 -> 33.3 µs); 72 rows are 3 tiles of 32 or 2 of 48.
# Whole row tiles run in waves, so they hold the rows (32 or 48) that take the fewest waves times rows a CTA,
# 48 on a tie (fewer CTAs, each with its fixed cost; modeled, graph: on the H200 bs16 q_len 33 x 8 heads, 144
# row tiles of 32 in two waves 18.6 µs, 96 of 48 in one 13.6; bs16 EAGLE-60 p127, 160 of 48 in two waves
# 52.2, 240 of 32 in two 37.2; on the RTX PRO 6000 bs16 p4096 DDTree-64 on 16 heads, 528 of 32 in three
# waves 520 µs, 352 of 48 in two 350).
WIDE_UNITS_PER_SLOT = 8
# A GPU's DRAM pace: the KV tiles its DRAM delivers while one SM multiplies one 16-row group with one tile
# (S = QK^T, then PV: 144 and 128 mma.sync, 352 and 512 shared-memory wavefronts, each phase as long as the
# busier of its tensor pipe and shared memory), from the datasheets in ddbench/model/gpus.py (a test derives
# them there from the counts of ddbench/model/tiling_counters.py). A launch needs no more CTAs than keep
# pace with DRAM: each request's KV tiles are multiplied once per row tile, so row_tiles x row_groups x pace
# CTAs (times PACE_MARGIN for the rest of a tile's work) consume them as fast as DRAM brings them; more CTAs
# only add parts to write and combine. Only where that is fewer than the SMs does it change the plan: the
# RTX PRO 6000's 1,024 FLOP/clk per SM outpace its 1.8 TB/s (modeled on suites/model-report.json: bs16 q9
# p4k 188 -> 128 CTAs, 54.8 -> 51.5 µs; bs1 q9 p32k 188 -> 140, 31.1 -> 29.1); the RTX 5090 (half the mma
# rate) only where a request is one row tile (102 or 152 CTAs of its 170); the H200 (4.8 TB/s; shared
# memory binds its SMs) never (141 or more for its 132).
# Each CTA also pays about PACE_FIXED_TILES key tiles that no tile count shrinks: its prologue (the offsets,
# then Q and the first tiles behind their slot indices) and, in a cluster, its merge. The paced CTAs are
# enough that their tiles *and* that cost fit in the time DRAM brings the KV tiles (fitted on the model: bs1
# q9 p32k at 140 and 176 CTAs, 14.6 and 11.6 tiles each, 22.9 and 18.8 µs: 1.37 µs a tile and 2.8 fixed;
# 140 -> 160 CTAs, 25.5 -> 24.2 µs; bs16 q9 p4k 128 -> 160, 49.5 -> 46.1; bs1 q9 p16k 140 -> 168, 19.0 ->
# 17.6), though no more than leave ALIGN_FROM_TILES tiles a CTA (at bs1 q9 p16k the cost alone asked for
# 192 CTAs of 5.3 tiles, too few for clusters: 23.6 µs).
DRAM_PACE_BY_DEVICE = (("rtx pro 6000", 20.21), ("rtx 5090", 43.95), ("h200", 61.47))
# Thread-block clusters (sm_90 and later): where every row tile is split into k equal parts, clusters of C
# CTAs (C dividing k, at most the portable 8) merge their parts through distributed shared memory, leaving
# k / C parts a row tile for the combine, none where C = k. The plan takes the largest C that keeps
# CLUSTER_KEPT of the most CTAs of k any C keeps (rounding k down to a multiple of C: 81 parts are 80 in
# clusters of 8, 10 left, rather than 81 in clusters of 3, 27 left), where that keeps ALIGNED_SHARE, and
# only where CTAs hold ALIGN_FROM_TILES key tiles or more and the parts (over DRAM at the GPU's pace, as in
# the split's costs) cost CLUSTER_FROM_TILES of a CTA's key tiles or more: a CTA's merge (its rows of the
# cluster's parts over the SM-to-SM network, two cluster barriers) costs about a key tile, and the rounding
# may add one. Modeled on suites/model-report.json: on the RTX PRO 6000 (parts 4.4-7.9 tiles) bs1 q9 p4k,
# 4 tiles a CTA, 8.2 -> 9.5 µs with clusters of 8; bs1 q9 p32k, 15 tiles, 29.1 -> 25.5; bs16 q9 p4k 51.1
# -> 49.5, every row tile merged whole; q65 p4k 22.7 -> 17.5; on the H200 (parts about 1.9 tiles: fast
# DRAM, shared memory binds) every shape 0-8 % slower with them (q65 p4k 21.8 -> 23.6).
MAX_CLUSTER = 8
# The final merge: the last CTA to write a part of a split row tile merges the row tile into the
# output, in the verify kernel, instead of the combine kernel after it: one kernel, one launch (a graph node
# of about 1 µs, a stream launch of 2.5) and no workspace read back by a second grid. With clusters the
# counters are per lane (rows m = j mod C), so the C ranks of the last cluster share the rows; the parts
# left are k / C a row tile. Without clusters one CTA would merge a whole row tile of up to ~100 parts, far
# slower than the combine's CTAs of a few rows each: only where clusters merge. Its list of parts lives in the
# stages.
MAX_LISTED_CTAS = 2 * STAGE_BYTES // 4
CLUSTER_FROM_TILES = 3.0
# A split that would run in clusters, every row tile in whole clusters, is judged at the CTAs it would run
# (a short split's clusters of 8 hold up to 8 a row tile, far more than its balanced count) and at what it
# costs: the cluster's merge (CLUSTER_MERGE_TILES) and one part a cluster over DRAM where a row tile has
# more than one, no combine (modeled, graph: on the H200 the k26-verify bs1 and bs4 cases at prefix 127-129
# with 2-15 row tiles of 5-6 key tiles, whole row tiles -> clusters of 8 a row tile, 15.4-19.6 -> 13.2-13.7
# µs; on the RTX PRO 6000 the bs1 and bs4 ones with 3-17 row tiles, 6.2-7.8 -> 4.8-4.9). Clusters that
# straddle row tiles are judged at the balanced count and every CTA's part, as before: there whole row tiles
# beat them (RTX PRO 6000 bs4 p127 Medusa-63, 64 row tiles: 96 CTAs straddling, 12.8 µs against 7.0 whole).
CLUSTER_MERGE_TILES = 1.0  # a CTA's part of its cluster's merge, in its key tiles (see MAX_CLUSTER)
CLUSTER_KEPT = 0.98
# A split of fewer than ALIGN_FROM_TILES tiles a CTA still pays in clusters of 8 where the final merge then
# saves the combine's launch (a graph node of ~1 µs, a stream launch of 2.5) and its pass
# over the parts: every row tile in clusters of about this many key tiles a CTA (modeled on
# suites/model-report.json, RTX PRO 6000, graph: bs1 q9 p4k, 97 CTAs and a combine 8.22 µs, 144 in clusters
# 6.49; 120: 7.44, 168: 6.87; bs1 q9 p1k, 25 CTAs 7.43, 48 in clusters 6.49, 72: 5.51). 3 tiles until the
# merges took a row a warp; then the plan sweep found more clusters faster. At 2, of the 26 plans it moves
# over the shipped suites (both GPUs, graph), 21 model 10-12 % faster, 2 the same (bs1 q9 p4k on the RTX PRO
# 6000, 6.45 -> 6.43 µs) and 3 slower: bs1 p4k EAGLE-8 on the H200, 18.37 -> 18.42 (+0.2 %), and
# kernel-parity's bs1 p640 DDTree-8, 24 -> 48 CTAs, 5.70 -> 5.78 and 15.78 -> 16.05 (+1.5 %, +1.7 %).
# Where too many row tiles for that fill a wave (ragged batches, many heads), the split rounded down to
# clusters of 8 that straddle row tiles, whose ranks arrive for all their CTAs' parts and share the merge of
# a row tile (the kernel's arrive_for_cluster), only where the parts cost CLUSTER_FROM_TILES or more (modeled,
# stream launches: on the RTX PRO 6000 the 10 such cases of the shipped suites 23-34 % faster, e.g. k26-verify
# ragged bs4 p0-4096 DDTree-16 17.2 -> 12.6 µs; on the H200, whose parts cost about 2 tiles, 31 cases from
# 12 % faster to 21 % slower).
SHORT_CLUSTER_TILES = 2.0
DEFAULT_DRAM_PACE = DRAM_PACE_BY_DEVICE[0][1]  # the emulation plans as if on an RTX PRO 6000
# Clusters of MAX_CLUSTER CTAs a GPU runs at once, one CTA an SM: a cluster's CTAs share a GPC, so a GPC of
# 14 SMs holds one cluster of 8 and one of 16 two. The H200's 15 is measured (ncu's launch__cluster_max_active
# of run 7's q9 p4k launch, 120 CTAs in clusters of 8: 15 at once, of 132 SMs); the sm_120 figures are
# estimates from GB202's 12 GPCs of 16 SMs: the RTX PRO 6000's 188 SMs leave two GPCs short (22), the RTX
# 5090's 170 may leave eleven short (13). A plan of more would run its last clusters in a second wave (the
# GPU backend asks the driver, cudaOccupancyMaxActiveClusters, and plans with its answer).
MAX_CLUSTERS_BY_DEVICE = (("rtx pro 6000", 22), ("rtx 5090", 13), ("h200", 15))
DEFAULT_MAX_CLUSTERS = MAX_CLUSTERS_BY_DEVICE[0][1]
PACE_MARGIN = 1.15
PACE_FIXED_TILES = 2.0


def smem_bytes(row_groups: int) -> int:
    """The verify kernel's dynamic shared memory for CTAs of `row_groups` row groups."""
    return SMEM_FIXED_BYTES + row_groups * SMEM_PER_GROUP_BYTES


MAX_SMEM_BYTES = smem_bytes(MAX_ROW_GROUPS)  # the attribute the launch sets: 100,544


def combine_smem_bytes(ctas: int) -> int:
    """The combine kernel's dynamic shared memory: a row tile's list holds one part a CTA at most."""
    return COMBINE_FIXED_BYTES + 4 * ctas


COMBINE_SMEM_BYTES = combine_smem_bytes(MAX_LISTED_CTAS)  # the attribute the launch sets: the largest


def _by_device(table: tuple[tuple[str, Any], ...], device_name: str) -> Any:
    """A table's figure for a GPU by the name it gives itself (its entry's needle in it), or None."""
    lowered = device_name.lower()
    return next((figure for needle, figure in table if needle in lowered), None)


def dram_pace_of(device_name: str) -> float | None:
    """The DRAM pace of a GPU by the name it gives itself, or None (plan on every SM) for one not listed."""
    return _by_device(DRAM_PACE_BY_DEVICE, device_name)


def max_clusters_of(device_name: str) -> int | None:
    """Clusters of MAX_CLUSTER CTAs a GPU runs at once, by its name, or None (no limit known) for one not
    listed."""
    return _by_device(MAX_CLUSTERS_BY_DEVICE, device_name)


@dataclass(frozen=True)
class LaunchPlan:
    ctas: int  # the verify grid (1-D)
    whole_row_tiles: int  # > 0: CTA c is row tile c % whole_row_tiles of request c // whole_row_tiles, whole
    row_tiles: int  # per request at the longest q_len
    row_groups: int  # 2 or 3: 32 or 48 rows per CTA
    combine_halves: int = 1  # 1 or 2: 128 or 256 combine threads a CTA
    cluster: int = 1  # CTAs per thread-block cluster (1: none); one inside a row tile merges its parts
    final_merge: bool = False  # split row tiles merged in the verify kernel by their last CTAs: no combine
    combine_rows: int = 1  # rows a combine CTA merges (its row tiles' index arithmetic paid once for them)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.ctas, 1, 1)

    @property
    def block_m(self) -> int:
        """Rows per CTA (and per workspace part)."""
        return GROUP_ROWS * self.row_groups

    @property
    def threads(self) -> int:
        return GROUP_THREADS * self.row_groups

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.row_groups)

    @property
    def combine_threads(self) -> int:
        return COMBINE_HALF * self.combine_halves

    @property
    def splits(self) -> bool:
        """Whether row tiles may be split between CTAs, into parts in the workspace. With clusters too, where
        each cluster should merge a row tile whole: the plan sees shapes, and a ragged batch's ranges may not
        fall on row tiles."""
        return self.whole_row_tiles == 0 and self.ctas > 1

    @property
    def combines(self) -> bool:
        """Whether the combine kernel runs after the verify kernel: split row tiles, no final merge."""
        return self.splits and not self.final_merge

    @property
    def arrival_counters(self) -> int:
        """The final merge's counters: one per lane (MAX_CLUSTER) of each CTA's row tile."""
        return self.ctas * MAX_CLUSTER if self.splits and self.final_merge else 0

    @property
    def workspace_parts(self) -> int:
        """Parts (block_m rows each) the workspace holds: at most two per CTA."""
        return 2 * self.ctas if self.splits else 0


def row_tiles_of(rows: int, row_groups: int) -> int:
    return -(-rows // (GROUP_ROWS * row_groups))


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
    row_groups: int | None = None,
    dram_pace: float | None = None,
    cluster: int | None = None,
    final_merge: bool | None = None,
    max_clusters: int | None = None,
    combine_rows: int | None = None,
) -> LaunchPlan:
    """Whole row tiles, one per CTA (of the rows that take the fewest waves), where balanced ranges would
    save less than they cost; else one wave of CTAs, about MIN_TILES_PER_CTA key tiles or more each, never
    fewer CTAs than row tiles, and no more than keep pace with DRAM where `dram_pace` (the GPU's, see
    DRAM_PACE_BY_DEVICE) is given.

    `ctas` forces the number of CTAs (balanced ranges, with a combine); `whole_row_tiles` forces (True) or
    forbids (False) one CTA per whole row tile; `row_groups` forces 32 (2) or 48 (3) rows per CTA; `cluster`
    forces CTAs per cluster (1: none, for GPUs before sm_90), None lets the plan choose (MAX_CLUSTER; never
    without `dram_pace`); `final_merge` forces (True) or forbids (False) merging split row tiles in the verify
    kernel, None: where clusters merge (see MAX_LISTED_CTAS); `max_clusters`: the clusters of MAX_CLUSTER CTAs
    the GPU runs at once (MAX_CLUSTERS_BY_DEVICE), which a chosen split in them does not exceed (None: no
    limit); `combine_rows` forces the rows a combine CTA merges (1 to MAX_COMBINE_ROWS).
    """
    if cluster is not None and not 1 <= cluster <= MAX_CLUSTER:
        raise ValueError(f"cluster must be 1 to {MAX_CLUSTER} CTAs, not {cluster}")
    if combine_rows is not None and not 1 <= combine_rows <= MAX_COMBINE_ROWS:
        raise ValueError(f"combine_rows must be 1 to {MAX_COMBINE_ROWS}, not {combine_rows}")
    slots = max(1, sm_count * CTAS_PER_SM)
    rows = max_q_len * heads
    rows_chosen = row_groups is None
    if row_groups is None:  # 48 rows for a long launch, unless 32-row tiles fill waves without parts
        narrow = row_tiles_of(rows, 2)
        long_launch = estimated_units(narrow, total_keys) >= WIDE_UNITS_PER_SLOT * slots
        no_more_padding = 48 * row_tiles_of(rows, 3) <= 32 * narrow
        row_groups = 3 if long_launch and no_more_padding and batch_size * narrow < WHOLE_WAVES * slots else 2
    elif row_groups not in (2, MAX_ROW_GROUPS):
        raise ValueError(f"row_groups must be 2 or {MAX_ROW_GROUPS}, not {row_groups}")
    row_tiles = row_tiles_of(rows, row_groups)
    all_row_tiles = batch_size * row_tiles
    units = estimated_units(row_tiles, total_keys)
    _check_units(row_tiles, total_keys)
    split = (
        ctas
        if ctas is not None
        else _split_ctas(units, all_row_tiles, -(-total_keys // BLOCK_N), row_groups, slots, dram_pace)
    )
    if cluster is None:  # clusters where the parts cost more than the merge (see MAX_CLUSTER)
        clustered, cluster = _cluster_choice(
            split, units, all_row_tiles, row_groups, slots, dram_pace, max_clusters, forced=ctas is not None
        )
    else:
        clustered = split
    if whole_row_tiles is None:  # short row tiles, little saved by splitting, or waves without parts
        merged_in_verify = final_merge if final_merge is not None else cluster > 1
        merged_rows = 0 if merged_in_verify else batch_size * rows
        # the split as it would run where every row tile gets whole clusters that merge in the verify kernel
        # (a short split's may hold many more CTAs than `split`); clusters that straddle row tiles cost more
        # than the count says, and a final merge without clusters more than a cluster's merge
        in_clusters = cluster > 1 and merged_in_verify and clustered % (max(1, all_row_tiles) * cluster) == 0
        counted = clustered if in_clusters else split
        if in_clusters:
            costs = _cluster_merge_costs(clustered, cluster, all_row_tiles, row_groups, dram_pace)
        else:
            costs = _split_costs(counted, row_groups, dram_pace, merged_rows / slots)
        whole_row_tiles = ctas is None and (
            units <= all_row_tiles * MIN_TILES_PER_CTA
            or _split_saves(units, all_row_tiles, counted, slots) <= costs
            or all_row_tiles >= WHOLE_WAVES * slots
        )
    if whole_row_tiles:
        if rows_chosen:  # whole row tiles run in waves: the rows a CTA holds times the waves they take
            row_groups = min(
                (MAX_ROW_GROUPS, 2), key=lambda g: -(-batch_size * row_tiles_of(rows, g) // slots) * g
            )  # 48 on a tie: fewer CTAs, each with its fixed cost
            row_tiles = row_tiles_of(rows, row_groups)
            _check_units(row_tiles, total_keys)
        return LaunchPlan(batch_size * row_tiles, max(1, row_tiles), row_tiles, row_groups)
    split = clustered
    if split % cluster:
        raise ValueError(f"{split} CTAs do not divide into clusters of {cluster}")
    halves = 2 if split // cluster >= HALVES_FROM_PARTS * all_row_tiles > 0 else 1
    if final_merge is None:
        final_merge = cluster > 1
    if split > MAX_LISTED_CTAS:
        raise ValueError(f"a split row tile's merge lists at most {MAX_LISTED_CTAS} CTAs, not {split}")
    if combine_rows is None:  # (a final merge has no combine)
        combine_rows = 1 if final_merge else _combine_rows(batch_size * rows, slots, halves)
    # a forced 0 CTAs: the launch refuses it
    return LaunchPlan(split, 0, row_tiles, row_groups, halves, cluster, final_merge, combine_rows)


def _combine_rows(merged_rows: int, slots: int, halves: int) -> int:
    """Rows a combine CTA merges (see COMBINE_CTAS_PER_SLOT)."""
    rows = 1
    while halves == 1 and 2 * rows <= PLANNED_COMBINE_ROWS:
        if merged_rows < 2 * rows * COMBINE_CTAS_PER_SLOT * slots:
            break
        rows *= 2
    return rows


def _check_units(row_tiles: int, total_keys: int) -> None:
    """The kernel counts a request's units in 32 bits (this bounds them for any split)."""
    if estimated_units(row_tiles, total_keys) >= 2**31:
        raise ValueError(f"{row_tiles} row tiles x {total_keys} keys: more work units than 32 bits count")


def _cluster_choice(
    split: int,
    units: int,
    all_row_tiles: int,
    row_groups: int,
    slots: int,
    dram_pace: float | None,
    max_clusters: int | None,
    forced: bool,
) -> tuple[int, int]:
    """CTAs and CTAs per cluster for a split of `split` CTAs (`forced`: a caller's count, kept without
    clusters; so is any split without a DRAM pace)."""
    parts = _parts_tiles(split, row_groups, dram_pace)
    if forced or dram_pace is None:
        return split, 1
    if units >= ALIGN_FROM_TILES * split and parts >= CLUSTER_FROM_TILES:
        return _clustered(split, all_row_tiles, max_clusters)
    if units < ALIGN_FROM_TILES * split:  # a short split: clusters of 8 and no combine (see below)
        at_once = min(slots // MAX_CLUSTER, slots if max_clusters is None else max_clusters)
        return _short_clustered(split, units, all_row_tiles, slots, at_once, parts >= CLUSTER_FROM_TILES)
    return split, 1  # parts too cheap for the merge to pay (the H200's)


def _clustered(split: int, all_row_tiles: int, max_clusters: int | None = None) -> tuple[int, int]:
    """CTAs and CTAs per cluster: every row tile cut into k parts (the split rounded down to a multiple of the
    row tiles), in clusters of the largest size that keeps CLUSTER_KEPT of the most CTAs any size keeps (k
    rounded down to its multiple, and for clusters of MAX_CLUSTER to what the GPU runs at once), where that
    keeps ALIGNED_SHARE of the split; else the split without clusters."""
    k = split // all_row_tiles if all_row_tiles else 0
    if k < 2:
        return split, 1

    def kept_of(c: int) -> int:
        if c == MAX_CLUSTER and max_clusters is not None:
            return min(k, max_clusters // all_row_tiles * c) // c * c
        return k // c * c

    most = max(kept_of(c) for c in range(2, min(k, MAX_CLUSTER) + 1))
    size = max(c for c in range(2, min(k, MAX_CLUSTER) + 1) if kept_of(c) >= CLUSTER_KEPT * most)
    kept = kept_of(size)
    if kept * all_row_tiles < ALIGNED_SHARE * split:  # (none kept: 0)
        return split, 1
    return kept * all_row_tiles, size


def _short_clustered(
    split: int, units: int, all_row_tiles: int, slots: int, at_once: int, straddle: bool
) -> tuple[int, int]:
    """CTAs and CTAs per cluster for a split too short for _clustered: every row tile in clusters of
    MAX_CLUSTER CTAs of about SHORT_CLUSTER_TILES key tiles each, as many clusters as one wave holds; where
    that keeps less than ALIGNED_SHARE of the split's CTAs and `straddle` (the parts cost what clusters need,
    CLUSTER_FROM_TILES), the split rounded down to whole clusters, which then straddle row tiles; else the
    split without clusters. No more clusters than the GPU runs at once (`at_once`): where that cuts a plan of
    clusters, it keeps clusters, fewer of them (modeled on the H200's k26-verify cases it cut, bs1 p129
    Medusa-63, graph: 16 clusters 8.3 µs, which the GPU cannot run; 15 straddling 10.4; no clusters and the
    combine 12.9)."""
    if at_once < 1:  # a GPU that runs no cluster of 8 (the driver's count of 0)
        return split, 1
    rows = max(1, all_row_tiles)
    wanted = math.ceil(units / (MAX_CLUSTER * rows * SHORT_CLUSTER_TILES))
    clusters = min(wanted, slots // MAX_CLUSTER // rows)
    if clusters >= 1 and clusters * MAX_CLUSTER * rows >= ALIGNED_SHARE * split:
        fitting = min(clusters, at_once // rows)
        if fitting >= 1:
            return fitting * MAX_CLUSTER * rows, MAX_CLUSTER
        return min(clusters * rows, at_once) * MAX_CLUSTER, MAX_CLUSTER  # clusters straddling row tiles
    ctas = min(split, at_once * MAX_CLUSTER) // MAX_CLUSTER * MAX_CLUSTER
    return (ctas, MAX_CLUSTER) if straddle and ctas and ctas >= ALIGNED_SHARE * split else (split, 1)


def _split_saves(units: int, all_row_tiles: int, split: int, slots: int) -> float:
    """Key tiles a CTA saves with balanced ranges over whole row tiles in their waves."""
    if all_row_tiles == 0 or split == 0:  # nothing to run (keys without requests): nothing saved
        return 0.0
    return -(-all_row_tiles // slots) * units / all_row_tiles - units / split


def _parts_tiles(split: int, row_groups: int, dram_pace: float | None) -> float:
    """Every CTA's part, written and read back over DRAM, in one CTA's key tiles (0 without a pace)."""
    part_tiles = GROUP_ROWS * row_groups * PART_ROW_BYTES / KV_TILE_BYTES
    return split * PART_PASSES * part_tiles / (row_groups * dram_pace) if dram_pace else 0.0


def _split_costs(split: int, row_groups: int, dram_pace: float | None, combine_rows_per_slot: float) -> float:
    """What the split adds, in one CTA's key tiles: the combine's launch, every CTA's part over DRAM, and the
    combine's rows (none where the verify kernel merges them: COMBINE_ROW_TILES)."""
    combine = COMBINE_ROW_TILES * combine_rows_per_slot
    return WHOLE_FIXED_TILES + _parts_tiles(split, row_groups, dram_pace) + combine


def _cluster_merge_costs(
    ctas: int, cluster: int, all_row_tiles: int, row_groups: int, dram_pace: float | None
) -> float:
    """What a split in whole clusters adds, in one CTA's key tiles: its cluster's merge (CLUSTER_MERGE_TILES)
    and, where a row tile has more than one cluster, one part a cluster over DRAM for the final merge."""
    parts = ctas // cluster if ctas > cluster * max(1, all_row_tiles) else 0
    return CLUSTER_MERGE_TILES + _parts_tiles(parts, row_groups, dram_pace)


def _paced_ctas(units: int, kv_tiles: int, row_groups: int, dram_pace: float) -> int:
    """The CTAs that keep pace with DRAM: whose key tiles, with each CTA's fixed cost (PACE_FIXED_TILES),
    take no longer than DRAM takes to bring the batch's KV tiles, though never so many that a CTA holds fewer
    than ALIGN_FROM_TILES of them (parts aligned to row tiles, clusters) unless the tiles alone need that."""
    at_pace = kv_tiles / (row_groups * dram_pace * PACE_MARGIN)  # a CTA's tiles while DRAM brings them all
    bare = math.ceil(units / at_pace)
    per_cta = at_pace - PACE_FIXED_TILES
    with_fixed = math.ceil(units / per_cta) if per_cta > 0 else units
    return max(bare, min(with_fixed, units // ALIGN_FROM_TILES))


def _split_ctas(
    units: int, all_row_tiles: int, kv_tiles: int, row_groups: int, slots: int, dram_pace: float | None
) -> int:
    """CTAs for balanced ranges: about MIN_TILES_PER_CTA units each, one wave, no more than keep pace with
    DRAM, rounded to a multiple of the row tiles (up while that fits the wave, else down where that keeps
    ALIGNED_SHARE of them)."""
    ctas = min(slots, max(all_row_tiles, -(-units // MIN_TILES_PER_CTA)))  # 0 for an empty batch
    if dram_pace is not None and units:
        ctas = min(ctas, max(all_row_tiles, _paced_ctas(units, kv_tiles, row_groups, dram_pace)))
    per_row_tile = max(1, all_row_tiles)
    for aligned in (-(-ctas // per_row_tile) * per_row_tile, ctas // per_row_tile * per_row_tile):
        fits = aligned <= slots and units >= ALIGN_FROM_TILES * max(ctas, aligned)
        if fits and aligned >= ALIGNED_SHARE * ctas:
            return aligned  # equal requests: every row tile in the same number of parts, one per CTA
    return ctas
