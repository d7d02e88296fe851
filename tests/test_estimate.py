"""Per-case estimates: exact byte counts of the inputs, the working sets' ordering, the refusal rule."""

from __future__ import annotations

import pytest
from conftest import one_case

from ddbench.backends import cost
from ddbench.backends.cost import Estimate, check_estimate, estimate_case, triton_block_iterations
from ddbench.inputs import generate_inputs
from ddbench.inputs.footprint import input_footprint
from ddbench.inputs.layout import TENSOR_FIELDS

GB = 10**9


def _generated_bytes(inputs) -> int:
    """Bytes of every tensor the generator returns (v_buffer is a view of k_buffer: not counted twice)."""
    return sum(
        getattr(inputs, name).numel() * getattr(inputs, name).element_size()
        for name in TENSOR_FIELDS
        if name != "v_buffer"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"batch_size": 4, "prefix": [0, 21, 130, 5], "tree": {"kind": "chain", "length": 6}},
        {"batch_size": 2, "prefix": [40, 17], "page_size": 16},
        {"layout": {"tp": 1}, "prefix": 0, "tree": {"kind": "ddtree", "budget": 32}},
        {
            "batch_size": 2,
            "prefix": [40, 7],
            "page_size": 16,
            "tree": [{"kind": "chain", "length": 1}, {"kind": "ddtree", "budget": 32}],
        },
    ],
    ids=["single", "ragged", "paged", "prefix0", "ragged-q"],
)
def test_footprint_counts_exactly_what_the_generator_builds(fields):
    case = one_case(**fields)
    inputs = generate_inputs(case)
    footprint = input_footprint(case)
    assert footprint.input_bytes == _generated_bytes(inputs)
    assert footprint.pool_rows == inputs.k_buffer.shape[0]
    assert footprint.tokens == inputs.kv_indices.numel() + inputs.out_cache_loc.numel()
    assert footprint.output_bytes == inputs.o_extend.numel() * inputs.o_extend.element_size()
    heads = case.heads_per_rank
    requests = zip(case.prefix_lens, inputs.q_lens, strict=True)
    assert footprint.score_elements == sum(heads * q * (p + q) for p, q in requests)
    assert footprint.generation_peak_bytes > footprint.input_bytes


def test_the_case_that_asked_for_19_gb_is_refused_before_it_runs():
    case = one_case(
        model="deepseek-v3",
        layout={"tp": 1},
        batch_size=64,
        prefix=131072,
        tree={"kind": "chain", "length": 8},
    )
    footprint = input_footprint(case)
    pool = (2 * 64 * (131072 + 8) + 2) * 576 * 2
    assert footprint.pool_rows * 576 * 2 == pool  # the 19 GB k_buffer
    assert pool > 19 * GB
    estimate = estimate_case(case, ["reference", "triton"], "cpu")
    assert estimate.bytes > pool
    refusal = check_estimate(estimate, max_bytes=16 * GB)
    assert refusal is not None and refusal.refuse
    assert "exceeds the limit 16.0 GB" in refusal.reason


def test_a_case_the_kernel_cannot_plan_is_estimated_and_refused_not_a_traceback():
    """Schema-valid and beyond the kernel's 32-bit unit count: `list` and `run --dry-run` raised
    "ValueError: more work units than 32 bits" from the plan inside the estimate."""
    case = one_case(layout={"tp": 1}, batch_size=4096, prefix=1048576, tree={"kind": "chain", "length": 16})
    estimate = estimate_case(case, ["reference-fp64", "cuda-emu"], "cpu")
    refusal = check_estimate(estimate, max_bytes=16 * GB)
    assert refusal is not None and refusal.refuse


def test_triton_block_iterations_count_prefix_and_causal_draft_blocks():
    # 2 requests, 8 heads, q_len 33 (2 query blocks): prefix 64 -> 2 blocks per query block, draft 1 + 2.
    case = one_case(batch_size=2, prefix=64, tree={"kind": "ddtree", "budget": 32})
    assert case.q_len == 33 and case.heads_per_rank == 8
    assert triton_block_iterations(case) == 8 * 2 * (2 * 2 + 1 + 2)


