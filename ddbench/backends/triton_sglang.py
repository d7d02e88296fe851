"""SGLang's real Triton extend-attention kernel, called as SGLang's Triton backend calls it on target-verify.

On a GPU it is compiled; on the CPU it runs under Triton's interpreter (TRITON_INTERPRET=1, which must be
set before SGLang's module defines its kernels) with the scoped bf16 `tl.dot` fix. `prepare` imports the
module and builds the argument list; the launch is SGLang's call itself (its own host-side work included, as
in serving).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from ddbench.backends.interpreter_fix import UPSTREAM_ISSUE, bf16_dot_fixed, interpreter_problem
from ddbench.backends.protocol import Availability, Launch
from ddbench.inputs.layout import VerifyInputs
from ddbench.sglang_target import EXTEND_ATTENTION_MODULE

SGLANG_MODULE = EXTEND_ATTENTION_MODULE


class SglangTritonBackend:
    name = "triton"

    def __init__(self) -> None:
        self._fn: Callable[..., Any] | None = None
        self._interpreted = not torch.cuda.is_available()
        self._problem: str | None = None

    def _load(self) -> Callable[..., Any]:
        if self._fn is not None:
            return self._fn
        if self._problem:
            raise RuntimeError(self._problem)
        self._problem = interpreter_problem(SGLANG_MODULE)
        if self._problem:
            raise RuntimeError(self._problem)
        try:
            import importlib

            module = importlib.import_module(SGLANG_MODULE)
        except Exception as err:  # any import failure means "unavailable", with the reason
            self._problem = f"cannot import {SGLANG_MODULE}: {type(err).__name__}: {err}"
            raise RuntimeError(self._problem) from None
        self._fn = module.extend_attention_fwd
        return self._fn

    def availability(self) -> Availability:
        try:
            self._load()
        except RuntimeError as err:
            return Availability.no(str(err))
        import sglang
        import triton

        where = (
            f"Triton interpreter on the CPU, bf16 dot fix for {UPSTREAM_ISSUE}"
            if self._interpreted
            else f"compiled for {torch.cuda.get_device_name()}"
        )
        return Availability.yes(f"sglang {sglang.__version__}, triton {triton.__version__}, {where}")

    def prepare(self, inputs: VerifyInputs) -> Launch:
        fn = self._load()
        args, kwargs = extend_attention_arguments(inputs)
        out, interpreted = inputs.o_extend, self._interpreted

        def sglang_call() -> torch.Tensor:
            with bf16_dot_fixed() if interpreted else contextlib.nullcontext():
                fn(*args, **kwargs)
            return out

        return sglang_call

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        return self.prepare(inputs)()


def extend_attention_arguments(x: VerifyInputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`extend_attention_fwd`'s arguments as SGLang's Triton backend passes them on target-verify."""
    args = (
        x.q_extend,
        x.k_extend,
        x.v_extend,
        x.o_extend,
        x.k_buffer,
        x.v_buffer,
        x.qo_indptr,
        x.kv_indptr,
        x.kv_indices,
        x.custom_mask,
        x.is_causal,
        x.mask_indptr,
        x.max_len_extend,
        1.0,  # k_scale: bf16 pool, no descale (SGLang passes 1.0)
        1.0,  # v_scale
        x.sm_scale,  # positional, as SGLang passes layer.scaling
    )
    kwargs = {
        "logit_cap": 0.0,
        "skip_prefix_custom_mask": True,  # SGLang relies on this default: prefix columns are not read
        "page_size": x.page_size,
        "extend_seq_lens_cpu": list(x.q_lens),
    }
    return args, kwargs


def call_extend_attention(fn: Callable[..., Any], x: VerifyInputs) -> None:
    """Call `extend_attention_fwd` (or a wrapper) as SGLang's Triton backend does on target-verify."""
    args, kwargs = extend_attention_arguments(x)
    fn(*args, **kwargs)
