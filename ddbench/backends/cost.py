"""Estimated peak memory and CPU seconds of one case, before it runs: refuse a case the machine cannot hold
instead of dying on "tried to allocate 19 GB" after minutes of silence.

Memory is counted from tensor shapes (`ddbench.inputs.footprint`) plus each backend's working set, read off
its code: the float32/float64 `reference` holds about three score matrices H x q_len x (prefix + q_len)
of its accumulation type per request (einsum result, masked copy, softmax) besides gathered float keys
and values; `cuda-emu` and `cuda` add the marshaled slot lists, the mask bit words and the split-K
workspace; Triton's interpreter works on CPU tensors in place (tiles only). The run keeps a copy of each
backend's output; its input fingerprint sums the read-only tensors in chunks (a 32 MB temporary; summed
whole, a 200 MB int16 tensor raised peak RSS by 783 MB here, through its int64 copy). Against peak RSS, on
the 19 runs below that exceed 50 MB: -27 % to +11 %, median |error| 9 %.

Seconds are an estimate for this machine's CPU (2 cores), fitted by least squares (weights 1/sqrt(t)) to
one call of each backend, each in a fresh process, on these cases (heads x batch x prefix x q_len; a
second figure is a repeat run). The machine was shared (load average up to 11 from other test runs), so
repeats differ by up to 2x:

    case                 reference      reference-fp64   cuda-emu   triton   generation
    8 x 1 x 512 x 16     0.30 s         0.26 s           0.20 s     8.4 s    0.01-0.15 s
    8 x 1 x 0 x 33       0.09 s         0.006 s          0.08 s     1.6 s    0.01-0.08 s
    16 x 2 x 128 x 4     0.21 s         0.21 s           0.04 s    12.7 s    0.07 s
    64 x 1 x 64 x 8      0.20 s         0.20 s           0.13 s     8.9 s    0.01-0.13 s
    8 x 3 x 96 x 9       0.11 s         0.50 s           0.11 s     3.3 s    0.08-0.14 s
    8 x 1 x 256 x 65     -              -                -         27.1 s    0.16 s
    16 x 1 x 140 x 17    -              -                -         10.5 s    0.21 s
    8 x 4 x 0-130 x 6    -              -                -         10.1 s    -      (inside `ddbench run`)
    64 x 1 x 1024 x 16   -              -                1.51 s     -        0.09 s
    8 x 8 x 1024 x 17    1.60 s         1.11 s           2.62 s     -        0.26-0.33 s
    64 x 2 x 4096 x 33   1.20, 1.28 s   1.22, 1.84 s    22.6 s      -        0.15-0.37 s
    128 x 4 x 2048 x 16  1.38 s         3.05 s           -          -        0.29 s
    128 x 1 x 8192 x 64  5.95, 3.31 s   12.0, 6.58 s     -          -        0.15-0.30 s
    64 x 64 x 2048 x 8   16.1 s         19.5 s           -          -        1.2-4.3 s

Units of work: `reference` a cost per request, per score element (H x q_len x keys) and per head-key row
(H x keys: its batched einsums read the keys once per head); `cuda-emu` a fixed cost and one per score
element; `triton` the interpreter's block iterations (SGLang picks 32 x 32 blocks off CUDA/ROCm for head
dim 576: every request, head and 32-query block walks its prefix and its draft keys 32 at a time) and a
cost per program; generation a fixed cost and one per random number drawn. Fit error, |estimate -
measured| / measured, on the cases of 1 s or more (median, max): reference 25 %, 37 %; reference-fp64 27 %,
92 %; cuda-emu 3 %, 40 %; generation 55 %, 58 %. Below 1 s the error is up to 0.3 s (a fixed cost per call
that varies run to run). So read a figure as its order of magnitude: within a factor of two.

The Triton figures were refit (2026-12-01) on warm calls in one process, 1 torch thread, an idle machine:
13 ms per program and 4.1 ms per block iteration fit h8 bs1 q9 at prefix 0 / 2048 / 8192 (0.12 / 2.18 /
8.60 s), h2 bs8 p512 q9 (1.42 s), h8 p256 q65 (1.30 s) and h16 bs2 p128 q4 (1.03 s) within 25 %, and two
`ddbench run` cases (h8 p16384: 16.7 s measured, 16.9 estimated; h8 bs8 ragged to p3000: 8.4 s, 8.7). The
table's Triton column, from fresh processes on a loaded machine, is 5-10x slower per iteration; the old
one-term fit to it overestimated a 16k prefix 15x. GPU time (`cuda`, `triton` on a GPU) is not estimated:
microseconds to milliseconds per call after a one-off compile, and the run names it as unknown.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ddbench.inputs.footprint import BF16_BYTES, FP32_BYTES, INDEX_BYTES, InputFootprint, input_footprint
from ddbench.kernel.marshal import MASK_WORD_BITS
from ddbench.kernel.plan import PART_ROW_BYTES, plan_launch
from ddbench.suite.model import Case
from ddbench.suite.presets import HEAD_DIM_QK, HEAD_DIM_V

TRITON_CPU_BLOCK = 32  # SGLang's BLOCK_M = BLOCK_N off CUDA/ROCm when the head dim exceeds 128
FP64_BYTES = 8


@dataclass(frozen=True)
class ReferenceRates:
    """Seconds per unit of the torch reference's work, fitted on this CPU (module docstring)."""

    per_request: float
    per_score: float
    per_head_key_row: float


