"""CPU benchmarks of the custom kernel under the emulation (`cuda-emu`), with SGLang's Triton kernel under its
interpreter on the small shape for comparison. Not part of the test run (testpaths is `tests`); run them with

    /tmp/venv0/bin/python -m pytest benchmarks/bench_kernel_emu.py --benchmark-enable -p no:cacheprovider

(without `--benchmark-enable` every benchmark runs once, as a smoke test). These are emulation speeds, not
GPU timings: they say how long the CI parity proof takes, and catch a slow-down of the emulation runtime.

Torch runs on one thread (DDBENCH_BENCH_THREADS overrides) and the emulation on one worker
(DDBENCH_BENCH_EMU_WORKERS overrides), for the reason given in benchmarks/bench_inputs.py.
"""

from __future__ import annotations

import os

import pytest
import torch

from ddbench.backends import get_backend
from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.inputs import generate_inputs, poisoned_mask
from ddbench.kernel.launch import prepare_launch
from ddbench.suite import Case, parse_suite

SHAPES = {
    # Kimi K2.x, TP8 (8 local heads), one request, the real port's validation case: DDTree budget 8, q_len 9
    "kimi-tp8-bs1-p21-ddtree8": {
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "batch_size": 1,
        "prefix": 21,
        "tree": {"kind": "ddtree", "budget": 8},
    },
    # Kimi K2.x, TP8, four requests with a 1k prefix, DDTree budget 32 (q_len 33)
    "kimi-tp8-bs4-p1024-ddtree32": {
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "batch_size": 4,
        "prefix": 1024,
        "tree": {"kind": "ddtree", "budget": 32},
    },
    # DeepSeek-V3, TP8 (16 local heads), one request with a 4k prefix, DDTree budget 64 (q_len 65)
    "dsv3-tp8-bs1-p4096-ddtree64": {
        "model": "deepseek-v3",
        "layout": {"tp": 8},
        "batch_size": 1,
        "prefix": 4096,
        "tree": {"kind": "ddtree", "budget": 64},
    },
}
SMALL = "kimi-tp8-bs1-p21-ddtree8"
ROUNDS = {SMALL: 20, "kimi-tp8-bs4-p1024-ddtree32": 5, "dsv3-tp8-bs1-p4096-ddtree64": 5}
THREADS = int(os.environ.get("DDBENCH_BENCH_THREADS", "1"))
EMU_WORKERS = int(os.environ.get("DDBENCH_BENCH_EMU_WORKERS", "1"))


@pytest.fixture(autouse=True)
def torch_threads(benchmark):
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    benchmark.extra_info["torch_threads"] = THREADS
    yield
    torch.set_num_threads(before)


def case(shape: str) -> Case:
    entry = {"label": shape, "seed": 1, **SHAPES[shape]}
    return parse_suite({"name": "bench", "cases": [entry]}, "benchmarks/bench_kernel_emu.py").cases[0]


def run_poisoned(benchmark, backend, shape: str):
    c = case(shape)
    x = generate_inputs(c)
    backend.run(x)  # the first call pays for the build (cached) or the interpreter's setup

    def fresh():
        x.fresh_output()
        return (x,), {}

    benchmark.extra_info.update(
        heads=c.heads_per_rank, batch=c.batch_size, prefix=c.prefix_lens[0], q_len=c.q_len
    )
    out = benchmark.pedantic(backend.run, setup=fresh, rounds=ROUNDS[shape], iterations=1)
    assert bool(out.isfinite().all()) and not bool(poisoned_mask(out).any())
    return x


@pytest.mark.parametrize("shape", list(SHAPES))
def test_cuda_emu(benchmark, shape):
    backend = CudaEmuBackend(workers=EMU_WORKERS)
    available = backend.availability()
    if not available.ok:
        pytest.skip(available.detail)
    benchmark.group = "cuda-emu"
    benchmark.extra_info["emu_workers"] = EMU_WORKERS
    x = run_poisoned(benchmark, backend, shape)
    plan = prepare_launch(x).plan
    benchmark.extra_info.update(num_splits=plan.num_splits, ctas=plan.ctas)


def test_triton_small(benchmark):
    backend = get_backend("triton")
    available = backend.availability()
    if not available.ok:
        pytest.skip(available.detail)
    benchmark.group = "triton (interpreter)"
    run_poisoned(benchmark, backend, SMALL)
