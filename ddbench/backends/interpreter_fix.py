"""A scoped fix for Triton's interpreter multiplying raw bf16 bit patterns in `tl.dot`.

Upstream: triton-lang/triton issue #11584 (open). The interpreter stores bfloat16 as uint16 (numpy has no
bf16) and its `create_dot` hands those integers straight to `np.matmul`, so every bf16 `tl.dot` under
TRITON_INTERPRET=1 returns garbage. fp16/fp32 operands are fine. Inside `bf16_dot_fixed()`, bf16 operands
are widened to the fp32 values they encode before the matmul; on exit the original method is restored,
so nothing outside the call sees a patched Triton.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

UPSTREAM_ISSUE = "triton-lang/triton#11584"
_lock = threading.RLock()


def _widen_bf16(handle, interpreter, tl):
    if handle.dtype != tl.bfloat16:
        return handle
    as_fp32 = (handle.data.astype(np.uint32) << 16).view(np.float32)
    return interpreter.TensorHandle(as_fp32, tl.float32)


@contextmanager
def bf16_dot_fixed() -> Iterator[None]:
    import triton.language as tl
    from triton.runtime import interpreter

    with _lock:
        original = interpreter.InterpreterBuilder.create_dot

        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            a, b = _widen_bf16(a, interpreter, tl), _widen_bf16(b, interpreter, tl)
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)

        interpreter.InterpreterBuilder.create_dot = create_dot
        try:
            yield
        finally:
            interpreter.InterpreterBuilder.create_dot = original


def use_interpreter_without_gpu() -> None:
    """On a machine without CUDA, Triton must interpret; it decides when a kernel is first decorated, so
    this runs before any backend module imports Triton (the CLI and the pytest plugin call it first)."""
    import os

    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def interpreter_problem(module: str) -> str | None:
    """Before importing SGLang's Triton `module` on a machine without CUDA: set TRITON_INTERPRET=1, or say
    why it is too late (Triton or the module was imported before, compiled kernels with no GPU to run)."""
    import os
    import sys

    import torch

    if torch.cuda.is_available():
        return None
    early = [m for m in ("triton", module) if m in sys.modules]
    if early and os.environ.get("TRITON_INTERPRET") != "1":
        return (
            f"{early[0]} was imported before TRITON_INTERPRET=1 was set; "
            "SGLang's kernels cannot run on this CPU-only machine (set TRITON_INTERPRET=1 first)"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    return None