# Seconds per unit of work on this CPU (see the module docstring for the fit and its error).
GENERATION_FIXED_S = 0.038
GENERATION_PER_NUMBER_S = 1.88e-8
REFERENCE_RATES = {
    "reference": ReferenceRates(per_request=0.127, per_score=5.22e-8, per_head_key_row=4.66e-7),
    "reference-fp64": ReferenceRates(per_request=0.166, per_score=1.11e-7, per_head_key_row=1.44e-7),
}
CUDA_EMU_FIXED_S = 0.060
CUDA_EMU_PER_SCORE_S = 1.33e-6
# Refit on warm calls inside one process (1 torch thread, machine otherwise idle; see the docstring):
TRITON_PER_PROGRAM_S = 0.013
TRITON_PER_BLOCK_ITERATION_S = 0.0041

REFERENCE_ACCUMULATION_BYTES = {"reference": FP32_BYTES, "reference-fp64": FP64_BYTES}
GPU_ONLY = frozenset({"cuda"})
RECORDED = frozenset({"captured", "captured-candidate"})  # outputs read from a capture: nothing to compute
HOST_ONLY = frozenset({"cuda-emu"}) | RECORDED  # the emulation copies GPU inputs back to the host
# Measured above the inputs on the first case of a process: allocator arenas, trees, torch's first ops.
PROCESS_OVERHEAD_BYTES = 20_000_000


@dataclass(frozen=True)
class Estimate:
    """Peak memory (bytes, on the device the case runs on) and seconds of one case: an estimate."""

    bytes: int
    seconds: float  # the part that can be estimated (see `unknown`)
    host_bytes: int  # host memory: equals `bytes` on the CPU; the generator's peak on a GPU run
    device: str = "cpu"  # where `bytes` is needed: "cpu" or "cuda"
    unknown: tuple[str, ...] = ()  # backends whose cost is not known (plug-ins; GPU time)
    text: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "device": self.device,
            "bytes": self.bytes,
            "host_bytes": self.host_bytes,
            "seconds": round(self.seconds, 3),
            "unknown": list(self.unknown),
            "text": self.text,
            "label": "estimate",
        }


@dataclass(frozen=True)
class EstimateCheck:
    """What `check_estimate` found: a refusal (the case cannot fit) or a warning (it will be slow)."""

    refuse: bool
    reason: str


