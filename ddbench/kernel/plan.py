"""Launch geometry of the custom kernel, decided on the host from tensor shapes alone (no device sync).

Mirrors the constants and the work split of kernels/verify/verify_attn.cuh; tests check they agree with the
source. The kernel cuts the batch's work units ((request, row tile, key tile) triples) into `ctas` equal
ranges itself, from the offsets on the device; the host only picks how many CTAs (for ranges, one wave at
most: shared memory lets one CTA per SM; and no more than keep pace with the GPU's DRAM), how many rows a CTA
holds, and whether row tiles go whole, one per CTA (in as many waves as they take), with nothing to combine.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ddbench.gpus import EMULATED_GPU, GpuSpec, gpu_of_device

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
# The plan's thresholds are fitted on the model (suites/model-report.json, both GPUs); the figures of each
# fit are in git history. What each one trades:
#
# CTAs are rounded to a multiple of the row tiles (up while one wave holds them, else down where that keeps
# ALIGNED_SHARE of them), so that in a batch of equal requests each CTA's range is one part of one row tile
# rather than straddling two (twice the parts to write and re-read). Only where CTAs hold ALIGN_FROM_TILES
# key tiles or more: below that, the tile a rounded range gains costs more than the parts it saves. A ragged
# batch (the plan sees shapes, not lengths) gives up at most 1 - ALIGNED_SHARE of its CTAs.
ALIGNED_SHARE = 0.9
ALIGN_FROM_TILES = 6
# The combine runs two halves a row once row tiles average HALVES_FROM_PARTS parts: twice the bytes in
# flight for a latency-bound merge of few rows with many parts, while many rows of few parts each are better
# served by more, smaller CTAs.
HALVES_FROM_PARTS = 16
PART_QUARTERS = 4  # a part row's 512 fp16 columns: 4 quarters, each with its own power-of-two scale
PART_ROW_BYTES = 512 * 2 + PART_QUARTERS * 4 + 4  # fp16 columns, the quarters' scales, the row's LSE
CTAS_PER_SM = 1  # 92,096 or 100,544 B of shared memory per CTA: one fits in an SM's 100 KB
DEFAULT_SM_COUNT = EMULATED_GPU.sms  # the emulation plans as if on this GPU
# A CTA holds about MIN_TILES_PER_CTA key tiles or more: with fewer, the part it writes for the combine (32
# or 48 rows of fp16) costs more than the tiles it saves. Row tiles of at most this many tiles run whole.
MIN_TILES_PER_CTA = 4
# With WHOLE_WAVES waves or more of whole row tiles, the last wave's tail costs less than parts would.
WHOLE_WAVES = 2
# Whole row tiles, one per CTA, when the key tiles balanced ranges would save each CTA are no more than what
# the split costs in the same tiles: WHOLE_FIXED_TILES for the combine's launch and round trips, plus every
# CTA's part, written and read back (PART_PASSES), over DRAM at the GPU's pace.
WHOLE_FIXED_TILES = 2.0
PART_PASSES = 2
# The combine's cost per row it merges, in one CTA's key tiles on one SM. Without it a split looks cheap
# where many rows have few parts each; lower values made the plan split cases the model then ran slower.
COMBINE_ROW_TILES = 0.25
# Rows a combine CTA merges: finding their row tile and listing its parts (64-bit divisions) is paid once a
# CTA, not once a row, while the combine keeps COMBINE_CTAS_PER_SLOT CTAs an SM or more to overlap its rows'
# round trips. Powers of two up to PLANNED_COMBINE_ROWS, of the rows the shapes give (a ragged batch's,
# padded to its longest request); one row a CTA where two halves share a row.
COMBINE_CTAS_PER_SLOT = 1.5
PLANNED_COMBINE_ROWS = 16
# 48-row CTAs once a launch has WIDE_UNITS_PER_SLOT or more 32-row work units per CTA slot: each KV tile then
# serves 48 rows and the L2 traffic falls by a third, while a short launch is better served by more, smaller
# CTAs. Only where 48-row tiles pad no more rows than 32-row ones (64 rows are 2 tiles either way, 50 % more
# work at 48). Whole row tiles take the row count (32 or 48) that needs the fewest waves times rows a CTA,
# 48 on a tie (fewer CTAs, each with its fixed cost).
WIDE_UNITS_PER_SLOT = 8
# DRAM pace (GpuSpec.dram_pace): each request's KV tiles are multiplied once per row tile, so row_tiles x
# row_groups x pace CTAs (times PACE_MARGIN for the rest of a tile's work) consume them as fast as DRAM
# brings them; more CTAs only add parts to write and combine. It changes the plan only where that is fewer
# than the SMs: a GPU whose tensor pipes outpace its DRAM (the RTX PRO 6000), not one whose shared memory
# binds first (the H200). Each CTA also pays about PACE_FIXED_TILES tiles no tile count shrinks (its
# prologue and, in a cluster, its merge); the paced CTAs are enough that their tiles and that cost fit in
# the time DRAM brings the tiles, though no more than leave ALIGN_FROM_TILES tiles a CTA.
PACE_MARGIN = 1.15
PACE_FIXED_TILES = 2.0
# Thread-block clusters (sm_90 and later): where every row tile is split into k equal parts, clusters of C
# CTAs (C dividing k, at most the portable 8) merge their parts through distributed shared memory, leaving
# k / C parts a row tile for the combine. The plan takes the largest C that keeps CLUSTER_KEPT of the most
# CTAs any C keeps (rounding k down to a multiple of C), where that keeps ALIGNED_SHARE, and only where CTAs
# hold ALIGN_FROM_TILES key tiles or more and the parts cost CLUSTER_FROM_TILES of a CTA's tiles or more: a
# CTA's merge (its rows of the cluster's parts over the SM-to-SM network, two cluster barriers) costs about
# a key tile, and the rounding may add one. Where DRAM is fast and shared memory binds (the H200), parts
# are cheap and clusters do not pay.
MAX_CLUSTER = 8
# The final merge: the last CTA to write a part of a split row tile merges the row tile into the output in
# the verify kernel, instead of the combine kernel after it: one launch, no workspace read back by a second
# grid. With clusters the arrival counters are per lane (rows m = j mod C), so the C ranks of the last
# cluster share the rows. Without clusters one CTA would merge up to ~100 parts, far slower than the
# combine's CTAs of a few rows each: only where clusters merge. Its list of parts lives in the stages.
MAX_LISTED_CTAS = 2 * STAGE_BYTES // 4
CLUSTER_FROM_TILES = 3.0
# A split that would run in clusters, every row tile in whole clusters, is judged at the CTAs it would run
# (a short split's clusters of 8 hold up to 8 a row tile, more than its balanced count) and at what it
# costs: the cluster's merge (CLUSTER_MERGE_TILES) and one part a cluster over DRAM where a row tile has
# more than one, and no combine. Clusters that straddle row tiles are judged at the balanced count and every
# CTA's part.
CLUSTER_MERGE_TILES = 1.0  # a CTA's part of its cluster's merge, in its key tiles (see MAX_CLUSTER)
CLUSTER_KEPT = 0.98
# A split of fewer than ALIGN_FROM_TILES tiles a CTA still runs in clusters of 8 of about SHORT_CLUSTER_TILES
# key tiles a CTA where the final merge then saves the combine's launch (a graph node of ~1 µs, a stream
# launch of 2.5) and its pass over the parts. Where too many row tiles for that fill a wave (ragged
# batches, many heads), the split is rounded down to clusters of 8 that straddle row tiles, whose ranks
# arrive for all their CTAs' parts and share a row tile's merge (the kernel's arrive_for_cluster), only
# where the parts cost CLUSTER_FROM_TILES or more.
SHORT_CLUSTER_TILES = 2.0
# The emulation's launches are planned as on EMULATED_GPU unless a caller plans for another GPU.
DEFAULT_DRAM_PACE = EMULATED_GPU.dram_pace
DEFAULT_MAX_CLUSTERS = EMULATED_GPU.max_active_clusters


@dataclass(frozen=True)
class PlanOptions:
    """The GPU a launch is planned for and what a caller forces of the plan (None: the plan's own choice):
    the one value that travels from a backend, the profile command or a sweep down to `plan_launch`.

    `ctas` forces the number of CTAs (balanced ranges, with a combine); `whole_row_tiles` forces (True) or
    forbids (False) one CTA per whole row tile; `row_groups` forces 32 (2) or 48 (3) rows per CTA; `cluster`
    forces CTAs per cluster (1: none, for GPUs before sm_90), None lets the plan choose (MAX_CLUSTER; never
    without `dram_pace`); `final_merge` forces (True) or forbids (False) merging split row tiles in the verify
    kernel, None: where clusters merge (see MAX_LISTED_CTAS); `combine_rows` forces the rows a combine CTA
    merges (1 to MAX_COMBINE_ROWS). Of the GPU: its SMs, its DRAM pace (None: plan on every SM) and the
    clusters of MAX_CLUSTER CTAs it runs at once, which a chosen split does not exceed (None: no limit).
    """

    sm_count: int = DEFAULT_SM_COUNT
    dram_pace: float | None = None
    max_clusters: int | None = None
    ctas: int | None = None
    whole_row_tiles: bool | None = None
    row_groups: int | None = None
    cluster: int | None = None
    final_merge: bool | None = None
    combine_rows: int | None = None

    @classmethod
    def for_gpu(cls, gpu: GpuSpec) -> PlanOptions:
        return cls(sm_count=gpu.sms, dram_pace=gpu.dram_pace, max_clusters=gpu.max_active_clusters)

    def but(self, **changes: int | float | bool | None) -> PlanOptions:
        """The same options with `changes` (field names as above)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def forced_choices(self) -> dict[str, int | bool]:
        """What these options force of the plan, by field (the GPU's fields left out)."""
        return {f: v for f in _FORCED_FIELDS if (v := getattr(self, f)) is not None}

    def forcing(self, forced: PlanOptions) -> PlanOptions:
        """These options' GPU with `forced`'s forced choices."""
        return dataclasses.replace(
            forced, sm_count=self.sm_count, dram_pace=self.dram_pace, max_clusters=self.max_clusters
        )


_FORCED_FIELDS = ("ctas", "whole_row_tiles", "row_groups", "cluster", "final_merge", "combine_rows")
EMULATED_PLAN = PlanOptions.for_gpu(EMULATED_GPU)  # what the emulation plans for unless told another GPU


def smem_bytes(row_groups: int) -> int:
    """The verify kernel's dynamic shared memory for CTAs of `row_groups` row groups."""
    return SMEM_FIXED_BYTES + row_groups * SMEM_PER_GROUP_BYTES


MAX_SMEM_BYTES = smem_bytes(MAX_ROW_GROUPS)  # the attribute the launch sets: 100,544


def combine_smem_bytes(ctas: int) -> int:
    """The combine kernel's dynamic shared memory: a row tile's list holds one part a CTA at most."""
    return COMBINE_FIXED_BYTES + 4 * ctas


COMBINE_SMEM_BYTES = combine_smem_bytes(MAX_LISTED_CTAS)  # the attribute the launch sets: the largest


def dram_pace_of(device_name: str) -> float | None:
    """The DRAM pace of a GPU by the name it gives itself, or None (plan on every SM) for one not in the
    table (ddbench/gpus.py)."""
    gpu = gpu_of_device(device_name)
    return None if gpu is None else gpu.dram_pace


def max_clusters_of(device_name: str) -> int | None:
    """Clusters of MAX_CLUSTER CTAs a GPU runs at once, by its name, or None (no limit known). A GPU backend
    asks the driver instead (cudaOccupancyMaxActiveClusters)."""
    gpu = gpu_of_device(device_name)
    return None if gpu is None else gpu.max_active_clusters


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
    batch_size: int, heads: int, max_q_len: int, total_keys: int, options: PlanOptions = PlanOptions()
) -> LaunchPlan:
    """Whole row tiles, one per CTA (of the rows that take the fewest waves), where balanced ranges would
    save less than they cost; else one wave of CTAs, about MIN_TILES_PER_CTA key tiles or more each, never
    fewer CTAs than row tiles, and no more than keep pace with DRAM where the options give a `dram_pace`.
    What `options` forces is taken as given (see PlanOptions).
    """
    sm_count, dram_pace, max_clusters = options.sm_count, options.dram_pace, options.max_clusters
    ctas, whole_row_tiles, row_groups = options.ctas, options.whole_row_tiles, options.row_groups
    cluster, final_merge, combine_rows = options.cluster, options.final_merge, options.combine_rows
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
    clusters, it keeps clusters, fewer of them: fewer clusters still beat none and the combine."""
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
