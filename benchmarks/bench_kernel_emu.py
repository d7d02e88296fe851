"""CPU benchmarks of the custom kernel under the emulation (`cuda-emu`), with SGLang's Triton kernel under its
interpreter on the small shape for comparison. Not part of the test run (testpaths is `tests`); run them with

    .venv/bin/python -m pytest benchmarks/bench_kernel_emu.py --benchmark-enable -p no:cacheprovider

(without `--benchmark-enable` every benchmark runs once, as a smoke test). These are emulation speeds, not
GPU timings: they say how long the CI parity proof takes, and catch a slow-down of the emulation runtime.

Torch runs on one thread (DDBENCH_BENCH_THREADS overrides) and the emulation on one worker
(DDBENCH_BENCH_EMU_WORKERS overrides), for the reason given in benchmarks/bench_inputs.py.
"""

from __future__ import annotations

import os

import pytest
from conftest import SHAPES, SMALL, run_poisoned

from ddbench.backends import get_backend
from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.kernel.launch import prepare_launch

ROUNDS = {SMALL: 20, "kimi-tp8-bs4-p1024-ddtree32": 5, "dsv3-tp8-bs1-p4096-ddtree64": 5}
EMU_WORKERS = int(os.environ.get("DDBENCH_BENCH_EMU_WORKERS", "1"))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_cuda_emu(benchmark, shape):
    backend = CudaEmuBackend(workers=EMU_WORKERS)
    available = backend.availability()
    if not available.ok:
        pytest.skip(available.detail)
    benchmark.group = "cuda-emu"
    benchmark.extra_info["emu_workers"] = EMU_WORKERS
    x = run_poisoned(benchmark, backend, shape, ROUNDS[shape])
    plan = prepare_launch(x).plan
    benchmark.extra_info.update(ctas=plan.ctas, whole_row_tiles=plan.whole_row_tiles, combines=plan.combines)


def test_triton_small(benchmark):
    backend = get_backend("triton")
    available = backend.availability()
    if not available.ok:
        pytest.skip(available.detail)
    benchmark.group = "triton (interpreter)"
    run_poisoned(benchmark, backend, SMALL, ROUNDS[SMALL])
