"""SGLang's real extend-attention Triton kernel (the interpreter on a CPU) against the fp64 reference."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
import torch
from conftest import SMOKE, smoke_case

from ddbench.backends import get_backend, preferred_device
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.metrics import FAIL, PASS, judge, parity_figures
from ddbench.poison import poisoned_mask

pytestmark = pytest.mark.triton

# ~0.4-1.5 s each under the interpreter: a DDTree, prefix 0, a ragged batch of EAGLE trees, a paged pool.
CASES = ["trees.kimi-k2.6-tp8-h8-bs1-p21-ddtree-b8", "prefix0.", "ragged.", "paged."]
MAX_ROW_ULP = 3.0


@pytest.fixture(scope="module")
def triton_backend():
    imported_early = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
    if imported_early and not torch.cuda.is_available():
        pytest.fail(
            "Triton was imported in this pytest process before TRITON_INTERPRET=1 was set (by an "
            "earlier test module?): its @jit standard library (tl.zeros) is then unusable by the "
            "interpreter. Import Triton only in a subprocess, or after the triton backend has "
            "loaded."
        )
    backend = get_backend("triton")
    available = backend.availability()
    if not available.ok:
        pytest.skip(f"SGLang's Triton kernel cannot run here: {available.detail}")
    return backend


def create_dot():
    from triton.runtime import interpreter

    return interpreter.InterpreterBuilder.create_dot


@pytest.mark.parametrize("label", CASES)
def test_sglang_kernel_matches_fp64_reference(smoke_cases, triton_backend, label):
    case = smoke_case(smoke_cases, label)
    x = generate_inputs(case, preferred_device())
    check_inputs(x)
    truth = get_backend("reference-fp64").run(x)
    x.fresh_output()
    original_dot = create_dot()

    out = triton_backend.run(x)

    assert create_dot() is original_dot, "the bf16 dot fix leaked out of the backend call"
    assert out.dtype == torch.bfloat16 and out.shape == x.o_extend.shape
    assert int(poisoned_mask(out).sum()) == 0, "output elements left unwritten"
    f = parity_figures(out, truth)
    assert (f.nan, f.inf, f.unwritten) == (0, 0, 0)
    assert f.max_row_ulp < MAX_ROW_ULP, f"max row-scaled error {f.max_row_ulp:.3f} ULPs at {f.worst}"
    assert 0.0 < f.mean_row_ulp < 0.4
    assert f.rel_l2 < 6e-3
    (bound,) = [b for b in case.parity if b.candidate == "triton"]  # the Triton kernel's own bound
    assert judge(bound, f, "triton").status == PASS


def test_sglang_kernel_follows_the_tree_mask(smoke_cases, triton_backend):
    """Not vacuous: the kernel given a mask that hides the drafts fails against the truth."""
    case = smoke_case(smoke_cases, "prefix0.")
    x = generate_inputs(case, preferred_device())
    truth = get_backend("reference-fp64").run(x)
    q_len, prefix = x.q_lens[0], x.prefix_lens[0]
    mask = x.custom_mask.clone()
    mask.view(q_len, prefix + q_len)[:, prefix:] = torch.eye(q_len, dtype=torch.bool, device=mask.device)
    wrong_inputs = dataclasses.replace(x, custom_mask=mask)
    wrong_inputs.fresh_output()
    out = triton_backend.run(wrong_inputs)
    (bound,) = [b for b in case.parity if b.candidate == "triton"]  # the Triton kernel's own bound
    verdict = judge(bound, parity_figures(out, truth), "triton")
    assert verdict.status == FAIL
    # ...and matches the reference computed on the same wrong mask: the kernel reads the mask we pass
    same = parity_figures(out, get_backend("reference-fp64").run(wrong_inputs))
    assert same.max_row_ulp < MAX_ROW_ULP


IMPORT_ORDER_SCRIPT = """
import json
import triton  # imported first, e.g. by a user's own backend module, before TRITON_INTERPRET=1 is set
from pathlib import Path
from ddbench.backends import get_backend
from ddbench.inputs import generate_inputs
from ddbench.inputs.suite_file import load_suite_file
(case,) = [c for c in load_suite_file(Path("suites/smoke.json")).cases if c.id.startswith("prefix0.")]
backend = get_backend("triton")
available = backend.availability()
out = {"ok": available.ok, "detail": available.detail}
if available.ok:
    try:
        backend.run(generate_inputs(case))
        out["ran"] = True
    except Exception as err:
        out["ran"], out["error"] = False, f"{type(err).__name__}: {err}"[:300]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path only")
def test_triton_imported_before_the_backend_is_reported_or_works():
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ORDER_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SMOKE.parents[1],
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    if result["ok"]:
        assert result["ran"], f"availability() said ok, then run() failed: {result.get('error')}"
    else:
        assert "TRITON_INTERPRET" in result["detail"], result["detail"]
