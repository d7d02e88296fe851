"""What the benchmark files share: the representative verify shapes, their cases, and one torch thread.

Torch runs on one thread (DDBENCH_BENCH_THREADS overrides): on a shared 2-core machine a 2-thread OpenMP
region waits a whole scheduler slice (~50 ms) whenever another process holds a core, which swamps
millisecond-scale figures.
"""

from __future__ import annotations

import os

import pytest
import torch

from ddbench.inputs import VerifyInputs, generate_inputs
from ddbench.poison import poisoned_mask
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


def shape_case(shape: str) -> Case:
    entry = {"label": shape, "seed": 1, **SHAPES[shape]}
    return parse_suite({"name": "bench", "cases": [entry]}, "benchmarks").cases[0]


def run_poisoned(benchmark, backend, shape: str, rounds: int) -> VerifyInputs:
    """Time `backend.run` on fresh poisoned outputs (the first call, outside the timing, pays for set-up)."""
    c = shape_case(shape)
    x = generate_inputs(c)
    backend.run(x)

    def fresh():
        x.fresh_output()
        return (x,), {}

    benchmark.extra_info.update(
        heads=c.heads_per_rank, batch=c.batch_size, prefix=c.prefix_lens[0], q_len=c.q_len
    )
    out = benchmark.pedantic(backend.run, setup=fresh, rounds=rounds, iterations=1)
    assert bool(out.isfinite().all()) and not bool(poisoned_mask(out).any())
    return x
