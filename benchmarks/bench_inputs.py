"""CPU benchmarks of input generation, the torch reference and SGLang's Triton kernel (interpreter) on
representative verify shapes. Not part of the test run (testpaths is `tests`); run them with

    /tmp/venv0/bin/python -m pytest benchmarks/bench_inputs.py --benchmark-enable -p no:cacheprovider

(`--benchmark-enable` overrides the project's `--benchmark-disable` addopt; the file is collected because it
is named on the command line. Without `--benchmark-enable` every benchmark runs once, as a smoke test.)

Torch runs on one thread here (DDBENCH_BENCH_THREADS overrides): on a shared 2-core machine a 2-thread OpenMP
region waits a whole scheduler slice (~50 ms) whenever another process holds a core, which swamps
millisecond-scale figures.
"""

from __future__ import annotations

import os

import pytest
import torch

from ddbench.backends import get_backend
from ddbench.inputs import generate_inputs
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
THREADS = int(os.environ.get("DDBENCH_BENCH_THREADS", "1"))


@pytest.fixture(autouse=True)
def torch_threads(benchmark):
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    benchmark.extra_info["torch_threads"] = THREADS
    yield
    torch.set_num_threads(before)


def case(shape: str) -> Case:
    entry = {"label": shape, "seed": 1, **SHAPES[shape]}
    return parse_suite({"name": "bench", "cases": [entry]}, "benchmarks/bench_inputs.py").cases[0]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_generate_inputs(benchmark, shape):
    c = case(shape)
    benchmark.group = "generate_inputs"
    benchmark.extra_info.update(
        heads=c.heads_per_rank, batch=c.batch_size, prefix=c.prefix_lens[0], q_len=c.q_len
    )
    x = benchmark(generate_inputs, c)
    assert x.q_extend.shape == (c.total_q, c.heads_per_rank, 576)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("backend_name", ["reference", "reference-fp64"])
def test_reference(benchmark, shape, backend_name):
    x = generate_inputs(case(shape))
    backend = get_backend(backend_name)
    benchmark.group = f"backend {backend_name}"
    out = benchmark(backend.run, x)
    assert bool(out.isfinite().all())


def test_triton_small(benchmark):
    backend = get_backend("triton")
    available = backend.availability()
    if not available.ok:
        pytest.skip(available.detail)
    x = generate_inputs(case(SMALL))
    backend.run(x)  # first call pays for the interpreter's setup

    def fresh():
        x.fresh_output()
        return (x,), {}

    benchmark.group = "backend triton"
    out = benchmark.pedantic(backend.run, setup=fresh, rounds=5, iterations=1)
    assert bool(out.isfinite().all())