def test_the_float64_reference_needs_more_than_the_float32_one():
    case = one_case(prefix=4096, layout={"tp": 1})
    fp32 = estimate_case(case, ["reference"])
    fp64 = estimate_case(case, ["reference-fp64"])
    triton = estimate_case(case, ["triton"])
    assert triton.bytes < fp32.bytes < fp64.bytes
    assert fp32.seconds < fp64.seconds


def test_a_longer_prefix_costs_more_time_and_memory():
    short, long = one_case(prefix=100), one_case(prefix=10_000)
    backends = ["reference", "triton", "cuda-emu"]
    assert estimate_case(short, backends).seconds < estimate_case(long, backends).seconds
    assert estimate_case(short, backends).bytes < estimate_case(long, backends).bytes


def test_unknown_costs_are_named_not_guessed():
    case = one_case()
    on_cpu = estimate_case(case, ["reference", "cuda", "mykern"], "cpu")
    assert on_cpu.unknown == ("cuda (needs a GPU)", "mykern (a plug-in: its cost is not known)")
    assert on_cpu.seconds == estimate_case(case, ["reference"], "cpu").seconds
    assert "? cuda, mykern" in on_cpu.text
    on_gpu = estimate_case(case, ["reference", "cuda-emu"], "cuda")
    assert on_gpu.unknown == ("reference (GPU time)",)  # the emulation runs on the host: estimated
    assert on_gpu.device == "cuda" and "+ GPU time" in on_gpu.text


def test_check_estimate_refuses_memory_and_warns_on_time():
    estimate = Estimate(bytes=10 * GB, seconds=1200.0, host_bytes=10 * GB, text="~10 GB")
    refusal = check_estimate(estimate, max_bytes=8 * GB)
    assert refusal is not None and refusal.refuse and "10.0 GB" in refusal.reason
    warning = check_estimate(estimate, max_bytes=16 * GB, max_seconds=600)
    assert warning is not None and not warning.refuse and "20.0 min" in warning.reason
    assert check_estimate(estimate, max_bytes=16 * GB, max_seconds=3600) is None


def test_the_default_limit_is_half_the_physical_memory(monkeypatch):
    monkeypatch.setattr(cost, "machine_memory_bytes", lambda: 32 * GB)
    fits = Estimate(bytes=15 * GB, seconds=1.0, host_bytes=15 * GB)
    too_big = Estimate(bytes=17 * GB, seconds=1.0, host_bytes=17 * GB)
    assert check_estimate(fits) is None
    refusal = check_estimate(too_big)
    assert refusal is not None and refusal.refuse and "16.0 GB" in refusal.reason


def test_a_gpu_run_checks_the_host_side_against_the_machine(monkeypatch):
    monkeypatch.setattr(cost, "machine_memory_bytes", lambda: 32 * GB)
    gpu = Estimate(bytes=100 * GB, seconds=1.0, host_bytes=20 * GB, device="cuda")
    refusal = check_estimate(gpu, max_bytes=141 * GB)
    assert refusal is not None and refusal.refuse and "host memory" in refusal.reason
    fits = Estimate(bytes=100 * GB, seconds=1.0, host_bytes=10 * GB, device="cuda")
    assert check_estimate(fits, max_bytes=141 * GB) is None
    assert check_estimate(fits, max_bytes=80 * GB).refuse


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_memory_limit_that_is_not_finite_is_a_usage_error(value):
    """NaN passed click's range check and reached the estimate's comparison (a traceback)."""
    from pathlib import Path

    from click.testing import CliRunner

    from ddbench.cli.main import cli

    smoke = Path(__file__).resolve().parents[1] / "suites" / "smoke.json"
    result = CliRunner().invoke(cli, ["run", str(smoke), "--dry-run", "--max-memory", value])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "'--max-memory'" in result.output
