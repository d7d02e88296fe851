"""SGLang's own speculative-decoding ops (sglang.kernels.ops.speculative.spec_tree), where they can run.

They are Triton kernels: on a GPU they compile, without one they run under Triton's interpreter. Where
neither works, or this SGLang lacks the op, the caller runs ddbench's own version, and says why.
"""

from __future__ import annotations

import importlib
from typing import Any

from ddbench.backends.interpreter_fix import interpreter_problem

SGLANG_SPEC_TREE = "sglang.kernels.ops.speculative.spec_tree"


def spec_tree_op(name: str) -> tuple[Any, str | None]:
    """(the op, None), or (None, why it cannot run here)."""
    problem = interpreter_problem(SGLANG_SPEC_TREE)
    if problem is not None:
        return None, problem
    try:
        return getattr(importlib.import_module(SGLANG_SPEC_TREE), name), None
    except Exception as err:  # an SGLang without the op
        return None, f"cannot import {SGLANG_SPEC_TREE}.{name}: {type(err).__name__}: {err}"
