"""The serving plugin's own host cost per target-verify call in eager mode: SGLang's `extend_attention_fwd`
signature, a no-op in its place and a no-op candidate, so what is timed is the hook alone (telling a verify
call from the others, the eligibility checks, building the candidate's inputs, the counters). Run with

    .venv/bin/python -m pytest benchmarks/bench_apply_hook.py --benchmark-enable -p no:cacheprovider

and compare `apply-hook` with `no-hook`: the difference is the overhead (aim: 10 µs or less a call). A call
replayed from a CUDA graph runs no Python at all, so there it is zero.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from pathlib import Path

import pytest
from conftest import SMALL, shape_case

from ddbench.backends.triton_sglang import extend_attention_arguments
from ddbench.inputs import generate_inputs
from ddbench.serving.hook import ApplyHook
from ddbench.serving.settings import settings_from_env
from ddbench.sglang_target import EXTEND_ATTENTION_MODULE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serving_candidates import NoOpKernel

ROUNDS = 20000


@pytest.fixture(scope="module")
def call(tmp_path_factory):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    real = importlib.import_module(EXTEND_ATTENTION_MODULE).extend_attention_fwd

    @functools.wraps(real)  # the real signature, nothing run
    def extend_attention_fwd(*args, **kwargs):
        return None

    args, kwargs = extend_attention_arguments(generate_inputs(shape_case(SMALL)))
    settings = settings_from_env(
        {
            "DDBENCH_APPLY": "apply",
            "DDBENCH_APPLY_EVERY": str(10**9),
            "DDBENCH_APPLY_DIR": str(tmp_path_factory.mktemp("a")),
        }
    )
    hook = ApplyHook(settings, NoOpKernel())
    hook.counters.eligible = 1  # past the first eligible call, the one every N that is checked
    return extend_attention_fwd, hook, args, kwargs


def test_no_hook(benchmark, call):
    fn, _, args, kwargs = call
    benchmark.group = "apply hook, per call"
    benchmark.pedantic(lambda: fn(*args, **kwargs), rounds=ROUNDS, iterations=1)


def test_apply_hook(benchmark, call):
    fn, hook, args, kwargs = call
    benchmark.group = "apply hook, per call"
    benchmark.pedantic(lambda: hook(fn, *args, **kwargs), rounds=ROUNDS, iterations=1)
    assert hook.counters.served_candidate >= ROUNDS and not hook.breaker.tripped