def triton_programs(case: Case) -> int:
    """Programs of SGLang's extend grid under the interpreter: (request, head, 32-query block of the longest
    q_len); each costs its start-up even where it returns at once."""
    return case.batch_size * case.heads_per_rank * -(-case.q_len // TRITON_CPU_BLOCK)


def triton_block_iterations(case: Case) -> int:
    """Block iterations SGLang's extend kernel makes under the interpreter: per (request, head, query
    block of the request's own q_len), ceil(prefix / 32) prefix blocks and the draft blocks up to that query
    block's causal end (a request's query blocks past its q_len return at once)."""
    per_head = 0
    for prefix, q_len in zip(case.prefix_lens, case.q_lens, strict=True):
        q_blocks = -(-q_len // TRITON_CPU_BLOCK)
        draft = sum(-(-min((m + 1) * TRITON_CPU_BLOCK, q_len) // TRITON_CPU_BLOCK) for m in range(q_blocks))
        per_head += q_blocks * -(-prefix // TRITON_CPU_BLOCK) + draft
    return case.heads_per_rank * per_head


def _reference_working_bytes(case: Case, accumulate: int) -> int:
    """One request at a time: three score matrices, float keys and values, the bf16 gathers, float q."""
    heads, q_len = case.heads_per_rank, case.q_len
    largest = max(case.prefix_lens, default=0) + q_len
    per_request = (
        3 * heads * q_len * largest * accumulate
        + 2 * largest * HEAD_DIM_QK * accumulate
        + 2 * largest * HEAD_DIM_QK * BF16_BYTES
        + q_len * heads * HEAD_DIM_QK * accumulate
        + 2 * q_len * largest
    )
    return case.total_q * heads * HEAD_DIM_V * accumulate + per_request


def _custom_kernel_working_bytes(case: Case, footprint: InputFootprint) -> int:
    """Marshaling (int64 slot arithmetic over every key, the mask's bit expansion) and the parts' buffer."""
    try:
        plan = plan_launch(case.batch_size, case.heads_per_rank, case.q_len, footprint.tokens)
        workspace = plan.workspace_parts * plan.block_m * PART_ROW_BYTES
    except ValueError:  # a case the kernel cannot plan (more work units than it counts): the launch refuses
        workspace = 0  # it before allocating its parts, and an estimate must not crash `list` or --dry-run
    mask_bits = case.total_q * -(-case.q_len // MASK_WORD_BITS) * MASK_WORD_BITS
    return 10 * footprint.tokens * INDEX_BYTES + 3 * mask_bits * INDEX_BYTES + workspace


def _output_bytes(backend: str, footprint: InputFootprint) -> int:
    """The copy of a backend's output the run keeps for judging (references return float32/float64)."""
    accumulate = REFERENCE_ACCUMULATION_BYTES.get(backend)
    return footprint.output_bytes // BF16_BYTES * accumulate if accumulate else footprint.output_bytes


def _working_bytes(backend: str, case: Case, footprint: InputFootprint) -> int | None:
    if backend in REFERENCE_ACCUMULATION_BYTES:
        return _reference_working_bytes(case, REFERENCE_ACCUMULATION_BYTES[backend])
    if backend in ("cuda-emu", "cuda"):
        return _custom_kernel_working_bytes(case, footprint)
    if backend == "triton" or backend in RECORDED:
        return 0
    return None


def _cpu_seconds(backend: str, case: Case, footprint: InputFootprint) -> float | None:
    if backend in REFERENCE_RATES:
        rates = REFERENCE_RATES[backend]
        head_key_rows = case.heads_per_rank * footprint.tokens
        return (
            rates.per_request * case.batch_size
            + rates.per_score * footprint.score_elements
            + rates.per_head_key_row * head_key_rows
        )
    if backend == "cuda-emu":
        return CUDA_EMU_FIXED_S + CUDA_EMU_PER_SCORE_S * footprint.score_elements
    if backend == "triton":
        return TRITON_PER_PROGRAM_S * triton_programs(
            case
        ) + TRITON_PER_BLOCK_ITERATION_S * triton_block_iterations(case)
    if backend in RECORDED:
        return 0.0
    return None


def generation_seconds(case: Case, footprint: InputFootprint) -> float:
    numbers = footprint.tokens * HEAD_DIM_QK + case.total_q * case.heads_per_rank * HEAD_DIM_QK
    return GENERATION_FIXED_S + GENERATION_PER_NUMBER_S * numbers


def generation_calls(case: Case) -> int:
    """Verify calls a backend makes in one case: 1 for a parity case; for a generation case, one a layer,
    TP rank's head group (one group but on a checkpoint) and verify step, twice (its own and its teacher's),
    with as many steps as the accept-length floor allows."""
    spec = case.generation
    if spec is None:
        return 1
    groups = spec.checkpoint.heads // case.heads_per_rank if spec.checkpoint is not None else 1
    return 2 * spec.layers * groups * math.ceil(spec.new_tokens / spec.min_accept_length)


def model_bytes(case: Case) -> int:
    """A checkpoint's weights as the case holds them (its first `layers` layers, in their stored dtype, fp8
    dequantized to bf16) and the largest float32 temporary; 0 otherwise (the seeded model is not counted)."""
    spec = case.generation
    if spec is None or spec.checkpoint is None:
        return 0
    return spec.checkpoint.weight_bytes(spec.layers)


def estimate_case(case: Case, backends: Sequence[str], device: str = "cpu") -> Estimate:
    """Peak bytes and seconds of generating the case's inputs and running each backend once on them.

    `device` is "cpu" or "cuda" (there, `seconds` is the generation on the host, and each backend's GPU
    time is named in `unknown`). A plug-in counts its output copy only and is named in `unknown`. The
    timing samples of a latency budget come on top: each costs about one more call.
    """
    footprint = input_footprint(case)
    on_gpu = device == "cuda"
    unknown: list[str] = []
    kept = 0
    working = 0
    seconds = generation_seconds(case, footprint)
    fingerprint = FINGERPRINT_CHUNK_BYTES  # runner/execute.py sums the inputs in chunks of 4M int64
    for name in backends:
        extra = _working_bytes(name, case, footprint)
        working = max(working, kept + (extra or 0))
        kept += _output_bytes(name, footprint)
        runs_on_host = not on_gpu or name in HOST_ONLY
        cpu = _cpu_seconds(name, case, footprint) if runs_on_host and name not in GPU_ONLY else None
        if extra is None:
            unknown.append(f"{name} (a plug-in: its cost is not known)")
        elif not runs_on_host:
            unknown.append(f"{name} (GPU time)")
        elif cpu is None:
            unknown.append(f"{name} (needs a GPU)")
        else:
            seconds += cpu * generation_calls(case)
    run_peak = (
        PROCESS_OVERHEAD_BYTES + footprint.input_bytes + max(working, kept + fingerprint) + model_bytes(case)
    )
    host = PROCESS_OVERHEAD_BYTES + footprint.generation_peak_bytes
    peak = run_peak if on_gpu else max(host, run_peak)
    text = f"~{format_bytes(peak)}, ~{format_seconds(seconds)}"
    if any(u.endswith("(GPU time)") for u in unknown):
        text += " + GPU time"
    if len(unknown) > sum(u.endswith("(GPU time)") for u in unknown):
        text += " + ? " + ", ".join(u.split()[0] for u in unknown if not u.endswith("(GPU time)"))
    where = "cuda" if on_gpu else "cpu"
    return Estimate(peak, seconds, host if on_gpu else peak, where, tuple(unknown), text)


def machine_memory_bytes() -> int | None:
    """Physical memory of this machine, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


FINGERPRINT_CHUNK_BYTES = (1 << 22) * 8
DEFAULT_MAX_SECONDS = 600.0  # ten minutes for one case: worth a warning


def check_estimate(
    estimate: Estimate, *, max_bytes: int | None = None, max_seconds: float | None = DEFAULT_MAX_SECONDS
) -> EstimateCheck | None:
    """A refusal when the estimated peak exceeds `max_bytes` (default: half this machine's physical
    memory, for the host side of a GPU run too), a warning when the seconds exceed `max_seconds`; None when
    neither. `max_bytes` on a GPU run is the device's memory: pass it (default: no device check)."""
    physical = machine_memory_bytes()
    host_limit = physical // 2 if physical else None
    gpu_run = estimate.device != "cpu"
    device_limit = max_bytes if max_bytes is not None else (None if gpu_run else host_limit)
    if device_limit is not None and estimate.bytes > device_limit:
        return EstimateCheck(
            True,
            f"estimated peak memory {format_bytes(estimate.bytes)} exceeds the limit"
            f" {format_bytes(device_limit)} ({estimate.text})",
        )
    if gpu_run and host_limit is not None and estimate.host_bytes > host_limit:
        return EstimateCheck(
            True,
            f"estimated host memory to build the inputs {format_bytes(estimate.host_bytes)} exceeds"
            f" {format_bytes(host_limit)}, half of this machine's",
        )
    if max_seconds is not None and estimate.seconds > max_seconds:
        return EstimateCheck(
            False, f"estimated {format_seconds(estimate.seconds)} on this CPU (limit {max_seconds:g} s)"
        )
    return None


def format_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def format_seconds(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"
