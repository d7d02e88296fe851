"""The scoped fix for Triton's interpreter multiplying raw bf16 bit patterns in `tl.dot` (triton#11584).

Everything that touches Triton runs in a subprocess with TRITON_INTERPRET=1. `triton.jit` reads the
variable when it decorates, and Triton's own standard library (`tl.zeros`, ...) is decorated when `triton`
is first imported: importing triton in this process without the variable would break SGLang's kernel under
the interpreter later in the session (tests/test_triton.py), and setting it here would send every later
Triton kernel (SGLang's, on a GPU machine) to the interpreter. The subprocess measures the same bf16 dot
without the fix, inside it and after it, and checks the patch's scoping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ddbench.backends.interpreter_fix import UPSTREAM_ISSUE

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    assert os.environ.get("TRITON_INTERPRET") == "1"
    import ddbench.backends.interpreter_fix as fix
    out = {"imports_triton_eagerly": "triton" in sys.modules}  # the fix must import Triton lazily

    import numpy as np
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    from ddbench.backends.interpreter_fix import _widen_bf16, bf16_dot_fixed

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
        rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))

    def rel_error(dtype, seed):
        g = torch.Generator().manual_seed(seed)
        a = (torch.randn(16, 32, generator=g) * 0.7).to(dtype)
        b = (torch.randn(32, 16, generator=g) * 1.3).to(dtype)
        c = torch.full((16, 16), float("nan"))
        dot_kernel[(1,)](a, b, c, 16, 16, 32)
        expected = a.double() @ b.double()
        if not bool(c.isfinite().all()):
            return float("inf")
        return float((c.double() - expected).abs().max() / expected.abs().max())

    def current():
        return interpreter.InterpreterBuilder.create_dot

    original = current()
    out["triton"] = triton.__version__
    out["bf16_without_fix"] = rel_error(torch.bfloat16, 1)
    out["fp16_without_fix"] = rel_error(torch.float16, 2)
    with bf16_dot_fixed():
        out["patched_inside"] = current() is not original
        out["bf16_with_fix"] = [rel_error(torch.bfloat16, s) for s in (3, 4, 5)]
        out["fp16_with_fix"] = rel_error(torch.float16, 6)
    out["restored"] = current() is original
    out["bf16_after_fix"] = rel_error(torch.bfloat16, 7)

    try:
        with bf16_dot_fixed():
            raise ZeroDivisionError
    except ZeroDivisionError:
        pass
    out["restored_after_error"] = current() is original
    with bf16_dot_fixed():
        outer = current()
        with bf16_dot_fixed():
            inner = current()
        out["nested_inner_distinct"] = inner is not outer
        out["nested_restores_outer"] = current() is outer
    out["nested_restores_original"] = current() is original

    values = (torch.randn(6, 5, generator=torch.Generator().manual_seed(0))).to(torch.bfloat16)
    raw = values.view(torch.int16).numpy().view(np.uint16)  # how the interpreter stores bf16
    widened = _widen_bf16(interpreter.TensorHandle(raw, tl.bfloat16), interpreter, tl)
    out["widen_dtype"] = str(widened.dtype)
    out["widen_np_dtype"] = str(widened.data.dtype)
    out["widen_exact"] = bool(np.array_equal(widened.data, values.float().numpy()))
    other = interpreter.TensorHandle(np.ones((2, 2), dtype=np.float16), tl.float16)
    out["widen_leaves_fp16"] = _widen_bf16(other, interpreter, tl) is other
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def measured() -> dict:
    if importlib.util.find_spec("triton") is None:  # not importorskip: no Triton import in this process
        pytest.skip("triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"interpreter subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    (line,) = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def test_bf16_dot_is_wrong_without_the_fix(measured):
    assert measured["bf16_without_fix"] > 0.5, (
        f"Triton {measured['triton']}'s interpreter now computes a bf16 tl.dot correctly without "
        f"ddbench's fix (relative error {measured['bf16_without_fix']:.2e}): "
        f"upstream {UPSTREAM_ISSUE} looks fixed. "
        "Confirm it upstream, then drop the workaround in ddbench/backends/interpreter_fix.py (keep it for "
        "older Triton versions) and turn this test around."
    )


def test_fp16_dot_needs_no_fix(measured):
    assert measured["fp16_without_fix"] < 1e-5
    assert measured["fp16_with_fix"] < 1e-5  # and the fix leaves fp16 alone


def test_bf16_dot_matches_torch_with_the_fix(measured):
    # fp32 accumulation of exact bf16 products: far inside one bf16 ULP (2^-8 relative)
    assert measured["patched_inside"]
    assert max(measured["bf16_with_fix"]) < 1e-5, measured["bf16_with_fix"]


def test_the_fix_is_scoped(measured):
    assert measured["restored"]
    assert measured["bf16_after_fix"] > 0.5  # wrong again once the context exits
    assert measured["restored_after_error"]


def test_nested_contexts_restore_in_order(measured):
    assert measured["nested_inner_distinct"]
    assert measured["nested_restores_outer"]
    assert measured["nested_restores_original"]


def test_widen_bf16_recovers_the_encoded_values(measured):
    assert measured["widen_dtype"] == "fp32"
    assert measured["widen_np_dtype"] == "float32"
    assert measured["widen_exact"]
    assert measured["widen_leaves_fp16"]


def test_importing_the_fix_does_not_import_triton(measured):
    assert not measured["imports_triton_eagerly"]
