"""CPU benchmarks of input generation, the torch reference and SGLang's Triton kernel (interpreter) on
representative verify shapes. Not part of the test run (testpaths is `tests`); run them with

    .venv/bin/python -m pytest benchmarks/bench_inputs.py --benchmark-enable -p no:cacheprovider

(`--benchmark-enable` overrides the project's `--benchmark-disable` addopt; the file is collected because it
is named on the command line. Without `--benchmark-enable` every benchmark runs once, as a smoke test.)

Shapes, the one-thread fixture and the timing helper live in benchmarks/conftest.py.
"""

from __future__ import annotations

import pytest
from conftest import SHAPES, SMALL, run_poisoned, shape_case

from ddbench.backends import get_backend
from ddbench.inputs import generate_inputs


@pytest.mark.parametrize("shape", list(SHAPES))
def test_generate_inputs(benchmark, shape):
    c = shape_case(shape)
    benchmark.group = "generate_inputs"
    benchmark.extra_info.update(
        heads=c.heads_per_rank, batch=c.batch_size, prefix=c.prefix_lens[0], q_len=c.q_len
    )
    x = benchmark(generate_inputs, c)
    assert x.q_extend.shape == (c.total_q, c.heads_per_rank, 576)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("backend_name", ["reference", "reference-fp64"])
def test_reference(benchmark, shape, backend_name):
    x = generate_inputs(shape_case(shape))
    backend = get_backend(backend_name)
    benchmark.group = f"backend {backend_name}"
    out = benchmark(backend.run, x)
    assert bool(out.isfinite().all())


def test_triton_small(benchmark):
    backend = get_backend("triton")
    available = backend.availability()
    if not available.ok:
        pytest.skip(available.detail)
    benchmark.group = "backend triton"
    run_poisoned(benchmark, backend, SMALL, rounds=5)
