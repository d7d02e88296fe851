"""The host emulation of the ddk device primitives (kernels/include/ddk/primitives.h, kernels/emu/).

The probe kernels in kernels/emu/probes.cpp run through the emulation runtime via ctypes. The PTX ISA
fragment layouts are written out here independently of the C++ (as the ISA states them: per element
index i of a lane's fragment), and every check uses random non-zero values so a misplaced element
shows. Kernels that diverge or deadlock run in a subprocess under a timeout, so a hang fails the test
instead of stalling the suite.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from emu_traced import TracedProbes

from ddbench.kernel.build import (
    RUNTIME_SOURCES,
    KernelBuildError,
    build_emulation_library,
    find_kernels_dir,
    find_nvcc,
    nvcc_available,
)

KERNELS = find_kernels_dir()
PROBES = KERNELS / "emu" / "probes.cpp"
ERR_LEN = 4096
BUILD_BUDGET_S = 180.0
# e.g. DDK_EMU_EXTRA_FLAGS=-DDDK_EMU_UCONTEXT to test the portable context switch
EXTRA_FLAGS = tuple(os.environ.get("DDK_EMU_EXTRA_FLAGS", "").split())

u8p = ctypes.POINTER(ctypes.c_uint8)
u16p = ctypes.POINTER(ctypes.c_uint16)
u32p = ctypes.POINTER(ctypes.c_uint32)
i32p = ctypes.POINTER(ctypes.c_int32)
f32p = ctypes.POINTER(ctypes.c_float)
f64p = ctypes.POINTER(ctypes.c_double)
ERR = [ctypes.c_char_p, ctypes.c_int]


def _site_line(name: str) -> int:
    for number, line in enumerate(PROBES.read_text().splitlines(), start=1):
        if f"SITE:{name}" in line:
            return number
    raise AssertionError(f"no SITE:{name} marker in {PROBES}")


@pytest.fixture(scope="module")
def lib_build() -> tuple[Path, float]:
    start = time.perf_counter()
    path = build_emulation_library([PROBES], "emu-probes", EXTRA_FLAGS)
    return path, time.perf_counter() - start


@pytest.fixture(scope="module")
def lib(lib_build) -> ctypes.CDLL:
    so = ctypes.CDLL(str(lib_build[0]))
    so.ddk_probe_mma.argtypes = [u32p, u32p, f32p, f32p, ctypes.c_int, *ERR]
    so.ddk_probe_ldmatrix.argtypes = [u8p, ctypes.c_int, i32p, ctypes.c_int, u32p, *ERR]
    so.ddk_probe_shfl.argtypes = [f32p, i32p, i32p, f32p, i32p, ctypes.c_int, *ERR]
    so.ddk_probe_cp_async.argtypes = [u8p, u8p, *ERR]
    so.ddk_probe_cp_pipeline.argtypes = [u8p, u8p, ctypes.c_int, *ERR]
    so.ddk_probe_multiwarp.argtypes = [f32p, f32p, u32p, *(4 * [ctypes.c_uint]), *ERR]
    so.ddk_probe_multiwarp.argtypes[6] = ctypes.c_int
    so.ddk_probe_limits.argtypes = [u32p, *ERR]
    so.ddk_probe_bench.argtypes = [f64p, *ERR]
    so.ddk_probe_bf16.argtypes = [f32p, ctypes.c_int, u16p, u32p, f32p]
    so.ddk_probe_bf16.restype = None
    so.ddk_probe_f16.argtypes = [f32p, ctypes.c_int, u16p, u32p, f32p]
    so.ddk_probe_f16.restype = None
    so.ddk_probe_exp2.argtypes = [ctypes.c_float]
    so.ddk_probe_exp2.restype = ctypes.c_float
    return so


def ptr(array: np.ndarray, ctype):
    assert array.flags["C_CONTIGUOUS"]
    return array.ctypes.data_as(ctypes.POINTER(ctype))


def aligned_bytes(n: int, align: int = 16) -> np.ndarray:
    raw = np.zeros(n + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset : offset + n]


def call(fn, *args) -> None:
    err = ctypes.create_string_buffer(ERR_LEN)
    rc = fn(*args, err, ERR_LEN)
    assert rc == 0, err.value.decode()


def random_bf16_bits(rng: np.random.Generator, shape) -> np.ndarray:
    """bf16 bit patterns of random non-zero values with magnitudes in [2^-4, 2^4)."""
    mag = rng.uniform(1.0, 2.0, size=shape) * np.exp2(rng.integers(-4, 4, size=shape))
    sign = rng.choice([-1.0, 1.0], size=shape)
    values = torch.from_numpy(sign * mag).to(torch.bfloat16)
    bits = values.view(torch.int16).numpy().astype(np.uint16)
    assert np.all(bits & 0x7FFF), "zero drawn"
    return bits


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------------------------------
# PTX ISA 8.7, "Matrix Fragments for mma.m16n8k16 with floating point type" (.bf16 A/B, .f32 C/D).
# groupID = laneid >> 2, threadID_in_group = laneid % 4; element i of a lane's fragment is at:
#   A: row = groupID for a0,a1,a4,a5 else groupID + 8;   col = threadID_in_group*2 + (i & 1) (+8 for i >= 4)
#   B: row = threadID_in_group*2 + (i & 1) (+8 for i >= 2);  col = groupID
#   C: row = groupID for c0,c1 else groupID + 8;          col = threadID_in_group*2 + (i & 1)
# Elements 2j and 2j+1 of A and B are the lower and upper halves of .b32 register j.
# ---------------------------------------------------------------------------------------------------


def a_elem(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    row = group if (i < 2 or 4 <= i < 6) else group + 8
    col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def b_elem(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    row = tig * 2 + (i & 1) + (8 if i >= 2 else 0)
    return row, group


def c_elem(lane: int, i: int) -> tuple[int, int]:
    group, tig = lane >> 2, lane % 4
    return (group if i < 2 else group + 8), tig * 2 + (i & 1)


def unpack_fragments(bits: np.ndarray, elem, shape) -> torch.Tensor:
    """bits[lane, element] -> the matrix, checking the layout covers each position exactly once."""
    out = torch.full(shape, float("nan"), dtype=torch.float32)
    seen = set()
    for lane in range(32):
        for i in range(bits.shape[1]):
            rc = elem(lane, i)
            assert rc not in seen
            seen.add(rc)
            out[rc] = float(bf16_bits_to_float(bits[lane, i : i + 1])[0])
    assert len(seen) == shape[0] * shape[1]
    return out


def gather_accumulator(values: np.ndarray) -> torch.Tensor:
    out = torch.full((16, 8), float("nan"), dtype=torch.float32)
    for lane in range(32):
        for i in range(4):
            out[c_elem(lane, i)] = float(values[lane, i])
    assert not torch.isnan(out).any()
    return out


def pack_registers(halves: np.ndarray) -> np.ndarray:
    """[lane, element] bf16 bits -> [lane, register] .b32 with element 2j low, 2j+1 high."""
    h = halves.astype(np.uint32)
    return np.ascontiguousarray(h[:, 0::2] | (h[:, 1::2] << 16))


@pytest.mark.parametrize("alias", [0, 1], ids=["d-separate", "d-aliases-c"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mma_matches_torch_matmul_through_the_ptx_layout(lib, seed: int, alias: int) -> None:
    rng = np.random.default_rng(seed)
    a_halves = random_bf16_bits(rng, (32, 8))
    b_halves = random_bf16_bits(rng, (32, 4))
    c = (rng.uniform(0.5, 2.0, (32, 4)) * rng.choice([-1, 1], (32, 4))).astype(np.float32)
    d = np.zeros((32, 4), dtype=np.float32)
    a_regs, b_regs = pack_registers(a_halves), pack_registers(b_halves)
    call(
        lib.ddk_probe_mma,
        ptr(a_regs, ctypes.c_uint32),
        ptr(b_regs, ctypes.c_uint32),
        ptr(c, ctypes.c_float),
        ptr(d, ctypes.c_float),
        alias,
    )

    A = unpack_fragments(a_halves, a_elem, (16, 16))
    B = unpack_fragments(b_halves, b_elem, (16, 8))
    C = gather_accumulator(c)
    D = gather_accumulator(d)

    reference = A.double() @ B.double() + C.double()
    bound = (A.abs().double() @ B.abs().double() + C.abs().double()) * 2.0**-21
    assert torch.all((D.double() - reference).abs() <= bound)
    # The emulation's model exactly: fp32 accumulation from C over k = 0..15 (bf16 products are exact).
    acc = C.clone()
    for k in range(16):
        acc = acc + A[:, k : k + 1] * B[k : k + 1, :]
    assert torch.equal(D, acc)


# ---------------------------------------------------------------------------------------------------
# PTX ISA 8.7, "Warp-level matrix load instruction: ldmatrix", .m8n8 .b16: threads 0-7 address the rows
# of matrix 0, 8-15 of matrix 1, ... (.x2: threads 0-15 only); in each matrix thread l receives the two
# consecutive elements of row l/4 starting at column 2*(l%4) into its register for that matrix.
# ---------------------------------------------------------------------------------------------------

LDM_VARIANTS = {"x4": (0, 4, False), "x4_trans": (1, 4, True), "x2": (2, 2, False), "x2_trans": (3, 2, True)}


@pytest.mark.parametrize("variant", list(LDM_VARIANTS))
def test_ldmatrix_fragments(lib, variant: str) -> None:
    code, nmat, trans = LDM_VARIANTS[variant]
    rng = np.random.default_rng(10 + code)
    image_bytes = 2048
    halves = (rng.permutation(image_bytes // 2) + 1).astype(np.uint16)  # distinct and non-zero
    image = np.ascontiguousarray(halves.view(np.uint8))
    slots = rng.choice(image_bytes // 16, size=32, replace=False)
    offsets = (slots * 16).astype(np.int32)
    if nmat == 2:
        offsets[16:] = 1 << 20  # unused by .x2: must not even be checked
    out = np.zeros((32, 4), dtype=np.uint32)
    call(
        lib.ddk_probe_ldmatrix,
        ptr(image, ctypes.c_uint8),
        image_bytes,
        ptr(offsets, ctypes.c_int32),
        code,
        ptr(out, ctypes.c_uint32),
    )

    for m in range(nmat):
        matrix = np.stack([halves[offsets[8 * m + r] // 2 : offsets[8 * m + r] // 2 + 8] for r in range(8)])
        if trans:
            matrix = matrix.T
        for lane in range(32):
            lo, hi = matrix[lane // 4, 2 * (lane % 4)], matrix[lane // 4, 2 * (lane % 4) + 1]
            assert out[lane, m] == int(lo) | (int(hi) << 16), (variant, m, lane)
    assert not out[:, nmat:].any()


def test_shfl_xor_butterfly(lib) -> None:
    rng = np.random.default_rng(3)
    block = 64
    fin = rng.standard_normal(block).astype(np.float32)
    iin = rng.integers(-(2**31), 2**31 - 1, block).astype(np.int32)
    masks = np.concatenate(
        [
            np.repeat([1, 2, 4, 8, 16, 31, 0, 5], 4),  # warp 0: uniform per quad of lanes
            rng.integers(0, 40, 30),
            [-1, 32],  # warp 1: arbitrary, incl. out-of-range sources
        ]
    ).astype(np.int32)
    fout = np.zeros(block, dtype=np.float32)
    iout = np.zeros(block, dtype=np.int32)
    call(
        lib.ddk_probe_shfl,
        ptr(fin, ctypes.c_float),
        ptr(iin, ctypes.c_int32),
        ptr(masks, ctypes.c_int32),
        ptr(fout, ctypes.c_float),
        ptr(iout, ctypes.c_int32),
        block,
    )
    for t in range(block):
        lane, base = t % 32, t - t % 32
        src = lane ^ (int(masks[t]) & 0xFFFFFFFF)
        src = lane if src > 31 else src  # shfl.bfly with c = 0x1f: an out-of-range source lane reads its own
        assert fout[t] == fin[base + src], t
        assert iout[t] == iin[base + src], t


def test_cp_async_groups_zero_fill_and_stale_reads(lib) -> None:
    src = aligned_bytes(64)
    src[:] = np.random.default_rng(4).integers(1, 255, 64, dtype=np.uint8)
    out = np.zeros((5, 64), dtype=np.uint8)
    call(lib.ddk_probe_cp_async, ptr(src, ctypes.c_uint8), ptr(out, ctypes.c_uint8))
    stale = np.full(16, 0xCD, dtype=np.uint8)
    zeros = np.zeros(16, dtype=np.uint8)
    a, b, d = src[0:16], src[16:32], src[48:64]

    def slots(k):
        return [out[k, 16 * i : 16 * i + 16] for i in range(4)]

    expected = [
        [stale, stale, stale, stale],  # fresh block: the garbage fill
        [stale, stale, stale, stale],  # issued and committed, not waited: nothing landed
        [a, stale, stale, stale],  # wait_group 1: all but the newest group
        [a, b, zeros, stale],  # wait_group 0: every committed group; the uncommitted copy is pending
        [a, b, zeros, d],  # wait_all commits it too
    ]
    for k, want in enumerate(expected):
        for i, (got, exp) in enumerate(zip(slots(k), want, strict=True)):
            assert np.array_equal(got, exp), f"snapshot {k}, slot {'ABCD'[i]}"


def test_cp_async_two_stage_pipeline(lib) -> None:
    n_chunks = 300  # long enough for the per-thread queue to be compacted many times
    src = aligned_bytes(512 * n_chunks)
    src[:] = np.random.default_rng(5).integers(0, 256, src.size, dtype=np.uint8)
    out = np.zeros(512 * n_chunks, dtype=np.uint8)
    call(lib.ddk_probe_cp_pipeline, ptr(src, ctypes.c_uint8), ptr(out, ctypes.c_uint8), n_chunks)
    assert np.array_equal(out, src)


@pytest.mark.parametrize("workers", [1, 2])
def test_multi_warp_kernel_with_sync_block(lib, workers: int) -> None:
    gx, gy, gz = 3, 2, 2
    blocks = gx * gy * gz
    rng = np.random.default_rng(6)
    inp = rng.integers(-1000, 1000, (blocks, 256)).astype(np.float32)
    out = np.zeros((blocks, 256), dtype=np.float32)
    ids = np.zeros((blocks, 8), dtype=np.uint32)
    call(
        lib.ddk_probe_multiwarp,
        ptr(inp, ctypes.c_float),
        ptr(out, ctypes.c_float),
        ptr(ids, ctypes.c_uint32),
        gx,
        gy,
        gz,
        workers,
    )
    v = np.roll(inp, -37, axis=1)  # thread t reads the value thread (t + 37) % 256 stored
    warp_sums = v.reshape(blocks, 8, 32).sum(axis=2, keepdims=True)
    expected = v * 1000 + np.broadcast_to(warp_sums, (blocks, 8, 32)).reshape(blocks, 256)
    assert np.array_equal(out, expected)
    for b in range(blocks):
        bx, by, bz = b % gx, b // gx % gy, b // (gx * gy)
        assert ids[b].tolist() == [bx, by, bz, gx, gy, gz, 256, 8]


def test_memory_accessors_are_plain_accesses_when_not_traced(lib_build) -> None:
    probes = TracedProbes(lib_build[0])
    src = aligned_bytes(512 * 3)
    src[:] = np.random.default_rng(8).integers(0, 256, src.size, dtype=np.uint8)
    out = aligned_bytes(512 * 3)
    counters, report = probes.call("ddk_probe_cp_traced", src.ctypes.data, out.ctypes.data, 3, 0, 1)
    assert counters is None and report is None
    assert np.array_equal(out, src)  # ld_shared / st_global moved every byte
    data = aligned_bytes(4 * 256).view(np.float32)
    result = aligned_bytes(4 * 128).view(np.float32)
    probes.call("ddk_probe_sanitize", 5, data.ctypes.data, 256, result.ctypes.data, 128, 0)
    assert set(result[:64].view(np.uint32).tolist()) == {0xCDCDCDCD}  # an unwritten word: the fill, unchecked


def test_limits_are_inclusive(lib) -> None:
    out = np.zeros(4, dtype=np.uint32)
    call(lib.ddk_probe_limits, ptr(out, ctypes.c_uint32))  # 1024 threads, 101,376 bytes of shared memory
    assert out[:2].tolist() == [1024, 1024]


def convert(probe, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bits, pairs packed, bits widened back) of float32 `values` through a ddk_probe_bf16/_f16 helper."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    n = values.size
    bits, packed, back = np.zeros(n, np.uint16), np.zeros(n // 2, np.uint32), np.zeros(n, np.float32)
    probe(
        ptr(values, ctypes.c_float),
        n,
        ptr(bits, ctypes.c_uint16),
        ptr(packed, ctypes.c_uint32),
        ptr(back, ctypes.c_float),
    )
    return bits, packed, back


def test_bf16_helpers_round_to_nearest_even(lib) -> None:
    rng = np.random.default_rng(7)
    special = np.array(
        [
            0.0,
            -0.0,
            1.0,
            1.0 + 2.0**-8,
            1.0 + 3 * 2.0**-8,
            -(1.0 + 2.0**-8),
            3.4028235e38,
            -3.4028235e38,
            np.inf,
            -np.inf,
            1e-40,
            -1e-40,
            2.0**-133,
            65504.0,
            0.1,
            1.0 + 2.0**-8 + 2.0**-20,
        ],
        dtype=np.float32,
    )
    values = np.concatenate([special, rng.standard_normal(4000).astype(np.float32) * 100]).astype(np.float32)
    bits, packed, back = convert(lib.ddk_probe_bf16, values)
    torch_bits = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16)
    assert np.array_equal(bits, torch_bits)
    assert np.array_equal(back, bf16_bits_to_float(bits))
    assert np.array_equal(packed, bits[0::2].astype(np.uint32) | (bits[1::2].astype(np.uint32) << 16))

    nans = np.array([np.nan, -np.nan], dtype=np.float32)
    nans = np.concatenate([nans, np.array([0x7F800001, 0xFF812345], dtype=np.uint32).view(np.float32)])
    nan_bits, _, _ = convert(lib.ddk_probe_bf16, nans)
    assert np.all((nan_bits & 0x7FC0) == 0x7FC0), [hex(b) for b in nan_bits]  # NaN, quiet bit set
    assert lib.ddk_probe_exp2(-3.5) == pytest.approx(2.0**-3.5, rel=1e-6)


def test_fp16_conversion_matches_ieee_round_to_nearest_even(lib):
    """The parts' fp16: every rounding boundary of the normal and subnormal range, overflow, zeros, NaN."""
    rng = np.random.default_rng(5)
    halves = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    finite = halves[np.isfinite(halves)]
    ordered = np.sort(finite[finite >= 0])
    ties = ((ordered[:-1].astype(np.float64) + ordered[1:]) / 2).astype(np.float32)  # exact midpoints
    nudged = np.concatenate([np.nextafter(ties, np.float32(0)), np.nextafter(ties, np.float32(np.inf))])
    special = np.array(
        [0.0, -0.0, 65504.0, 65519.0, 65520.0, 1e9, np.inf, -np.inf, 2.0**-25, 2.0**-26, 1e-40]
    )
    values = np.concatenate(
        [
            finite,
            ties,
            -ties,
            nudged,
            special,
            rng.standard_normal(4000) * 300,
            rng.standard_normal(2000) * 1e-6,
        ]
    ).astype(np.float32)
    values = values[: values.size // 2 * 2]
    bits, packed, back = convert(lib.ddk_probe_f16, values)
    with np.errstate(over="ignore"):  # 65520 and up become Inf, as they must
        expected = values.astype(np.float16)
    assert np.array_equal(bits, expected.view(np.uint16)), values[bits != expected.view(np.uint16)][:5]
    assert np.array_equal(back, expected.astype(np.float32))
    assert np.array_equal(packed, bits[0::2].astype(np.uint32) | (bits[1::2].astype(np.uint32) << 16))
    nans = np.array([0x7FC00000, 0xFF812345], dtype=np.uint32).view(np.float32)
    nan_bits, _, back = convert(lib.ddk_probe_f16, nans)
    assert np.all((nan_bits & 0x7E00) == 0x7E00) and np.all(np.isnan(back[:2])), [hex(b) for b in nan_bits]


# ---------------------------------------------------------------------------------------------------
# Faults: divergence and deadlock are errors with a report, never hangs.
# ---------------------------------------------------------------------------------------------------

FAULT_SCRIPT = r"""
import ctypes, json, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
src = np.zeros(64, dtype=np.uint8)
src16 = src[(-src.ctypes.data) % 16:][:16]
results = []
for which in range(12):
    err = ctypes.create_string_buffer(4096)
    rc = lib.ddk_probe_fault(which, src16.ctypes.data_as(ctypes.c_void_p), err, 4096)
    results.append([rc, err.value.decode()])
out = np.zeros(4, dtype=np.uint32)
err = ctypes.create_string_buffer(4096)
rc = lib.ddk_probe_limits(out.ctypes.data_as(ctypes.c_void_p), err, 4096)  # the runtime still works
results.append([rc, err.value.decode(), out.tolist()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def faults(lib_build) -> list:
    proc = subprocess.run(
        [sys.executable, "-c", FAULT_SCRIPT, str(lib_build[0])], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_divergent_shfl_half_warp_exited(faults) -> None:
    rc, msg = faults[0]
    assert rc == 2
    assert "deadlock in block (0,0,0)" in msg
    assert (
        f"warp 0: lanes 0-15 wait at shfl_xor (probes.cpp:{_site_line('div_shfl_exit')}); lanes 16-31 exited"
        in msg
    )


def test_divergent_shfl_two_call_sites(faults) -> None:
    rc, msg = faults[1]
    assert rc == 2
    a, b = _site_line("div_shfl_a"), _site_line("div_shfl_b")
    assert "divergence" in msg
    assert (
        f"warps 0-1: lanes 0-15 wait at shfl_xor (probes.cpp:{a}); "
        f"lanes 16-31 wait at shfl_xor (probes.cpp:{b})"
    ) in msg


def test_sync_block_with_an_exited_warp(faults) -> None:
    rc, msg = faults[2]
    assert rc == 2
    line = _site_line("div_sync")
    assert f"sync_block (probes.cpp:{line}) reached by 32 of 64 threads" in msg
    assert f"warp 0: lanes 0-31 wait at sync_block (probes.cpp:{line})" in msg
    assert "warp 1: lanes 0-31 exited" in msg


def test_divergent_mma(faults) -> None:
    rc, msg = faults[3]
    assert rc == 2
    assert (
        f"lanes 0-7 exited; lanes 8-31 wait at mma_bf16_m16n8k16 (probes.cpp:{_site_line('div_mma')})" in msg
    )


def test_out_of_range_shared_memory_accesses(faults) -> None:
    rc, msg = faults[4]
    assert rc == 3
    assert f"ldmatrix_x4 at probes.cpp:{_site_line('oob_ldmatrix')}" in msg
    assert "lane 3" in msg and "offset 4096" in msg
    rc, msg = faults[5]
    assert rc == 3
    assert f"cp_async_16 at probes.cpp:{_site_line('oob_cp_async')}" in msg
    assert "thread 5 (warp 0, lane 5)" in msg and "offset 4088" in msg
    rc, msg = faults[6]
    assert rc == 3 and "wrote outside its 4096-byte dynamic shared memory" in msg


def test_exception_and_bad_launch_configuration(faults) -> None:
    rc, msg = faults[7]
    assert rc == 4 and "probe exception" in msg and "thread 40 (warp 1, lane 8)" in msg
    rc, msg = faults[8]
    assert rc == 1 and "101377" in msg and "101376" in msg
    rc, msg = faults[9]
    assert rc == 1 and "block size 48" in msg
    rc, msg, out = faults[12]
    assert rc == 0, msg
    assert out[:2] == [1024, 1024]


def test_sync_block_at_two_call_sites(faults) -> None:
    rc, msg = faults[10]
    a, b = _site_line("div_sync_a"), _site_line("div_sync_b")
    assert rc == 2
    assert f"sync_block (probes.cpp:{a}) reached by 32 of 96 threads" in msg
    assert f"warp 0: lanes 0-31 wait at sync_block (probes.cpp:{a})" in msg
    assert f"warps 1-2: lanes 0-31 wait at sync_block (probes.cpp:{b})" in msg


def test_half_warp_at_shfl_rest_at_sync_block(faults) -> None:
    rc, msg = faults[11]
    shfl, sync = _site_line("div_mixed_shfl"), _site_line("div_mixed_sync")
    assert rc == 2
    assert "divergence" in msg and f"sync_block (probes.cpp:{sync}) reached by 32 of 64 threads" in msg
    assert (
        f"warps 0-1: lanes 0-15 wait at shfl_xor (probes.cpp:{shfl}); "
        f"lanes 16-31 wait at sync_block (probes.cpp:{sync})"
    ) in msg


# ---------------------------------------------------------------------------------------------------
# Build, speed, nvcc
# ---------------------------------------------------------------------------------------------------


def test_library_builds_and_is_reused(lib_build, monkeypatch) -> None:
    """Reuse means no compiler or linker run at all (counted, not timed: a loaded machine cannot flake it)."""
    import ddbench.kernel.build as build_module

    path, _ = lib_build
    assert path.is_file() and re.fullmatch(r"emu-probes-[0-9a-f]{16}\.so", path.name)

    def no_tool(cmd, what):
        raise AssertionError(f"rebuilt: {what}")

    monkeypatch.setattr(build_module, "_run", no_tool)
    assert build_emulation_library([PROBES], "emu-probes", EXTRA_FLAGS) == path


def test_every_runtime_source_is_linked_and_placed_in_the_manual() -> None:
    """A runtime file missing from RUNTIME_SOURCES would link (a shared library may leave symbols undefined)
    and fail only when loaded; one the README does not place leaves its reader to search for it."""
    emu = KERNELS / "emu"
    assert set(RUNTIME_SOURCES) == {p.name for p in emu.glob("*.cpp")} - {PROBES.name}
    manual = (emu / "README.md").read_text()
    assert [name for name in RUNTIME_SOURCES if f"`{name}`" not in manual] == []


def test_build_failure_reports_compiler_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad_kernel.cpp"
    bad.write_text("#include <ddk/primitives.h>\nvoid k() { ddk::sync_block(; }\n")
    with pytest.raises(KernelBuildError, match=r"bad_kernel\.cpp") as info:
        build_emulation_library([bad], "bad-kernel-test")
    assert "error" in info.value.stderr


def test_emulation_speed(lib) -> None:
    out = np.zeros(6, dtype=np.float64)
    call(lib.ddk_probe_bench, ptr(out, ctypes.c_double))
    switch_ns, mma_ns, shfl_ns, arrival_ns, probe_ms, probe2_ms = out.tolist()
    print(
        f"\nfiber switch {switch_ns:.1f} ns; warp-wide mma {mma_ns:.0f} ns; warp-wide shfl {shfl_ns:.0f} ns; "
        f"sync_block {arrival_ns:.1f} ns per thread; 256-thread probe (100 collectives/thread) "
        f"{probe_ms:.2f} ms; on 2 workers {probe2_ms:.2f} ms per block"
    )
    assert 0 < switch_ns < 2_000
    assert probe_ms < 250, "a 256-thread block with 100 collectives per thread must take milliseconds"


@pytest.mark.skipif(nvcc_available() is not None, reason=str(nvcc_available()))
def test_primitives_compile_with_nvcc(tmp_path: Path) -> None:
    nvcc = str(find_nvcc())
    source = KERNELS / "emu" / "nvcc_check.cu"
    procs = {
        arch: subprocess.Popen(
            [
                nvcc,
                "-std=c++17",
                f"-arch={arch}",
                "-cubin",
                f"-I{KERNELS / 'include'}",
                "-o",
                str(tmp_path / f"check_{arch}.cubin"),
                str(source),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for arch in ("sm_120", "sm_90", "sm_80")  # sm_80: the cluster primitives of a cluster of one
    }
    for arch, proc in procs.items():
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{arch}: {stderr}"
        assert (tmp_path / f"check_{arch}.cubin").stat().st_size > 0
