"""Exact counters of the CPU emulation (LaunchOptions::count): probe kernels with known answers, then the
verify kernel on small cases against what its tiling implies, computed here from the launch plan.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from emu_traced import (
    COUNT,
    GROUP,
    aligned,
    as_i32,
    build_probes,
    expected_ldmatrix_wavefronts,
    expected_wavefronts,
)

from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.counters import load_counters, parse_counters
from ddbench.errors import InputError
from ddbench.explain.mutants import get_mutant
from ddbench.inputs import generate_inputs
from ddbench.kernel.footprint import verify_unique_sectors
from ddbench.kernel.work_split import cta_segments, request_extents
from ddbench.model.floor import CaseShape
from ddbench.model.tiling_counters import tiling_counters
from ddbench.suite import parse_suite

ROOT = Path(__file__).resolve().parents[1]
WIDTH_KEY = {1: "8", 2: "16", 4: "32", 8: "64", 16: "128"}


@pytest.fixture(scope="module")
def probes():
    return build_probes()


def smem_counts(probes, offsets, width, store=False, active=0xFFFFFFFF):
    counters, _ = probes.call("ddk_probe_smem", as_i32(offsets).ctypes.data, width, int(store), active, COUNT)
    (kernel,) = counters.kernels
    key = ("st" if store else "ld") + WIDTH_KEY[width]
    shared = kernel.totals.shared
    others = {k: v for k, v in shared.instructions.items() if v and k != key}
    assert not others, f"only {key} expected, got {others}"
    return shared.instructions[key], shared.wavefronts[key], shared.bank_conflicts


# ------------------------------------------------------------------------------ shared wavefronts --


@pytest.mark.parametrize(
    "offsets, width, wavefronts",
    [
        ([4 * lane for lane in range(32)], 4, 1),  # conflict-free
        ([128 * lane for lane in range(32)], 4, 32),  # stride of 32 words: one bank, 32 words
        ([0] * 32, 4, 1),  # broadcast
        ([8 * lane for lane in range(32)], 4, 2),  # stride 2 words: 2-way
        ([8 * lane for lane in range(32)], 8, 2),  # 8 bytes: one wavefront per half-warp
        ([16 * lane for lane in range(32)], 16, 4),  # 16 bytes: one per quarter-warp
        ([16 * (lane % 8) for lane in range(32)], 16, 4),  # quarter-warps reading the same 128 bytes
        ([2 * lane for lane in range(32)], 2, 1),  # bf16 pairs share words
        ([256 * lane for lane in range(32)], 16, 32),  # 16 bytes, every row on banks 0-3: 8-way per quarter
    ],
)
@pytest.mark.parametrize("store", [False, True])
def test_shared_wavefronts_known_answers(probes, offsets, width, wavefronts, store):
    instructions, measured, conflicts = smem_counts(probes, offsets, width, store)
    assert instructions == 1
    assert measured == wavefronts
    ideal = 1 if width <= 4 else 32 // (16 if width == 8 else 8)
    assert conflicts == wavefronts - ideal


def test_shared_wavefronts_match_the_stated_rule_on_random_patterns(probes):
    rng = np.random.default_rng(7)
    for trial in range(24):
        width = int(rng.choice([1, 2, 4, 8, 16]))
        offsets = [int(x) * width for x in rng.integers(0, 8192 // width, size=32)]
        active = int(rng.integers(1, 2**32))
        _, measured, _ = smem_counts(probes, offsets, width, bool(trial % 2), active)
        assert measured == expected_wavefronts(offsets, width, active), (width, offsets, hex(active))


def test_inactive_lanes_cost_nothing(probes):
    # Lanes 0-7 only, 16 bytes each: one quarter-warp, one wavefront; half-warp 2 of an 8-byte access idle.
    assert smem_counts(probes, [16 * lane for lane in range(32)], 16, active=0xFF)[1] == 1
    assert smem_counts(probes, [8 * lane for lane in range(32)], 8, active=0xFFFF)[1] == 1


@pytest.mark.parametrize(
    "variant, key, matrices",
    [(0, "ldmatrix_x4", 4), (1, "ldmatrix_x4_trans", 4), (2, "ldmatrix_x2", 2), (3, "ldmatrix_x2_trans", 2)],
)
def test_ldmatrix_wavefronts(probes, variant, key, matrices):
    for offsets, conflict_free in (
        ([16 * lane for lane in range(32)], True),
        ([128 * lane for lane in range(32)], False),
    ):
        counters, _ = probes.call("ddk_probe_ldm", as_i32(offsets).ctypes.data, variant, COUNT)
        shared = counters.kernels[0].totals.shared
        assert shared.instructions[key] == 1
        assert shared.wavefronts[key] == expected_ldmatrix_wavefronts(offsets, matrices)
        if conflict_free:
            assert shared.wavefronts[key] == matrices  # .x4 = 4 when its 8-row phases are conflict-free
        else:
            assert shared.wavefronts[key] == 8 * matrices  # 8 rows on the same four banks
        assert counters.kernels[0].totals.ldmatrix == 1


# ------------------------------------------------------------------------------------------ global --


def run_global(probes, index: np.ndarray, blocks: int, threads: int, stores=False, flags=COUNT, workers=1):
    data = aligned(4096, np.float32)
    out = aligned(blocks * threads, np.float32)
    idx = as_i32(index)
    counters, _ = probes.call(
        "ddk_probe_global", data.ctypes.data, idx.ctypes.data, out.ctypes.data, int(stores), blocks, threads,
        flags, workers,
    )  # fmt: skip
    return counters, data.ctypes.data


def expected_sectors(index: np.ndarray, base: int, threads: int):
    per_instruction, unique = 0, set()
    for warp_start in range(0, index.size, 32):
        lanes = index[warp_start : warp_start + 32]
        sectors = {(base + 4 * int(i)) // 32 for i in lanes if i >= 0}
        per_instruction += len(sectors)
        unique |= sectors
    return per_instruction, len(unique)


def test_a_kernel_that_reads_n_bytes_reports_n(probes):
    blocks, threads = 3, 64
    index = np.arange(blocks * threads)
    counters, base = run_global(probes, index, blocks, threads)
    g = counters.kernels[0].totals.global_
    assert g.load_bytes == 4 * blocks * threads and g.store_bytes == 0 and g.cp_async_bytes == 0
    assert (g.sectors, g.unique_sectors) == (4 * blocks * threads // 32, 4 * blocks * threads // 32)
    assert (g.sectors, g.unique_sectors) == expected_sectors(index, base, threads)


def test_sectors_total_and_unique_on_a_scattered_read(probes):
    blocks, threads = 4, 96
    rng = np.random.default_rng(3)
    index = rng.integers(0, 600, size=blocks * threads)
    index[rng.integers(0, index.size, size=40)] = -1  # some threads read nothing
    counters, base = run_global(probes, index, blocks, threads, stores=True)
    kernel = counters.kernels[0]
    g = kernel.totals.global_
    reading = int((index >= 0).sum())
    assert g.load_bytes == 4 * reading and g.store_bytes == 4 * reading
    load_sectors, unique_loads = expected_sectors(index, base, threads)
    assert g.sectors > load_sectors  # stores touch sectors too
    assert g.unique_sectors >= unique_loads
    # Per CTA: its own unique sectors, never more than its sectors, and the CTAs add up to the launch.
    assert sum(s.load_bytes * s.count for s in kernel.cta_shapes) == g.load_bytes
    assert sum(s.sectors * s.count for s in kernel.cta_shapes) == g.sectors
    for shape in kernel.cta_shapes:
        assert shape.unique_sectors <= shape.sectors


def test_the_grid_is_reported_and_identical_ctas_group(probes):
    blocks, threads = 189, 32
    index = np.tile(np.arange(threads), blocks)  # every CTA reads the same 128 bytes
    each, _ = run_global(probes, index, blocks, threads)
    grouped, _ = run_global(probes, index, blocks, threads, flags=COUNT | GROUP)
    for counters, shapes, detail in ((each, blocks, "all"), (grouped, 1, "shapes")):
        (k,) = counters.kernels
        assert k.grid == (189, 1, 1) and k.ctas == 189 and k.threads_per_cta == 32 and k.cta_detail == detail
        assert len(k.cta_shapes) == shapes
        assert k.totals.global_.unique_sectors == 4 and k.totals.global_.sectors == 4 * 189
    assert grouped.kernels[0].cta_shapes[0].count == 189
    assert [s.example_cta for s in each.kernels[0].cta_shapes] == [(b, 0, 0) for b in range(189)]
    assert grouped.kernels[0].totals == each.kernels[0].totals


def test_counters_do_not_depend_on_the_worker_count(probes):
    rng = np.random.default_rng(11)
    index = rng.integers(0, 4000, size=40 * 64)
    one, _ = run_global(probes, index, 40, 64, stores=True, workers=1)
    two, _ = run_global(probes, index, 40, 64, stores=True, workers=2)
    three, _ = run_global(probes, index, 40, 64, stores=True, workers=3)
    assert one.to_json() == two.to_json() == three.to_json()


# ----------------------------------------------------------------------------------- phases, cp.async --


def test_phases_split_at_block_barriers(probes):
    out = aligned(64, np.float32)
    counters, _ = probes.call("ddk_probe_phases", out.ctypes.data, 64, COUNT)
    (shape,) = counters.kernels[0].cta_shapes
    assert shape.barriers == 2 and len(shape.phases) == 3
    p0, p1, p2 = shape.phases
    assert (p0.mma, p0.shuffles, p0.instructions["sync_block"]) == (4, 0, 2)  # 2 per warp, 2 warps
    assert (p1.mma, p1.shuffles) == (0, 6)
    assert p2.instructions["st_shared"] == 2 and p2.instructions["st_global"] == 2
    assert p2.global_store_bytes == 256 and p2.global_bytes == 0 and p2.shared_wavefronts == 2
    for p in shape.phases:
        assert p.warp_instructions == sum(p.instructions.values())
    assert counters.kernels[0].totals.barriers == 2


@pytest.mark.parametrize("late_wait_phases", [1, 3])
def test_cp_async_bytes_in_flight_and_late_waits(probes, late_wait_phases):
    chunks = 4
    src = aligned(512 * chunks, np.uint8)
    src[:] = np.arange(src.size) % 251
    out = aligned(512 * chunks, np.uint8)
    counters, _ = probes.call(
        "ddk_probe_cp_traced", src.ctypes.data, out.ctypes.data, chunks, COUNT, late_wait_phases
    )
    assert np.array_equal(out, src)  # the traced launch still computes
    (k,) = counters.kernels
    assert k.totals.global_.cp_async_bytes == 512 * chunks
    assert k.totals.global_.load_bytes == 0 and k.totals.global_.store_bytes == 512 * chunks
    assert k.totals.shared.instructions["cp_async_16"] == chunks
    assert k.totals.shared.wavefronts["cp_async_16"] == 4 * chunks
    (shape,) = k.cta_shapes
    waits = shape.cp_async_waits
    # Chunk k+1 is issued before chunk k is waited for: two chunks in flight until the last.
    assert [w.bytes_in_flight for w in waits] == [1024, 1024, 1024, 512, 0]
    assert [w.bytes_completed for w in waits] == [512, 512, 512, 512, 0]
    # Chunk 0 is waited for right after its commit; the others were committed two barriers earlier.
    assert [w.phases_ahead for w in waits] == [0, 2, 2, 2, -1]
    late = [w.phases_ahead < late_wait_phases and w.bytes_completed > 0 for w in waits]
    assert [w.late for w in waits] == late
    assert k.totals.cp_async.late_waits == sum(late) and k.totals.cp_async.waits == 5
    assert list(k.totals.cp_async.bytes_in_flight_at_wait) == [1024, 1024, 1024, 512, 0]


# ------------------------------------------------------------------------------- the verify kernel --

MMA_FLOPS_SHAPE = 16 * 8 * 16  # m16n8k16
DIM_QK, DIM_V, BLOCK_N = 576, 512, 32
# rows, threads and dynamic shared memory of a CTA of 2 and of 3 row groups
CTA_OF_ROW_GROUPS = {2: (32, 256, 92_096), 3: (48, 384, 100_544)}


def small_case(**fields):
    entry = {
        "label": "c",
        "seed": 3,
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "batch_size": 1,
        "prefix": 21,
        "tree": {"kind": "ddtree", "budget": 8},
    }
    entry.update(fields)
    return parse_suite({"name": "t", "cases": [entry]}, "t").cases[0]


def _mask_words_copied(g, tile_begin: int, tile_end: int, valid_rows: int) -> int:
    """The mask words a segment copies: per tile that holds draft keys, one or two per valid row (the words
    its draft columns fall in)."""
    words = 0
    for tile in range(tile_begin, tile_end):
        first_key, last_key = tile * BLOCK_N, min(tile * BLOCK_N + BLOCK_N, g.keys) - 1
        if last_key >= g.prefix:
            first_word = max(first_key - g.prefix, 0) // 32
            words += valid_rows * ((last_key - g.prefix) // 32 - first_word + 1)
    return words


def tiling(backend: CudaEmuBackend, x):
    """Per segment of every CTA: its tiles, valid keys, valid rows and mask words copied, from the plan."""
    launch = backend.marshaled_launch(x)
    k = launch.kernel
    block_m = CTA_OF_ROW_GROUPS[launch.plan.row_groups][0]
    requests = request_extents(k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist(), block_m)
    segments = []
    for cta in cta_segments(launch.plan, requests):
        for s in cta:
            g = requests[s.request]
            valid_keys = min(g.keys, s.tile_end * BLOCK_N) - s.tile_begin * BLOCK_N
            valid_rows = min(block_m, g.rows - s.row_tile * block_m)
            words = _mask_words_copied(g, s.tile_begin, s.tile_end, valid_rows)
            segments.append((s.tile_end - s.tile_begin, valid_keys, valid_rows, words))
    return launch, segments


@pytest.fixture(scope="module")
def emu():
    return CudaEmuBackend(workers=1)


@pytest.mark.parametrize("row_groups", [2, 3])
@pytest.mark.parametrize(
    "fields",
    [
        {},  # q9, one tile, no split
        {"prefix": 700, "tree": {"kind": "ddtree", "budget": 16}},  # split row tiles, a combine
        {"batch_size": 3, "prefix": [0, 65, 300], "tree": {"kind": "chain", "length": 5}},  # ragged
    ],
)
def test_verify_kernel_counters_match_its_tiling(fields, row_groups):
    emu = CudaEmuBackend(workers=1, row_groups=row_groups, cluster=1)  # the tiling alone: no cluster merges
    x = generate_inputs(small_case(**fields))
    plain = emu.run(x).clone()
    x.fresh_output()
    traced = emu.run_traced(x, counters=True)
    assert torch.equal(plain.view(torch.int16), traced.out.view(torch.int16))  # counting changes nothing
    launch, segments = tiling(emu, x)
    verify = traced.counters.kernel("verify")
    _, threads, smem = CTA_OF_ROW_GROUPS[row_groups]
    assert verify.grid == launch.plan.grid
    assert (verify.threads_per_cta, verify.dynamic_smem_bytes) == (threads, smem)
    warps = threads // 32
    t = verify.totals
    # S = Q K^T: per warp 16 rows x 32 keys x 144 dims; O += P V: 16 rows x 128 columns x 32 keys.
    mma_per_tile = warps * (16 * BLOCK_N * (DIM_QK // 4) + 16 * (DIM_V // 4) * BLOCK_N) // MMA_FLOPS_SHAPE
    assert t.mma == mma_per_tile * sum(n for n, *_ in segments)
    assert all(n > 0 for n, *_ in segments)  # no CTA range holds an empty segment
    # one when the CTA's range is set, then per segment two for Q and the first tile, and two per tile
    assert t.barriers == launch.plan.ctas + sum(2 + 2 * n for n, *_ in segments)
    # Q, the keys and the mask words of tiles with draft keys (4 bytes each) go by cp.async
    copied = sum(2 * DIM_QK * (rows + keys) + 4 * words for _, keys, rows, words in segments)
    assert t.global_.cp_async_bytes == copied
    assert t.shared.instructions["cp_async_4"] > 0
    # Every key of every request is read at least once: unique bytes >= the KV rows the case must read.
    kv_bytes = 2 * DIM_QK * int(torch.unique(launch.kernel.kv_slots).numel())
    assert 32 * t.global_.unique_sectors >= kv_bytes
    # ldmatrix and the partial-S reduction at the conflict-free minimum: lanes (g, t) move 128 bits at word
    # 32g + 8t + 4((pair + g) % 2), so each quarter-warp (2 rows) covers the 32 banks once: 4 wavefronts (the
    # same 32-float row stride with the halves unswapped makes 8).
    for pair in (0, 1):
        offsets = [4 * (32 * (ln // 4) + 8 * (ln % 4) + 4 * ((pair + ln // 4) % 2)) for ln in range(32)]
        assert expected_wavefronts(offsets, 16) == 4
    assert expected_wavefronts([4 * (32 * (ln // 4) + 8 * (ln % 4)) for ln in range(32)], 16) == 8
    assert t.shared.wavefronts["ldmatrix_x4"] == 4 * t.shared.instructions["ldmatrix_x4"]
    # per warp and tile 4 stores and 16 loads of partial S; the rest of the 128-bit traffic is the CTA's
    # 16-byte cursor records (Cursor, Extent, Range): thread 0 writes 5 a CTA and 2 more for each later
    # segment, every warp reads 5 a CTA and 3 more for each later segment (a record one lane writes is one
    # wavefront; a 128-bit load is four, one a quarter-warp, broadcast or not)
    tiles, later = sum(n for n, *_ in segments), len(segments) - launch.plan.ctas
    ctas = launch.plan.ctas
    records_written, records_read = 5 * ctas + 2 * later, warps * (5 * ctas + 3 * later)
    assert t.shared.instructions["st128"] == warps * 4 * tiles + records_written
    assert t.shared.instructions["ld128"] == warps * 16 * tiles + records_read
    assert t.shared.wavefronts["st128"] == 4 * warps * 4 * tiles + records_written
    assert t.shared.wavefronts["ld128"] == 4 * t.shared.instructions["ld128"]
    assert t.shared.instructions["st64"] == t.shared.instructions["ld64"] == 0  # no 64-bit partial S left
    assert t.shared.bank_conflicts == 0
    assert t.cp_async.waits == sum(1 + n for n, *_ in segments)  # Q with the first tile, then one a tile
    # only each segment's prologue waits right after its commit: every later tile was issued a barrier ahead
    assert t.cp_async.late_waits == len(segments)
    assert len(verify.cta_shapes) == verify.ctas  # one entry per CTA unless grouped
    combine = traced.counters.kernel("combine")
    assert (combine is not None) == launch.plan.combines


@pytest.mark.parametrize(
    "fields", [{}, {"batch_size": 2, "prefix": [40, 90], "tree": {"kind": "chain", "length": 6}}]
)
def test_the_tiling_counters_count_what_the_emulation_counts(fields, emu):
    """The hand-derived counters (ddbench/model/tiling_counters.py) agree with a counted launch where both
    plan whole row tiles: the same CTAs, barriers and mma."""
    case = small_case(**fields)
    x = generate_inputs(case)
    assert emu.marshaled_launch(x).plan.whole_row_tiles > 0
    derived = tiling_counters(CaseShape.of(case)).kernels[0]
    counted = emu.run_traced(x, counters=True).counters.kernel("verify")
    assert (derived.ctas, derived.totals.barriers, derived.totals.mma) == (
        counted.ctas,
        counted.totals.barriers,
        counted.totals.mma,
    )


@pytest.mark.parametrize("cluster", [1, None])
def test_call_sites_add_up_to_each_ctas_instructions(cluster):
    """Every counted warp instruction is listed once under its call site (a line of the kernel's source),
    which is what ties the SASS of that line to how often a warp ran it (ddbench/model/sass_count.py)."""
    x = generate_inputs(small_case(prefix=700, tree={"kind": "ddtree", "budget": 16}))
    counters = CudaEmuBackend(workers=1, cluster=cluster).run_traced(x, counters=True).counters
    kernels = [k for k in (counters.kernel("verify"), counters.kernel("combine")) if k is not None]
    assert len(kernels) == (2 if cluster == 1 else 1)
    lines = (ROOT / "kernels" / "verify" / "verify_attn.cuh").read_text().splitlines()
    for kernel in kernels:
        for shape in kernel.cta_shapes:
            by_kind: dict[str, int] = {}
            for site, ops in shape.sites.items():
                file, line = site.split(":")
                assert file == "verify_attn.cuh" and "ddk::" in " ".join(lines[int(line) - 2 : int(line) + 1])
                for kind, n in ops.items():
                    by_kind[kind] = by_kind.get(kind, 0) + n
            phases: dict[str, int] = {}
            for phase in shape.phases:
                for kind, n in phase.instructions.items():
                    if n:
                        phases[kind] = phases.get(kind, 0) + n
            assert by_kind == phases and sum(by_kind.values()) > 0
    mma = [ops.get("mma", 0) for shape in kernels[0].cta_shapes for ops in shape.sites.values()]
    assert sum(1 for n in mma if n) >= 2  # S and P.V are separate sites


@pytest.mark.parametrize("cluster", [1, None])
def test_verify_counters_grouped_and_over_workers(cluster):
    """Counts do not depend on the emulation's workers, CTA by CTA, where no CTA's work depends on the order
    the CTAs finish in (a combine kernel); with the final merge (the plan's clusters: the last cluster to
    arrive at a row tile merges it, whichever real thread runs it) the kernel's totals do not."""
    x = generate_inputs(small_case(prefix=900, tree={"kind": "ddtree", "budget": 8}))
    one = CudaEmuBackend(workers=1, cluster=cluster).run_traced(x, counters=True, group_shapes=True).counters
    x.fresh_output()
    two = CudaEmuBackend(workers=2, cluster=cluster).run_traced(x, counters=True, group_shapes=True).counters
    verify = one.kernel("verify")
    assert (one.kernel("combine") is None) == (cluster is None)
    if cluster == 1:
        assert one.to_json() == two.to_json()
    else:
        assert verify.totals == two.kernel("verify").totals
    assert sum(s.count for s in verify.cta_shapes) == verify.ctas > len(verify.cta_shapes)


@pytest.mark.parametrize(
    ("fields", "plan"),
    [
        ({"prefix": 700, "tree": {"kind": "ddtree", "budget": 16}}, {"ctas": 7}),
        ({"prefix": 700, "tree": {"kind": "ddtree", "budget": 16}}, {"whole_row_tiles": True}),
        (
            {"batch_size": 4, "prefix": [0, 33, 400, 90], "tree": {"kind": "chain", "length": 40}},
            {"ctas": 11},
        ),
        ({"batch_size": 2, "prefix": [5, 64], "tree": {"kind": "ddtree", "budget": 8}}, {}),
        ({"prefix": 700, "tree": {"kind": "ddtree", "budget": 16}}, {"ctas": 7, "row_groups": 3}),
        (
            {"batch_size": 4, "prefix": [0, 33, 400, 90], "tree": {"kind": "chain", "length": 40}},
            {"ctas": 11, "row_groups": 3},
        ),
        # the final merge: the output rows of split row tiles and the arrival counters too
        ({"prefix": 700, "tree": {"kind": "ddtree", "budget": 16}}, {"ctas": 8, "cluster": 4}),
        (
            {"batch_size": 4, "prefix": [0, 33, 400, 90], "tree": {"kind": "chain", "length": 40}},
            {"ctas": 12, "cluster": 3},
        ),
        ({"prefix": 700, "tree": {"kind": "ddtree", "budget": 16}}, {"ctas": 7, "final_merge": True}),
    ],
)
def test_the_verify_footprint_from_addresses_is_the_counted_one(fields, plan):
    """Sector for sector, with and without an LSE output, parts or whole row tiles, ragged batches."""
    x = generate_inputs(small_case(**fields))
    backend = CudaEmuBackend(workers=1, **plan)
    for lse in (None, torch.empty(x.q_extend.shape[0], x.q_extend.shape[1])):
        counted = backend.run_traced(x, lse, counters=True).counters.kernel("verify")
        derived = verify_unique_sectors(backend.marshaled_launch(x), lse)
        assert derived == counted.totals.global_.unique_sectors, (plan, lse is None)


def test_the_footprint_follows_a_key_list_shorter_than_the_drafts():
    """A mutant's list of prefix slots only (5 keys for 40 drafts): the kernel reads the last 5 draft rows."""
    x = generate_inputs(small_case(prefix=5, tree={"kind": "chain", "length": 40}))
    backend = get_mutant("mutant-emu:draft-missing")
    counted = backend.run_traced(x, counters=True).counters.kernel("verify")
    assert verify_unique_sectors(backend.marshaled_launch(x)) == counted.totals.global_.unique_sectors


# -------------------------------------------------------------------------------- the typed reader --


def test_counters_round_trip_and_bad_files_name_the_field(probes, tmp_path):
    counters, _ = probes.call("ddk_probe_phases", aligned(64, np.float32).ctypes.data, 64, COUNT)
    doc = counters.to_json()
    assert parse_counters(doc) == counters
    good = tmp_path / "counters.json"
    good.write_text(json.dumps(doc))
    assert load_counters(good) == counters
    doc["kernels"][0]["totals"]["global"]["load_bytes"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"bad\.json: \$\.kernels\[0\]\.totals\.global\.load_bytes: must be"):
        load_counters(bad)
    del doc["kernels"][0]["cta_shapes"][0]["phases"][1]["mma"]
    doc["kernels"][0]["totals"]["global"]["load_bytes"] = 0
    with pytest.raises(InputError, match=r"cta_shapes\[0\]\.phases\[1\]\.mma: missing"):
        parse_counters(doc, "x.json")
    (tmp_path / "huge.json").write_text(" " * 2000)
    with pytest.raises(InputError, match="larger than 1000 bytes"):
        load_counters(tmp_path / "huge.json", limit=1000)
    (tmp_path / "text.json").write_text("{nope")
    with pytest.raises(InputError, match="not JSON"):
        load_counters(tmp_path / "text.json")


# --------------------------------------------------------------------- one CTA per work shape --

EXACT_WHEN_SAMPLED = ("barriers", "mma", "ldmatrix", "shuffles", "cluster_barriers", "cluster_bytes")


@pytest.mark.parametrize(
    ("fields", "plan"),
    [
        ({"prefix": 2000, "tree": {"kind": "ddtree", "budget": 8}}, {}),  # 48 CTAs, most of them alike
        ({"batch_size": 3, "prefix": [0, 130, 700], "tree": {"kind": "ddtree", "budget": 32}}, {}),  # ragged
        ({"model": "deepseek-v3", "prefix": 300, "tree": {"kind": "chain", "length": 40}}, {}),  # part tiles
        # all-draft tiles whose mask words start at different draft columns (prefix 5 against 0): one word
        # read per row in some, two in others (found in review: grouped as one shape before)
        ({"batch_size": 2, "prefix": [5, 0], "tree": {"kind": "chain", "length": 63}}, {"ctas": 80}),
        ({"prefix": 2000, "tree": {"kind": "ddtree", "budget": 8}}, {"row_groups": 3}),
        (
            {"batch_size": 3, "prefix": [0, 130, 700], "tree": {"kind": "ddtree", "budget": 32}},
            {"row_groups": 3},
        ),
        # clusters of 5 CTAs: each merges inside one row tile; they are sampled whole
        ({"prefix": 2000, "tree": {"kind": "ddtree", "budget": 8}}, {"ctas": 30, "cluster": 5}),
        # a ragged batch in clusters of 3: some merge a part, some straddle two row tiles and do not; the
        # final merge (the plan's with clusters) has the last arrivals of each row tile merge it
        (
            {"batch_size": 3, "prefix": [0, 130, 700], "tree": {"kind": "ddtree", "budget": 32}},
            {"ctas": 60, "cluster": 3},  # 18 CTAs merge, 42 do not
        ),
        # the final merge without clusters: one CTA merges each split row tile whole
        ({"prefix": 2000, "tree": {"kind": "ddtree", "budget": 8}}, {"ctas": 24, "final_merge": True}),
    ],
)
def test_one_cta_per_shape_keeps_the_exact_counts(fields, plan):
    emu = CudaEmuBackend(workers=1, **plan)
    x = generate_inputs(small_case(**fields))
    full = emu.run_traced(x, counters=True, group_shapes=True).counters
    x.fresh_output()
    sampled = emu.run_traced(x, counters=True, one_cta_per_shape=True)
    assert sampled.sampled
    for name in ("verify", "combine"):
        a, b = full.kernel(name), sampled.counters.kernel(name)
        assert (a is None) == (b is None)
        if a is None:
            continue
        assert b.ctas == a.ctas and b.grid == a.grid
        for field in EXACT_WHEN_SAMPLED:
            assert getattr(b.totals, field) == getattr(a.totals, field), (name, field)
        assert b.totals.shared == a.totals.shared
        ga, gb = a.totals.global_, b.totals.global_
        assert (gb.store_bytes, gb.cp_async_bytes) == (ga.store_bytes, ga.cp_async_bytes)
        if name == "verify":
            assert gb.load_bytes == ga.load_bytes
            assert gb.unique_sectors <= ga.unique_sectors  # a lower bound from the CTAs that ran
        else:  # the combine skips splits whose weight underflows: data the sampled launch does not have
            assert gb.load_bytes >= ga.load_bytes and gb.unique_sectors >= ga.unique_sectors
        assert b.totals.cp_async == a.totals.cp_async or name == "verify"
        assert sorted(b.totals.cp_async.bytes_in_flight_at_wait) == sorted(
            a.totals.cp_async.bytes_in_flight_at_wait
        )
        assert b.totals.cp_async.late_waits == a.totals.cp_async.late_waits
    verify_full, verify_sampled = full.kernel("verify"), sampled.counters.kernel("verify")
    # What a sampled profile puts in place of the launch-wide unique sectors: derived from the addresses.
    assert verify_unique_sectors(emu.marshaled_launch(x)) == verify_full.totals.global_.unique_sectors
    assert (
        verify_sampled.emulated_ctas < verify_sampled.ctas or verify_full.ctas == verify_sampled.emulated_ctas
    )

    # Same shapes, same phases: the grouped full launch has the sampled launch's shapes (and maybe splits
    # of one predicted shape that addresses alone tell apart).
    def as_phases(k):
        return sorted(str((s.phases, s.cp_async_waits)) for s in k.cta_shapes for _ in range(s.count))

    assert as_phases(verify_full) == as_phases(verify_sampled)
